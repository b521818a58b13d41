//go:build integration

package integration

// A sink with dead_letter: { table: ... } records each rejected record
// exactly once, in the transaction of its batch's rows and positions,
// across a SIGKILL at each of the sink's failpoints.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dlBad is one kind of rejected record in TestSinkDeadLetterTableExactlyOnce.
type dlBad struct {
	reason, sqlstate string // sqlstate "" for none
	value            func(id string) string
}

var dlBads = []dlBad{
	{reason: "decode", value: func(id string) string { return `{"event_id":"` + id + `", not json` }},
	{reason: "event_id", value: func(string) string { return `{"n":1,"qty":1}` }},
	// Postgres rejects these; the load's savepoint bisection locates them.
	{reason: "postgres", sqlstate: "22P02", value: func(id string) string { return `{"event_id":"` + id + `","n":"many","qty":1}` }},
	{reason: "postgres", sqlstate: "23514", value: func(id string) string { return `{"event_id":"` + id + `","n":1,"qty":-5}` }},
}

func TestSinkDeadLetterTableExactlyOnce(t *testing.T) {
	const n = 10000
	pool := pgPool(t)
	schema := freshSchema(t, pool, "s17b_dlt")
	name, in := uniqueName("s17b-dlt"), uniqueName("s17b_dlt_in")
	table, dead := schema+".events", schema+".dead_letters"
	// Typed columns and a check: Postgres rejects a string for n and a
	// negative qty.
	pgExec(t, pool, "CREATE TABLE "+table+" (event_id text PRIMARY KEY, n integer NOT NULL, qty integer CHECK (qty >= 0))")
	topo := userTopology(t, []fileTopic{{name: in, parts: 3}}, fmt.Sprintf(`sinks:
  - name: %s
    input: { topic: %s, format: json }
    dead_letter: { table: %s }
    postgres:
      dsn: ${PG_DSN}
      table: %s
      event_id: event_id
      columns: { event_id: event_id, n: n, qty: qty }
    commit: { interval: 100ms, max_records: 700 }
`, name, in, dead, table))

	// 100 of 10,000 rejected, 25 of each kind, spread over the input.
	lines := make([][]byte, 0, n)
	badKeys := map[string]dlBad{}
	for i := range n {
		id := fmt.Sprintf("e-%d", i)
		v := fmt.Sprintf(`{"event_id":"%s","n":%d,"qty":%d}`, id, i, i%7)
		if i%100 == 37 {
			b := dlBads[(i/100)%len(dlBads)]
			v, badKeys[id] = b.value(id), b
		}
		lines = append(lines, []byte(id+"|"+v))
	}
	if len(badKeys) != 100 {
		t.Fatalf("%d bad records, want 100", len(badKeys))
	}
	kcatProduce(t, in, lines)

	// Where each record landed, read back with kcat.
	type src struct{ key, value string }
	at := map[[2]int64]src{}
	for _, r := range kcatRead(t, in) {
		p, _ := strconv.ParseInt(r.Partition, 10, 32)
		o, _ := strconv.ParseInt(r.Offset, 10, 64)
		at[[2]int64{p, o}] = src{r.Key, r.Value}
	}
	if len(at) != n {
		t.Fatalf("kcat read %d input records, want %d", len(at), n)
	}

	deadRows := func() (rows, distinct int64) {
		return pgInt(t, pool, "SELECT count(*) FROM "+dead), pgInt(t, pool, `SELECT count(DISTINCT (topic, partition, "offset")) FROM `+dead)
	}
	for _, fp := range []string{crashBeforeDBCommit, crashAfterDBCommit} {
		p := start(t, []string{failpointEnv + "=" + fp + "@3"}, "sink", "--topology", topo, "--instance-id", "c1", "--log-level", "debug")
		_ = p.wait(2 * time.Minute)
		if !p.killedBySIGKILL() {
			t.Fatalf("sink did not die by SIGKILL at %s@3: %v\n%s", fp, p.err, tail(p.logs.String(), 40))
		}
		rows, _ := tableCounts(t, pool, table)
		d, dd := deadRows()
		t.Logf("killed at %s@3: %d rows, %d dead letters (%d distinct) stored", fp, rows, d, dd)
		if rows <= 0 || rows >= n-100 || d != dd {
			t.Fatalf("after %s@3: %d rows (want some, not all), %d dead letters with %d distinct sources", fp, rows, d, dd)
		}
		// The input has no transaction markers: every record below the
		// stored positions is a row or a dead letter, and none above.
		var below int64
		for _, next := range storedPositions(t, pool, schema+".exactly_positions", in) {
			below += next
		}
		if rows+d != below {
			t.Fatalf("after %s@3: %d rows + %d dead letters, but the stored positions are past %d records", fp, rows, d, below)
		}
	}

	addr := freeAddr(t)
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "c1", "--log-level", "debug", "--metrics-addr", addr)
	var restarted time.Time
	if err := pool.QueryRow(context.Background(), "SELECT now()").Scan(&restarted); err != nil {
		t.Fatal(err)
	}
	waitRows(t, pool, table, n-100, 3*time.Minute, p)
	eventually(t, time.Minute, func() bool {
		pos := storedPositions(t, pool, schema+".exactly_positions", in)
		ends := committedEnds(t, in)
		for part, end := range ends {
			if pos[part] != end {
				return false
			}
		}
		return len(pos) == len(ends)
	}, func() string {
		return fmt.Sprintf("positions %v, ends %v", storedPositions(t, pool, schema+".exactly_positions", in), committedEnds(t, in))
	})

	// The metric counts what this run dead-lettered: the table's rows
	// written after it started.
	since := pgInt(t, pool, "SELECT count(*) FROM "+dead+" WHERE dead_lettered_at >= $1", restarted)
	counted, _ := sum(scrape(t, addr), "exactly_sink_records_dead_lettered_total", map[string]string{"sink": name})
	if int64(counted) != since || since == 0 {
		t.Errorf("exactly_sink_records_dead_lettered_total = %v after the restart; the table has %d dead letters written since (want equal, > 0)", counted, since)
	}
	p.stop()

	// The data table: the 9,900 good records, once each.
	if rows, distinct := tableCounts(t, pool, table); rows != n-100 || distinct != n-100 {
		t.Fatalf("table %s: %d rows, %d distinct; want %d", table, rows, distinct, n-100)
	}
	// The dead-letter table, read with psql: each rejected record once.
	psql := func(q string) string { return strings.Join(psqlLines(t, q, "-q", "-F", "\t"), "\n") }
	if got := psql(`SELECT count(*), count(DISTINCT (topic, partition, "offset")) FROM ` + dead); got != "100\t100" {
		t.Fatalf("dead-letter table: count, distinct sources = %q, want 100 and 100", got)
	}
	out := psql(`SELECT sink, topic, partition, "offset", convert_from(key, 'UTF8'), encode(value, 'hex'), reason, coalesce(sqlstate, '-'), message, headers::text, topic_id <> '' FROM ` + dead)
	byReason := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 11 {
			t.Fatalf("psql line %q", line)
		}
		p, _ := strconv.ParseInt(f[2], 10, 32)
		o, _ := strconv.ParseInt(f[3], 10, 64)
		rec, ok := at[[2]int64{p, o}]
		if !ok {
			t.Fatalf("dead letter names %s/%d@%d, which is no input record", f[1], p, o)
		}
		b, bad := badKeys[rec.key]
		switch {
		case !bad:
			t.Errorf("%s/%d@%d (key %s) is dead-lettered but was valid: %s %s", in, p, o, rec.key, f[6], f[8])
		case f[0] != name || f[1] != in || f[4] != rec.key || f[10] != "t":
			t.Errorf("dead letter of %s: sink %q topic %q key %q topic id set %s; want %s, %s, %s, t", rec.key, f[0], f[1], f[4], f[10], name, in, rec.key)
		case f[5] != fmt.Sprintf("%x", rec.value):
			t.Errorf("dead letter of %s: value %s, want the input's bytes %x", rec.key, f[5], rec.value)
		case f[6] != b.reason || (b.sqlstate == "" && f[7] != "-") || (b.sqlstate != "" && f[7] != b.sqlstate):
			t.Errorf("dead letter of %s: reason %s sqlstate %s, want %s %q (%s)", rec.key, f[6], f[7], b.reason, b.sqlstate, f[8])
		case f[8] == "" || !json.Valid([]byte(f[9])):
			t.Errorf("dead letter of %s: message %q headers %q", rec.key, f[8], f[9])
		}
		byReason[f[6]+"/"+f[7]]++
	}
	t.Logf("dead letters by reason/sqlstate: %v", byReason)

	// exactly verify counts the sink's dead letters from its table.
	rep, code := runVerify(t, topo)
	if code != 0 || len(rep.Sinks) != 1 {
		t.Fatalf("exactly verify: exit %d, %d sinks; want exit 0 and 1 sink; problems %v", code, len(rep.Sinks), rep.Problems)
	}
	if s := rep.Sinks[0]; !rep.OK || s.DeadLettered != 100 || s.DeadLetterRepeats != 0 || s.Missing != 0 || s.Lost != 0 {
		t.Fatalf("verify: ok %v, %+v; want ok with 100 dead-lettered, no repeats; problems %v", rep.OK, *s, rep.Problems)
	}
}

