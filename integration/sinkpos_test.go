//go:build integration

package integration

// Sink start positions: the migration of a positions table in the legacy
// format (before positions were keyed by sink), legacy rows that cannot be told
// apart, and a batch retried while the lag metric is read, the sink is
// stopped, or its partitions move.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// legacyPositionsDDL is the positions table in the legacy format, keyed by
// topic and partition only, which migratePositionsSQL in
// processor/internal/pgsink/schema.go upgrades.
const legacyPositionsDDL = `CREATE TABLE %s (
	topic       text        NOT NULL,
	partition   integer     NOT NULL,
	next_offset bigint      NOT NULL,
	owner       text        NOT NULL DEFAULT '',
	updated_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, partition)
)`

// positionRow is one row of a migrated positions table.
type positionRow struct {
	sink, topic, topicID, target string
	partition                    int32
	next                         int64
}

func positionRows(t *testing.T, pool *pgxpool.Pool, table string) []positionRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), "SELECT sink, topic, topic_id, target, partition, next_offset FROM "+table+" ORDER BY sink, topic, partition")
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	var out []positionRow
	for rows.Next() {
		var r positionRow
		if err := rows.Scan(&r.sink, &r.topic, &r.topicID, &r.target, &r.partition, &r.next); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// A legacy positions table with rows for two partitions (and a row of
// another topic): the sink migrates it, claims its rows, resumes from them
// (nothing before them is loaded; everything after them is), and stores
// its topic ID and table beside them. The other topic's row is kept as it
// was.
func TestSinkPosMigratesLegacyTable(t *testing.T) {
	pool := pgPool(t)
	var pos string
	c := newLoadSink(t, pool, "spmig", 2, "{ event_id: event_id, body: $value }", "", func(schema string) {
		pos = schema + ".exactly_positions"
		pgExec(t, pool, fmt.Sprintf(legacyPositionsDDL, pos))
	})
	kcatProducePartition(t, c.in, 0, eventLines("old0", 0, 6, 0))
	kcatProducePartition(t, c.in, 1, eventLines("old1", 0, 10, 0))
	pgExec(t, pool, fmt.Sprintf(`INSERT INTO %s (topic, partition, next_offset, owner) VALUES ('%s', 0, 4, 'i-old'), ('%s', 1, 10, 'i-old'), ('other.topic', 0, 77, 'i-old')`, pos, c.in, c.in))
	kcatProducePartition(t, c.in, 0, eventLines("new0", 0, 5, 0))
	kcatProducePartition(t, c.in, 1, eventLines("new1", 0, 5, 0))
	addr := freeAddr(t)
	p := c.run(t, "i-1", addr)
	// p0: offsets 4 and 5 of old0 and the 5 new; p1: the 5 new.
	waitRows(t, pool, c.table, 12, 45*time.Second, p)
	eventually(t, 30*time.Second, func() bool { return c.positionsAtEnd(t, pool) }, func() string {
		return fmt.Sprintf("positions %v", positionRows(t, pool, pos))
	})
	for _, q := range []struct {
		where string
		want  int64
	}{{"event_id LIKE 'old1-%'", 0}, {"event_id IN ('old0-0', 'old0-1', 'old0-2', 'old0-3')", 0}, {"event_id IN ('old0-4', 'old0-5')", 2}, {"event_id LIKE 'new%'", 10}} {
		if n := pgInt(t, pool, "SELECT count(*) FROM "+c.table+" WHERE "+q.where); n != q.want {
			t.Errorf("rows where %s: %d, want %d", q.where, n, q.want)
		}
	}
	if v, _ := sum(scrape(t, addr), "exactly_sink_rows_written_total", map[string]string{"sink": c.name}); v != 12 {
		t.Errorf("rows_written_total %v, want 12", v)
	}
	id, _ := topicInfo(t, c.in)
	want := []positionRow{
		{sink: "", topic: "other.topic", partition: 0, next: 77},
		{sink: c.name, topic: c.in, topicID: id, target: c.table, partition: 0, next: 11},
		{sink: c.name, topic: c.in, topicID: id, target: c.table, partition: 1, next: 15},
	}
	if got := positionRows(t, pool, pos); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("positions:\n got %v\nwant %v", got, want)
	}
	if pk := pgInt(t, pool, `SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'
		AND conkey = ARRAY(SELECT attnum FROM pg_attribute WHERE attrelid = $1::regclass AND attname IN ('sink', 'topic', 'partition') ORDER BY array_position(ARRAY['sink', 'topic', 'partition']::name[], attname))`, pos); pk != 1 {
		t.Errorf("primary key of %s is not (sink, topic, partition)", pos)
	}
	p.stop()
}

