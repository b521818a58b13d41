//go:build integration

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The Debezium JDBC sink peer: what users who load change streams into
// Postgres run today, at least once with idempotent upserts. It runs in a
// standalone Kafka Connect worker (deploy/local/connect.sh) and loads a
// second topic with the same records, keyed alike, in the form it reads:
// JSON with schemas.enable=true, whose payload is the row (event_id, and
// body, the same 1 KiB JSON as text, of Debezium's io.debezium.data.Json,
// which it binds as jsonb). The connector reads about 1.3 KiB per record
// where the sink reads 1 KiB, and parses the envelope where the sink
// parses the record: the same work per row, give or take the schema.
const (
	caseJDBCInsert   = "Debezium JDBC sink -> Postgres, insert, defaults"
	caseJDBCUpsert   = "Debezium JDBC sink -> Postgres, upsert, defaults"
	caseJDBCInsertM  = "Debezium JDBC sink -> Postgres, insert, matched"
	caseJDBCUpsertM  = "Debezium JDBC sink -> Postgres, upsert, matched"
	jdbcVersion      = "3.5.0.Final"
	jdbcConnectorCls = "io.debezium.connector.jdbc.JdbcSinkConnector"
)

// jdbcEnvelopeSchema is the Connect schema of the peer's records.
const jdbcEnvelopeSchema = `{"type":"struct","name":"bench.event","optional":false,"fields":[` +
	`{"field":"event_id","type":"string","optional":false},` +
	`{"field":"body","type":"string","optional":true,"name":"io.debezium.data.Json","version":1}]}`

// jdbcValue is record i in the peer's form.
func jdbcValue(i int) []byte {
	body, _ := json.Marshal(string(value(i)))
	return fmt.Appendf(nil, `{"schema":%s,"payload":{"event_id":%q,"body":%s}}`, jdbcEnvelopeSchema, eventID(i), body)
}

// jdbcMatched are the connector's settings matched to the sink's batch:
// one write of up to the sink's max_records rows, polled at once, on one
// connection, as the sink writes a batch in one transaction on one.
var jdbcMatched = map[string]string{
	"batch.size":                                  fmt.Sprint(sinkMaxRecords),
	"consumer.override.max.poll.records":          fmt.Sprint(sinkMaxRecords),
	"connection.pool.min_size":                    "1",
	"connection.pool.max_size":                    "1",
	"consumer.override.fetch.max.wait.ms":         "100",
	"consumer.override.isolation.level":           "read_committed",
	"consumer.override.auto.offset.reset":         "earliest",
	"consumer.override.max.partition.fetch.bytes": "1048576",
}

// jdbcDefaults names the connector's and Connect's defaults for the note.
const jdbcDefaults = "Debezium's defaults: batch.size=500, connection.pool.min_size=5 max_size=32; Connect's consumer max.poll.records=500"