// A dead-letter table that exists without a column the sink writes stops
// the sink at start with an error naming the column.
func TestSinkDeadLetterTableMissingColumn(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "s17b_dlc")
	name, in := uniqueName("s17b-dlc"), uniqueName("s17b_dlc_in")
	dead := schema + ".dead_letters"
	pgExec(t, pool, "CREATE TABLE "+dead+` (sink text, topic text, topic_id text, partition integer, "offset" bigint, key bytea, value bytea,
		headers jsonb, record_timestamp timestamptz, reason text, message text, dead_lettered_at timestamptz,
		PRIMARY KEY (sink, topic, topic_id, partition, "offset"))`)
	topo := userTopology(t, []fileTopic{{name: in, parts: 1}}, fmt.Sprintf(`sinks:
  - name: %s
    input: { topic: %s, format: json }
    dead_letter: { table: %s }
    postgres: { dsn: "${PG_DSN}", table: %s.events, event_id: event_id, columns: { event_id: event_id } }
`, name, in, dead, schema))
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "c1")
	if err := p.wait(time.Minute); err == nil {
		t.Fatalf("sink started with a dead-letter table lacking sqlstate:\n%s", tail(p.logs.String(), 20))
	}
	want := `sinks[0].dead_letter.table: dead-letter table "` + schema + `"."dead_letters" has no column "sqlstate"`
	if !strings.Contains(strings.ReplaceAll(p.logs.String(), `\"`, `"`), want) {
		t.Fatalf("the sink's error does not say %q:\n%s", want, tail(p.logs.String(), 20))
	}

	// Every column there, but key and value as text (bytea's hex text
	// would be stored instead of the bytes) and the offset as integer
	// (offsets beyond 2^31 would fail): refused, each column named.
	pgExec(t, pool, "DROP TABLE "+dead)
	pgExec(t, pool, "CREATE TABLE "+dead+` (sink text, topic text, topic_id text, partition integer, "offset" integer, key text, value text,
		headers jsonb, record_timestamp timestamptz, reason text, sqlstate text, message text, dead_lettered_at timestamptz,
		PRIMARY KEY (sink, topic, topic_id, partition, "offset"))`)
	p = start(t, nil, "sink", "--topology", topo, "--instance-id", "c1")
	if err := p.wait(time.Minute); err == nil {
		t.Fatalf("sink started with a dead-letter table of wrong column types:\n%s", tail(p.logs.String(), 20))
	}
	logs := strings.ReplaceAll(p.logs.String(), `\"`, `"`)
	for _, want := range []string{`column "key" is text, want bytea`, `column "value" is text, want bytea`, `column "offset" is integer, want bigint`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the sink's error does not say %q:\n%s", want, tail(logs, 20))
		}
	}
}