// Legacy rows of a topic that two sinks of one file read into one
// positions table: they cannot be told apart, so neither sink claims them
// and each loads the whole topic; the rows are kept, marked unclaimed.
func TestSinkPosAmbiguousLegacyRows(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "spamb")
	pos := schema + ".exactly_positions"
	pgExec(t, pool, fmt.Sprintf(legacyPositionsDDL, pos))
	in, dlq := uniqueName("spamb_in"), uniqueName("spamb_dlq")
	a, b := uniqueName("spamb_a"), uniqueName("spamb_b")
	cols := "{ event_id: event_id, body: $value }"
	topo := userTopology(t, []fileTopic{{name: in, parts: 2}, {name: dlq, parts: 1}}, "sinks:\n"+
		jsonSinkItem(a, in, dlq, schema+".ta", "", cols, "")+jsonSinkItem(b, in, dlq, schema+".tb", "", cols, ""))
	kcatProduce(t, in, eventLines("e", 0, 40, 0))
	pgExec(t, pool, fmt.Sprintf(`INSERT INTO %s (topic, partition, next_offset) VALUES ('%s', 0, 15), ('%s', 1, 15)`, pos, in, in))
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "i-1", "--log-level", "info")
	waitRows(t, pool, schema+".ta", 40, 45*time.Second, p)
	waitRows(t, pool, schema+".tb", 40, 45*time.Second, p)
	if n := pgInt(t, pool, "SELECT count(*) FROM "+pos+" WHERE sink = '?unclaimed' AND next_offset = 15"); n != 2 {
		t.Errorf("%d legacy rows marked unclaimed, want 2: %v", n, positionRows(t, pool, pos))
	}
	p.stop()
}

// retrySink is a sink whose table has a trigger that fails every insert
// with SQLSTATE 53300 (a database error, retried) until released.
func retrySink(t *testing.T, pool *pgxpool.Pool, prefix string, parts int) (loadSink, func()) {
	t.Helper()
	c := newLoadSink(t, pool, prefix, parts, "{ event_id: event_id, body: $value }", "", func(schema string) {
		pgExec(t, pool, "CREATE TABLE "+schema+".events (event_id text PRIMARY KEY, body jsonb)")
		pgExec(t, pool, "CREATE FUNCTION "+schema+`.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'held by the test' USING ERRCODE = '53300'; END $$`)
		pgExec(t, pool, "CREATE TRIGGER refuse BEFORE INSERT ON "+schema+".events FOR EACH ROW EXECUTE FUNCTION "+schema+".refuse()")
	})
	return c, func() { pgExec(t, pool, "DROP TRIGGER refuse ON "+c.table) }
}

// retryingSink starts instance id of a retrySink (prefix, parts
// partitions) over the events e-0 to e-<n-1>, and waits until it retries
// its first batch. It returns the pool, the sink, its release and the
// process.
func retryingSink(t *testing.T, prefix string, parts, n int, id string) (*pgxpool.Pool, loadSink, func(), *proc) {
	t.Helper()
	pool := pgPool(t)
	c, release := retrySink(t, pool, prefix, parts)
	kcatProduce(t, c.in, eventLines("e", 0, n, 0))
	p := c.run(t, id, "")
	waitLogged(t, p, "batch failed; retrying", 2, 30*time.Second, "the batch is not being retried")
	return pool, c, release, p
}

// While a batch is retried, the lag metric equals `exactly status`'s lag
// (the records not stored yet); once it commits, both read 0.
func TestSinkPosLagDuringRetry(t *testing.T) {
	pool := pgPool(t)
	c, release := retrySink(t, pool, "splag", 1)
	kcatProducePartition(t, c.in, 0, eventLines("e", 0, 4, 0))
	addr := freeAddr(t)
	p := c.run(t, "i-1", addr)
	waitMetrics(t, p, addr)
	lbl := map[string]string{"sink": c.name}
	eventually(t, 30*time.Second, func() bool {
		v, _ := sum(scrape(t, addr), "exactly_sink_retries_total", lbl)
		return v >= 2
	}, func() string { return "the batch is not being retried" })
	check := func(want int64) {
		t.Helper()
		eventually(t, 20*time.Second, func() bool {
			m, st, ok := lagsAgree(t, addr, c.topo, c.name)
			return ok && m == float64(want) && st == want
		}, func() string {
			m, st, _ := lagsAgree(t, addr, c.topo, c.name)
			return fmt.Sprintf("lag metric %v, status lag %d; want %d and %d", m, st, want, want)
		})
	}
	check(4)
	// Records that come during the retry count too.
	kcatProducePartition(t, c.in, 0, eventLines("e", 4, 3, 0))
	check(7)
	release()
	waitRows(t, pool, c.table, 7, 45*time.Second, p)
	check(0)
	p.stop()
}

