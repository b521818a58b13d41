//go:build integration

package pgsink_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// changeValueFields are the fields of table vals's change events, as
// Debezium's Postgres connector types them with schemas.enable: bit(5)
// and a plain varbit as Bits, int[], uuid[] and date[] arrays, a
// numeric(10,2) as Decimal, and a date.
const changeValueFields = `[{"type":"int64","field":"id"},` +
	`{"type":"bytes","optional":true,"name":"io.debezium.data.Bits","parameters":{"length":"5"},"field":"b"},` +
	`{"type":"bytes","optional":true,"name":"io.debezium.data.Bits","parameters":{"length":"2147483647"},"field":"vb"},` +
	`{"type":"array","optional":true,"items":{"type":"int32","optional":true},"field":"ia"},` +
	`{"type":"array","optional":true,"items":{"type":"string","optional":true,"name":"io.debezium.data.Uuid"},"field":"ua"},` +
	`{"type":"array","optional":true,"items":{"type":"int32","optional":true,"name":"io.debezium.time.Date"},"field":"da"},` +
	`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"},"field":"n"},` +
	`{"type":"int32","optional":true,"name":"io.debezium.time.Date","field":"d"}]`

// TestSinkDebeziumChangeValues loads change events whose values mean more
// than their JSON: bits into bit(5), and a plain varbit's (length
// 2^31-1) refused at once; the placeholder as Debezium writes it into
// int[], uuid[] and date[] (the stored values kept); a whole Decimal into
// integer and a fractional or empty one refused; the last date Postgres
// holds; and an event whose key is composite refused.
func TestSinkDebeziumChangeValues(t *testing.T) {
	topic := newTopic(t, "dbz_vals")
	b64 := func(b ...byte) string { return `"` + base64.StdEncoding.EncodeToString(b) + `"` }
	event := func(op, after string) string {
		return string(fmt.Appendf(nil, `{"schema":%s,"payload":{"before":null,"after":%s,"op":%q}}`,
			fmt.Sprintf(dbzSchema, changeValueFields), after, op))
	}
	row := func(id int, b, vb, ia, ua, da, n, d string) string {
		return fmt.Sprintf(`{"id":%d,"b":%s,"vb":%s,"ia":%s,"ua":%s,"da":%s,"n":%s,"d":%s}`, id, b, vb, ia, ua, da, n, d)
	}
	var phInts []string
	for _, c := range []byte(placeholder) {
		phInts = append(phInts, fmt.Sprint(c))
	}
	ph := "[" + strings.Join(phInts, ",") + "]"
	phUUID := `["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]`
	lines := [][]byte{
		[]byte(`{"id":1}|` + event("c", row(1, b64(0x05), "null", "[1,2]", `["0b8f5a2e-0000-4000-8000-000000000000"]`, "[19723,-1]", b64(0xfe, 0xd4), "2145042905"))),
		[]byte(`{"id":1}|` + event("u", row(1, b64(0x06), "null", ph, phUUID, ph, b64(0x01, 0x2c), "0"))),
		[]byte(`{"id":2}|` + event("c", row(2, "null", b64(0x01), "null", "null", "null", "null", "null"))),
		[]byte(`{"id":3}|` + event("c", row(3, "null", "null", "null", "null", "null", b64(0xfe, 0xbb), "null"))),
		[]byte(`{"id":4}|` + event("c", row(4, "null", "null", "null", "null", "null", `""`, "null"))),
		[]byte(`{"tenant":2,"id":1}|` + event("u", row(1, "null", "null", "null", "null", "null", "null", "null"))),
	}
	kcatProduce(t, topic, lines)

	pool := pgPool(t)
	ctx := context.Background()
	schema := uniqueName("it_dbzv")
	for _, q := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + schema + ".vals (id bigint PRIMARY KEY, b bit(5), vb varbit, ia int[], ua uuid[], da date[], n integer, d date)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
	})
	var cols []pgsink.Column
	for _, c := range []string{"id", "b", "vb", "ia", "ua", "da", "n", "d"} {
		cols = append(cols, pgsink.Column{Name: c, Source: c})
	}
	s, err := pgsink.New(pgsink.Config{
		Sink: uniqueName("dbzv"), InstanceID: "v1", Brokers: []string{brokers(t)},
		Input: topic, DeadLetterTable: schema + ".dead", DSN: pgDSN(t),
		Table: schema + ".vals", PositionsTable: schema + ".positions", EventID: "id", Columns: cols,
		CommitInterval: 50 * time.Millisecond, MaxRecords: 100, Mode: topology.ModeUpsert,
		Envelope: topology.EnvelopeDebezium, Tombstones: topology.TombstonesSkip, UnavailableValue: placeholder,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var next int64
		err := pool.QueryRow(ctx, "SELECT coalesce(sum(next_offset), 0) FROM "+schema+".positions").Scan(&next)
		if err == nil && next >= int64(len(lines)) && s.Stats().DeadLettered >= 4 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("stored position %d of %d in 2 minutes (%v), stats %+v", next, len(lines), err, s.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("sink: %v", err)
	}

	dead := psqlLines(t, "SELECT reason || ': ' || message FROM "+schema+".dead ORDER BY \"offset\"")
	got := psqlLines(t, "SELECT id, b, vb, ia, ua, da, n, d FROM "+schema+".vals ORDER BY id")
	want := []string{`1|00110||{1,2}|{0b8f5a2e-0000-4000-8000-000000000000}|{2024-01-01,1969-12-31}|3|1970-01-01`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s\ndead letters:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), strings.Join(dead, "\n"))
	}
	for i, w := range []string{
		`decode: column "vb": field "vb" (logical type io.debezium.data.Bits): a bit varying column cannot hold bits exactly`,
		`decode: column "n": field "n" (logical type org.apache.kafka.connect.data.Decimal): a integer column cannot hold the fraction of -3.25`,
		`decode: column "n": field "n" (logical type org.apache.kafka.connect.data.Decimal): no bytes`,
		`event_id: key fields do not match the key column: the key's fields ("tenant", "id") name the row`,
	} {
		if i >= len(dead) || !strings.HasPrefix(dead[i], w) {
			t.Fatalf("dead letters:\n%s\nwant %d starting %q", strings.Join(dead, "\n"), i, w)
		}
	}
	if len(dead) != 4 {
		t.Fatalf("dead letters: %q; want 4", dead)
	}
}