// A target table that exists without columns the file maps stops the sink
// at start with one error per missing column, each at the column's line
// and column in the topology file, with the statement that adds it.
func TestSinkTargetTableMissingColumns(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "s18_mc")
	name, in, dlq := uniqueName("s18-mc"), uniqueName("s18_mc_in"), uniqueName("s18_mc_dlq")
	pgExec(t, pool, "CREATE TABLE "+schema+".events (event_id text PRIMARY KEY)")
	topo := userTopology(t, []fileTopic{{name: in, parts: 1}, {name: dlq, parts: 1}}, fmt.Sprintf(`sinks:
  - name: %s
    input: { topic: %s, format: json }
    dead_letter: { topic: %s }
    postgres:
      dsn: ${PG_DSN}
      table: %s.events
      event_id: event_id
      columns:
        event_id: event_id
        amount: amount
        note: { field: note, type: varchar(10) }
`, name, in, dlq, schema))
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "c1")
	if err := p.wait(time.Minute); err == nil {
		t.Fatalf("sink started with a table lacking mapped columns:\n%s", tail(p.logs.String(), 20))
	}
	logs := strings.ReplaceAll(p.logs.String(), `\"`, `"`)
	table := `"` + schema + `"."events"`
	for _, want := range []string{
		`topology.yaml:20:17: sinks[0].postgres.columns.amount: table ` + table + ` has no column "amount" (add it, e.g. ALTER TABLE ` + table + ` ADD COLUMN "amount" text; or remove it from columns)`,
		`topology.yaml:21:15: sinks[0].postgres.columns.note: table ` + table + ` has no column "note" (add it, e.g. ALTER TABLE ` + table + ` ADD COLUMN "note" varchar(10); or remove it from columns)`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the sink's error does not say %q:\n%s", want, tail(p.logs.String(), 20))
		}
	}
}