// A sink stopped while it retries a batch exits cleanly without storing
// it; the next run loads every record once.
func TestSinkPosShutdownMidRetry(t *testing.T) {
	pool, c, release, p := retryingSink(t, "spstop", 2, 30, "i-1")
	p.stop()
	if got := storedPositions(t, pool, c.schema+".exactly_positions", c.in); len(got) != 0 {
		t.Errorf("positions stored by a batch that never committed: %v", got)
	}
	release()
	p = c.run(t, "i-1", "")
	c.waitLoaded(t, pool, 30, 45*time.Second, p)
	p.stop()
}

// A second instance joins while the first retries a batch (rebalances are
// blocked while it holds polled records): once the database answers,
// every record is loaded once and the positions reach the end, whichever
// instance ends up with each partition.
func TestSinkPosRevokedMidRetry(t *testing.T) {
	pool, c, release, a := retryingSink(t, "sprev", 4, 200, "i-a")
	b := c.run(t, "i-b", "")
	waitLogged(t, b, "sink starting", 1, 30*time.Second, "instance b did not start")
	release()
	c.waitLoaded(t, pool, 200, 60*time.Second, a, b)
	kcatProduce(t, c.in, eventLines("e", 200, 40, 0))
	waitRows(t, pool, c.table, 240, 60*time.Second, a, b)
	a.stop()
	b.stop()
}

// countLines counts the occurrences of s in logs.
func countLines(logs, s string) int { return strings.Count(logs, s) }

// A stored position above the partition's high watermark under the
// topic's own ID (the log was truncated, or the row edited) reads the
// partition from its log start: the records produced while the sink was
// stopped are loaded, the re-read ones are duplicates, the error names
// the partition, the stored offset and the high watermark, it is counted
// (reason truncated), and the next commit stores the lower position, so
// the next start resumes there with no second rewind.
func TestSinkPosAboveHighWatermarkSameTopic(t *testing.T) {
	pool := pgPool(t)
	c := newLoadSink(t, pool, "sinkposhw", 1, "{ event_id: event_id, body: $value }", "", nil)
	positions := c.schema + ".exactly_positions"
	c.loadOnce(t, pool, "sinkpos-1", eventLines("a", 0, 5, 0), 5)

	pgExec(t, pool, "UPDATE "+positions+" SET next_offset = 1000 WHERE sink = '"+c.name+"'")
	kcatProduce(t, c.in, eventLines("b", 0, 3, 0))
	addr := freeAddr(t)
	p := c.run(t, "sinkpos-1", addr)
	waitRows(t, pool, c.table, 8, 30*time.Second, p)
	eventually(t, 30*time.Second, func() bool { return storedPositions(t, pool, positions, c.in)[0] == 8 },
		func() string {
			return fmt.Sprintf("stored positions %v, want p0 at 8", storedPositions(t, pool, positions, c.in))
		})
	if n, _ := sum(scrape(t, addr), "exactly_sink_topic_recreations_total", map[string]string{"reason": "truncated"}); n != 1 {
		t.Errorf("exactly_sink_topic_recreations_total{reason=truncated} = %v, want 1", n)
	}
	logs := p.logs.String()
	var line string
	for l := range strings.Lines(logs) {
		if strings.Contains(l, "stored position is above the partition's high watermark") {
			line = l
		}
	}
	for _, want := range []string{"level=ERROR", "topic=" + c.in, "partition=0", "stored_offset=1000", "high_watermark=8", "log start"} {
		if !strings.Contains(line, want) {
			t.Errorf("the truncation's log line %q lacks %q", line, want)
		}
	}
	p.stop()

	kcatProduce(t, c.in, eventLines("c", 0, 2, 0))
	p = c.run(t, "sinkpos-1", "")
	c.waitLoaded(t, pool, 10, 30*time.Second, p)
	if strings.Contains(p.logs.String(), "above the partition's high watermark") {
		t.Errorf("the third start rewound again:\n%s", tail(p.logs.String(), 10))
	}
	if rows, distinct := rowStats(t, pool, c.table); rows != 10 || distinct != 10 {
		t.Errorf("%d rows, %d distinct, want 10", rows, distinct)
	}
	p.stop()
}