// jdbc runs the peer's four cases, each into its own table, and checks
// each table against the sink's of the same mode (want[mode]).
func (r *runner) jdbc(ctx context.Context, pool *pgxpool.Pool, want map[string]string) error {
	logf("deploy/local/connect.sh fetch debezium-jdbc")
	connect := filepath.Join(r.cfg.root, "deploy", "local", "connect.sh")
	if out, err := exec.CommandContext(ctx, connect, "fetch", "debezium-jdbc").CombinedOutput(); err != nil {
		return fmt.Errorf("fetch the JDBC sink connector: %w: %s", err, out)
	}
	topic, err := r.k.topic(ctx, "jdbc_in", 0)
	if err != nil {
		return err
	}
	if err := r.k.awaitTopics(ctx, topic); err != nil {
		return err
	}
	logf("filling %s (the JDBC sink's form of the input)", topic)
	if err := r.fillJDBC(ctx, topic); err != nil {
		return err
	}
	worker := "bench-jdbc-" + r.k.run
	props := filepath.Join(r.dir, "jdbc-worker.properties")
	if err := os.WriteFile(props, []byte(strings.Join([]string{
		"key.converter=org.apache.kafka.connect.storage.StringConverter",
		"value.converter=org.apache.kafka.connect.json.JsonConverter",
		"value.converter.schemas.enable=true",
		"connector.client.config.override.policy=All",
		"offset.flush.interval.ms=10000",
	}, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	logf("connect.sh start %s", worker)
	start := exec.CommandContext(ctx, connect, "start", worker, props)
	// The JVM's own JIT and GC, with the Kafka Streams peer's heap: not the
	// quick-start options of a test worker.
	start.Env = append(os.Environ(), "CONNECT_JVM_OPTS=", "CONNECT_HEAP_OPTS=-Xms"+r.cfg.ksHeap+" -Xmx"+r.cfg.ksHeap)
	out, err := start.Output()
	if err != nil {
		return fmt.Errorf("start the Connect worker: %w", err)
	}
	defer func() {
		if out, err := exec.Command(connect, "remove", worker).CombinedOutput(); err != nil {
			logf("connect.sh remove %s: %v: %s", worker, err, out)
		}
	}()
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return fmt.Errorf("connect.sh start printed no URL")
	}
	rest := lines[len(lines)-1]
	for _, c := range []struct {
		name, mode string
		matched    bool
	}{
		{caseJDBCInsert, "insert", false},
		{caseJDBCUpsert, "upsert", false},
		{caseJDBCInsertM, "insert", true},
		{caseJDBCUpsertM, "upsert", true},
	} {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.jdbcCase(ctx, pool, rest, topic, c.name, c.mode, c.matched, want[c.mode])
	}
	return nil
}

// fillJDBC writes every input record in the peer's form, keyed alike.
func (r *runner) fillJDBC(ctx context.Context, topic string) error {
	var (
		mu       sync.Mutex
		firstErr error
	)
	for i := range int(r.total) {
		r.k.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(eventID(i)), Value: jdbcValue(i)}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	if err := r.k.cl.Flush(ctx); err != nil {
		return err
	}
	return firstErr
}

// jdbcCase loads topic with one connector in mode and compares its table
// with the sink's (digest want).
func (r *runner) jdbcCase(ctx context.Context, pool *pgxpool.Pool, rest, topic, label, mode string, matched bool, want string) {
	res := caseResult{Name: label, Group: "sinkpeer", Records: r.total,
		Note: "debezium-connector-jdbc " + jdbcVersion + " (Maven Central has no 3.6.1.Final of it), standalone Connect 4.4.0 (JVM defaults, heap -Xms/-Xmx" + r.cfg.ksHeap + "), 1 task, insert.mode=" + mode}
	if matched {
		res.Note += "; matched to the sink: " + jdbcMatchedNote()
	} else {
		res.Note += "; " + jdbcDefaults
	}
	defer func() { r.rep.add(res) }()
	logf("%s", label)
	name := fmt.Sprintf("jdbc_%s", mode)
	if matched {
		name += "_m"
	}
	schema := r.k.name(name)
	defer func() {
		if !r.cfg.keep {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
	}()
	tbl, err := createEvents(ctx, pool, schema)
	if err != nil {
		res.Error = err.Error()
		return
	}
	connector := r.k.name(name)
	r.k.group("connect-" + connector)
	cfg, err := r.jdbcConfig(topic, schema, mode, matched)
	if err != nil {
		res.Error = err.Error()
		return
	}
	start := time.Now()
	if err := restJSON(ctx, http.MethodPut, rest+"/connectors/"+connector+"/config", cfg); err != nil {
		res.Error = err.Error()
		return
	}
	defer func() {
		if err := restJSON(context.Background(), http.MethodDelete, rest+"/connectors/"+connector, nil); err != nil {
			logf("delete connector %s: %v", connector, err)
		}
	}()
	count := func(ctx context.Context) (int64, error) {
		var n int64
		err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.Sanitize()).Scan(&n)
		return n, err
	}
	m, err := r.awaitRows(ctx, count, start)
	if err != nil {
		res.Error = fmt.Sprintf("%v (%s)", err, connectorState(ctx, rest, connector))
		return
	}
	res.RecordsPerS = m.rate()
	res.WallS = m.last.Sub(start).Seconds()
	got, err := tableDigest(ctx, pool, tbl)
	switch {
	case err != nil:
		res.Error = err.Error()
	case want == "":
		res.Note += "; values not compared (the sink's table of this mode is missing)"
	case got != want:
		res.Error = fmt.Sprintf("rows differ from the sink's table (digest %s, the sink's %s)", got, want)
	default:
		res.Note += "; same rows and values as the sink's table"
	}
}

// jdbcConfig is the connector's configuration: topic into schema.events,
// in mode, with jdbcMatched when matched.
func (r *runner) jdbcConfig(topic, schema, mode string, matched bool) (map[string]string, error) {
	u, err := url.Parse(r.cfg.pgDSN)
	if err != nil {
		return nil, fmt.Errorf("PG_DSN: %w", err)
	}
	pass, _ := u.User.Password()
	cfg := map[string]string{
		"connector.class":        jdbcConnectorCls,
		"tasks.max":              "1",
		"topics":                 topic,
		"connection.url":         "jdbc:postgresql://" + u.Host + u.Path,
		"connection.username":    u.User.Username(),
		"connection.password":    pass,
		"insert.mode":            mode,
		"primary.key.mode":       "record_value",
		"primary.key.fields":     "event_id",
		"collection.name.format": schema + ".events",
		"schema.evolution":       "none",
	}
	if matched {
		for k, v := range jdbcMatched {
			cfg[k] = v
		}
	}
	return cfg, nil
}

// awaitRows samples count until it reaches the input's records, and
// measures the rate as watch does.
func (r *runner) awaitRows(ctx context.Context, count progress, start time.Time) (measured, error) {
	m := measured{total: r.total, started: start}
	deadline := time.Now().Add(r.k.timeoutFor())
	var last int64
	for {
		if time.Now().After(deadline) {
			return m, fmt.Errorf("timed out after %s at %d of %d rows", r.k.timeoutFor(), last, r.total)
		}
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-time.After(100 * time.Millisecond): // a count of the table: sampled less often than a position
		}
		n, err := count(ctx)
		if err != nil {
			continue
		}
		now := time.Now()
		if last = n; n > 0 && m.first.IsZero() {
			m.first, m.atFirst = now, n
		}
		if n >= r.total {
			m.last = now
			return m, nil
		}
	}
}

// jdbcMatchedNote lists jdbcMatched, sorted.
func jdbcMatchedNote() string {
	var parts []string
	for k, v := range jdbcMatched {
		parts = append(parts, strings.TrimPrefix(k, "consumer.override.")+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// tableDigest is the count and an md5 of the md5s of every (event_id,
// body) of tbl, in event_id order, body as jsonb's text.
func tableDigest(ctx context.Context, pool *pgxpool.Pool, tbl pgx.Identifier) (string, error) {
	var n int64
	var sum string
	err := pool.QueryRow(ctx, "SELECT count(*), coalesce(md5(string_agg(md5(event_id || '|' || body::text), '' ORDER BY event_id)), '') FROM "+tbl.Sanitize()).Scan(&n, &sum)
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", tbl.Sanitize(), err)
	}
	return fmt.Sprintf("%d rows, md5 %s", n, sum), nil
}

// restJSON sends body (JSON, unless nil) to Connect's REST API.
func restJSON(ctx context.Context, method, u string, body any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, msg)
	}
	return nil
}

// connectorState is the connector's status from the REST API, for an
// error.
func connectorState(ctx context.Context, rest, connector string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rest+"/connectors/"+connector+"/status", nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
	return string(b)
}
