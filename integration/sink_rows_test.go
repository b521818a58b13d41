//go:build integration

package integration

// One bad row never stalls a sink. A record whose data
// Postgres refuses, at statement time or at COMMIT, is dead-lettered with
// its SQLSTATE; the rest of its batch is written once, with the position;
// records produced afterwards arrive. A fault of the database itself is
// retried and dead-letters nothing; an error of no known class stops the
// sink with the batch's offsets rather than spin.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// rowsSink is one sink into <schema>.events, with a one-partition input.
type rowsSink struct {
	sinkSpec // the names; its commit settings are not used
	topo     string
}

// newRowsSink creates a schema, runs ddl in it (%[1]s is the schema), and
// writes the topology of one sink with mode and tombstones ("" for the
// defaults) and columns.
func newRowsSink(t *testing.T, pool *pgxpool.Pool, ddl, columns, mode, tombstones string) rowsSink {
	t.Helper()
	s := rowsSink{sinkSpec: sinkSpec{name: uniqueName("sinkrows"), in: uniqueName("sinkrows_in"), dlq: uniqueName("sinkrows_dlq"),
		schema: strings.ToLower(uniqueName("sinkrows"))}}
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+s.schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s.schema+" CASCADE")
		}
	})
	if _, err := pool.Exec(context.Background(), fmt.Sprintf(ddl, s.schema)); err != nil {
		t.Fatalf("ddl: %v", err)
	}
	b := sinkYAMLHead(t, s.sinkSpec, 1, columns)
	if mode != "" {
		fmt.Fprintf(b, "      mode: %s\n", mode)
	}
	if tombstones != "" {
		fmt.Fprintf(b, "      tombstones: %s\n", tombstones)
	}
	b.WriteString("    commit: { interval: 100ms, max_records: 1000 }\n")
	s.topo = writeFile(t, "topology.yaml", b.String())
	exactlyCmd(t, "validate", s.topo)
	exactlyCmd(t, "topics", "create", s.topo)
	return s
}

// tableRows returns event_id::text → coalesce(col::text, '<null>') of
// every row of table.
func tableRows(t testing.TB, pool *pgxpool.Pool, table, col string) map[string]string {
	t.Helper()
	return queryPairs(t, pool, fmt.Sprintf("SELECT event_id::text, coalesce(%s::text, '<null>') FROM %s", col, table))
}

// queryPairs returns the rows of q, a query of two text columns, as a map
// from the first to the second.
func queryPairs(t testing.TB, pool *pgxpool.Pool, q string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var id, v string
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		got[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// rowsCase is one batch with bad records among good ones.
type rowsCase struct {
	name             string
	ddl, columns     string
	mode, tombstones string
	valCol           string
	// recs are produced before the sink starts ("key|value"; an empty
	// value is a tombstone). want is the table afterwards, event_id::text
	// → valCol::text; bad maps the source offset of each record that must
	// be dead-lettered to its SQLSTATE.
	recs [][]byte
	want map[string]string
	bad  map[int64]string
	// after are produced once the first batch is in; wantAfter is the
	// whole table then.
	after     [][]byte
	wantAfter map[string]string
}

func runRowsCase(t *testing.T, c rowsCase) {
	pool := pgPool(t)
	s := newRowsSink(t, pool, c.ddl, c.columns, c.mode, c.tombstones)
	kcatProduce(t, s.in, c.recs)
	p := startSink(t, s.topo, "rows-1")

	// waitTable waits until the position is at end and the table is want.
	waitTable := func(want map[string]string, end int64) {
		t.Helper()
		eventually(t, 60*time.Second, func() bool {
			p.alive()
			return storedPositions(t, pool, s.positions(), s.in)[0] == end
		}, func() string {
			return fmt.Sprintf("position %v, want %d; table %v", storedPositions(t, pool, s.positions(), s.in), end, tableRows(t, pool, s.table(), c.valCol))
		})
		if got := tableRows(t, pool, s.table(), c.valCol); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("table %s:\n got %v\nwant %v", s.table(), got, want)
		}
	}
	waitTable(c.want, int64(len(c.recs)))

	// Dead letters, read_committed by kcat: each bad record exactly once
	// (nothing replayed here), with reason postgres, its SQLSTATE and a
	// message; no other.
	dls := kcatReadJSON(t, s.dlq)
	seen := map[int64]int{}
	for _, d := range dls {
		off, err := strconv.ParseInt(d.Headers["exactly.dlq.source.offset"], 10, 64)
		if err != nil {
			t.Errorf("dead letter without a source offset: %v", d.Headers)
			continue
		}
		seen[off]++
		want, ok := c.bad[off]
		switch {
		case !ok:
			t.Errorf("unexpected dead letter of offset %d: %v", off, d.Headers)
		case d.Headers["exactly.dlq.reason"] != "postgres" || d.Headers["exactly.dlq.sqlstate"] != want ||
			!strings.Contains(d.Headers["exactly.dlq.error"], "(SQLSTATE "+want+")") || d.Headers["exactly.dlq.source.topic"] != s.in:
			t.Errorf("dead letter of offset %d: headers %v; want reason postgres, sqlstate %s", off, d.Headers, want)
		}
		if src := string(c.recs[off]); d.Key != src[:strings.IndexByte(src, '|')] {
			t.Errorf("dead letter of offset %d: key %q, record %q", off, d.Key, src)
		}
	}
	for off := range c.bad {
		if seen[off] != 1 {
			t.Errorf("offset %d: %d dead letters, want 1", off, seen[off])
		}
	}

	// The sink goes on.
	kcatProduce(t, s.in, c.after)
	waitTable(c.wantAfter, int64(len(c.recs)+len(c.after)))
	if n := len(kcatReadJSON(t, s.dlq)); n != len(c.bad) {
		t.Errorf("%d dead letters after the second batch, want %d", n, len(c.bad))
	}
	p.stop()
}

// rec is a kcat line for a JSON record with event_id id and field f set
// to the JSON text raw (or no field when f is "").
func rec(id, f, raw string) []byte {
	if f == "" {
		return fmt.Appendf(nil, `%s|{"event_id":%q}`, id, id)
	}
	return fmt.Appendf(nil, `%s|{"event_id":%q,%q:%s}`, id, id, f, raw)
}

// tomb is a kcat line for a tombstone keyed id.
func tomb(id string) []byte { return []byte(id + "|") }

func TestSinkRowsRejected(t *testing.T) {
	const (
		upper = "6BA7B810-9DAD-11D1-80B4-00C04FD430C8"
		lower = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
		u1    = "11111111-1111-1111-1111-111111111111"
		u2    = "22222222-2222-2222-2222-222222222222"
		u3    = "33333333-3333-3333-3333-333333333333"
	)
	cases := []rowsCase{
		{
			// Two event IDs of one UUID in one batch must not raise SQLSTATE
			// 21000. The last record of a UUID wins, compared as uuid.
			name: "upsert uuids differing in case",
			ddl:  "CREATE TABLE %[1]s.events (event_id uuid PRIMARY KEY, v text)", columns: "{ event_id: event_id, v: v }",
			mode: "upsert", valCol: "v",
			recs:      [][]byte{rec(upper, "v", `"first"`), rec(u1, "v", `"one"`), rec(lower, "v", `"last"`), rec(u2, "v", `"two"`)},
			want:      map[string]string{lower: "last", u1: "one", u2: "two"},
			after:     [][]byte{rec(u3, "v", `"three"`), rec(upper, "v", `"again"`)},
			wantAfter: map[string]string{lower: "again", u1: "one", u2: "two", u3: "three"},
		},
		{
			name: "insert uuids differing in case: the first stays",
			ddl:  "CREATE TABLE %[1]s.events (event_id uuid PRIMARY KEY, v text)", columns: "{ event_id: event_id, v: v }",
			valCol:    "v",
			recs:      [][]byte{rec(upper, "v", `"first"`), rec(u1, "v", `"one"`), rec(lower, "v", `"last"`), rec(u1, "v", `"uno"`)},
			want:      map[string]string{lower: "first", u1: "one"},
			after:     [][]byte{rec(u2, "v", `"two"`), rec(lower, "v", `"later"`)},
			wantAfter: map[string]string{lower: "first", u1: "one", u2: "two"},
		},
		{
			name: "check constraint",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, qty integer CHECK (qty >= 0))", columns: "{ event_id: event_id, qty: qty }",
			valCol:    "qty",
			recs:      [][]byte{rec("a", "qty", "1"), rec("b", "qty", "-5"), rec("c", "qty", "3"), rec("d", "qty", "-1"), rec("e", "qty", "0")},
			want:      map[string]string{"a": "1", "c": "3", "e": "0"},
			bad:       map[int64]string{1: "23514", 3: "23514"},
			after:     [][]byte{rec("f", "qty", "6")},
			wantAfter: map[string]string{"a": "1", "c": "3", "e": "0", "f": "6"},
		},
		{
			name: "not null",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text NOT NULL)", columns: "{ event_id: event_id, v: v }",
			mode: "upsert", valCol: "v",
			recs:      [][]byte{rec("a", "v", `"x"`), rec("b", "", ""), rec("c", "v", "null")},
			want:      map[string]string{"a": "x"},
			bad:       map[int64]string{1: "23502", 2: "23502"},
			after:     [][]byte{rec("b", "v", `"y"`)},
			wantAfter: map[string]string{"a": "x", "b": "y"},
		},
		{
			name: "numeric out of range",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, amount numeric(4,1), n integer)", columns: "{ event_id: event_id, amount: amount, n: n }",
			valCol: "amount",
			// -0.04 would round to 0.0 in numeric(4,1): refused (22000),
			// never rounded (README, "Values in typed columns").
			recs:      [][]byte{rec("a", "amount", "999.9"), rec("b", "amount", "12345"), rec("c", "n", "30000000000"), rec("d", "amount", "-0.04")},
			want:      map[string]string{"a": "999.9"},
			bad:       map[int64]string{1: "22003", 2: "22003", 3: "22000"},
			after:     [][]byte{rec("e", "amount", "1")},
			wantAfter: map[string]string{"a": "999.9", "e": "1.0"},
		},
		{
			name:    "trigger raises for one value",
			ddl:     refuseTrigger("CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text)", "IF NEW.v = 'boom' THEN RAISE EXCEPTION 'refused %%', NEW.event_id; END IF;"),
			columns: "{ event_id: event_id, v: v }", mode: "upsert", valCol: "v",
			recs:      [][]byte{rec("a", "v", `"x"`), rec("a", "v", `"boom"`), rec("b", "v", `"y"`)},
			want:      map[string]string{"a": "x", "b": "y"},
			bad:       map[int64]string{1: "P0001"},
			after:     [][]byte{rec("c", "v", `"z"`)},
			wantAfter: map[string]string{"a": "x", "b": "y", "c": "z"},
		},
		{
			// A user-defined SQLSTATE is of no known class; the
			// bisection shows it follows single records (each fails
			// alone, the rest is written), so they are dead-lettered
			// with it, beside a row error of a known class.
			name:    "trigger raises a user-defined SQLSTATE for some rows",
			ddl:     refuseTrigger("CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text CHECK (v <> 'bad'))", "IF NEW.v = 'boom' THEN RAISE EXCEPTION 'refused %%', NEW.event_id USING ERRCODE = 'U0001'; END IF;", "IF NEW.v = 'bang' THEN RAISE EXCEPTION 'refused %%', NEW.event_id USING ERRCODE = 'XY123'; END IF;"),
			columns: "{ event_id: event_id, v: v }", valCol: "v",
			recs: [][]byte{rec("a", "v", `"x"`), rec("b", "v", `"boom"`), rec("c", "v", `"y"`), rec("d", "v", `"bad"`),
				rec("e", "v", `"bang"`), rec("f", "v", `"z"`), rec("g", "v", `"boom"`), rec("h", "v", `"w"`)},
			want:      map[string]string{"a": "x", "c": "y", "f": "z", "h": "w"},
			bad:       map[int64]string{1: "U0001", 3: "23514", 4: "XY123", 6: "U0001"},
			after:     [][]byte{rec("i", "v", `"v"`)},
			wantAfter: map[string]string{"a": "x", "c": "y", "f": "z", "h": "w", "i": "v"},
		},
		{
			name: "deferred unique fails at commit",
			ddl: `CREATE TABLE %[1]s.events (event_id text PRIMARY KEY,
	email text CONSTRAINT events_email_key UNIQUE DEFERRABLE INITIALLY DEFERRED);
INSERT INTO %[1]s.events VALUES ('old', 'taken@x')`,
			columns: "{ event_id: event_id, email: email }", valCol: "email",
			recs:      [][]byte{rec("a", "email", `"a@x"`), rec("b", "email", `"taken@x"`), rec("c", "email", `"c@x"`), rec("d", "email", `"a@x"`)},
			want:      map[string]string{"old": "taken@x", "a": "a@x", "c": "c@x"},
			bad:       map[int64]string{1: "23505", 3: "23505"},
			after:     [][]byte{rec("e", "email", `"e@x"`)},
			wantAfter: map[string]string{"old": "taken@x", "a": "a@x", "c": "c@x", "e": "e@x"},
		},
		{
			name: "deferred constraint trigger raises at commit",
			ddl: `CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text);
CREATE FUNCTION %[1]s.late() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.v = 'late' THEN RAISE EXCEPTION 'refused at commit %%', NEW.event_id; END IF;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER late AFTER INSERT ON %[1]s.events DEFERRABLE INITIALLY DEFERRED
	FOR EACH ROW EXECUTE FUNCTION %[1]s.late()`,
			columns: "{ event_id: event_id, v: v }", valCol: "v",
			recs:      [][]byte{rec("a", "v", `"x"`), rec("b", "v", `"y"`), rec("c", "v", `"late"`)},
			want:      map[string]string{"a": "x", "b": "y"},
			bad:       map[int64]string{2: "P0001"},
			after:     [][]byte{rec("d", "v", `"z"`)},
			wantAfter: map[string]string{"a": "x", "b": "y", "d": "z"},
		},
		{
			name: "bad casts",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, n integer, at timestamptz)", columns: "{ event_id: event_id, n: n, at: at }",
			valCol:    "n",
			recs:      [][]byte{rec("a", "n", `"twelve"`), rec("b", "n", "2"), rec("c", "at", `"yesterday-ish"`), rec("d", "n", "4.5")},
			want:      map[string]string{"b": "2"},
			bad:       map[int64]string{0: "22P02", 2: "22007", 3: "22P02"},
			after:     [][]byte{rec("e", "n", "5")},
			wantAfter: map[string]string{"b": "2", "e": "5"},
		},
		{
			name: "duplicates in one batch, insert mode",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text)", columns: "{ event_id: event_id, v: v }",
			valCol:    "v",
			recs:      [][]byte{rec("d", "v", `"first"`), rec("a", "v", `"x"`), rec("d", "v", `"second"`), rec("a", "v", `"y"`), rec("d", "v", `"third"`)},
			want:      map[string]string{"d": "first", "a": "x"},
			after:     [][]byte{rec("d", "v", `"fourth"`), rec("b", "v", `"z"`)},
			wantAfter: map[string]string{"d": "first", "a": "x", "b": "z"},
		},
		{
			// Two operations on one key in a batch apply in record
			// order; a tombstone whose key does not cast is a dead
			// letter of its own.
			name: "tombstones delete, uuid keys",
			ddl:  "CREATE TABLE %[1]s.events (event_id uuid PRIMARY KEY, v text)", columns: "{ event_id: event_id, v: v }",
			mode: "upsert", tombstones: "delete", valCol: "v",
			recs: [][]byte{rec(upper, "v", `"a"`), tomb(lower), rec(lower, "v", `"b"`), rec(u1, "v", `"c"`), tomb(u1),
				tomb("not-a-uuid"), rec(u2, "v", `"d"`), rec(u2, "v", `"e"`), tomb(strings.ToUpper(u3))},
			want:      map[string]string{lower: "b", u2: "e"},
			bad:       map[int64]string{5: "22P02"},
			after:     [][]byte{tomb(upper), rec(u3, "v", `"f"`)},
			wantAfter: map[string]string{u2: "e", u3: "f"},
		},
		{
			name: "tombstone refused by a foreign key",
			ddl: `CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text);
CREATE TABLE %[1]s.child (id text PRIMARY KEY, parent text REFERENCES %[1]s.events (event_id));
INSERT INTO %[1]s.events VALUES ('p', 'parent');
INSERT INTO %[1]s.child VALUES ('c', 'p')`,
			columns: "{ event_id: event_id, v: v }", tombstones: "delete", valCol: "v",
			recs:      [][]byte{rec("a", "v", `"x"`), tomb("p"), tomb("a"), rec("b", "v", `"y"`)},
			want:      map[string]string{"p": "parent", "b": "y"},
			bad:       map[int64]string{1: "23503"},
			after:     [][]byte{rec("c", "v", `"z"`)},
			wantAfter: map[string]string{"p": "parent", "b": "y", "c": "z"},
		},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			runRowsCase(t, c)
		})
	}
}

// A fault of the database itself (the sink's backend terminated in the
// middle of a batch, SQLSTATE 57P01 and a broken connection) is retried:
// every record is written once, nothing is dead-lettered, the sink goes
// on.
func TestSinkRowsTransientFault(t *testing.T) {
	pool := pgPool(t)
	// The trigger sleeps while the hold table has a row, so that the
	// test can find the sink's backend in the middle of a batch.
	s := newRowsSink(t, pool, `CREATE TABLE %[1]s.hold (x int);
INSERT INTO %[1]s.hold VALUES (1);
CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text);
CREATE FUNCTION %[1]s.slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT FROM %[1]s.hold) THEN PERFORM pg_sleep(60); END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER slow BEFORE INSERT ON %[1]s.events FOR EACH ROW EXECUTE FUNCTION %[1]s.slow()`,
		"{ event_id: event_id, v: v }", "", "")
	kcatProduce(t, s.in, events("ev", 0, 20))
	addr := freeAddr(t)
	p := start(t, nil, "sink", "--topology", s.topo, "--instance-id", "rows-1", "--log-level", "debug", "--metrics-addr="+addr)

	var pid int32
	eventually(t, 60*time.Second, func() bool {
		p.alive()
		err := pool.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
WHERE wait_event = 'PgSleep' AND query LIKE '%'||$1||'%' LIMIT 1`, s.schema).Scan(&pid)
		return err == nil
	}, func() string { return "the sink's backend never slept in the trigger" })
	// A batch not yet written is lag: the metric counts from the stored
	// position (none: the log start), as `exactly status` does.
	lag := func() float64 {
		v, _ := sum(scrape(t, addr), "exactly_sink_consumer_lag_records", map[string]string{"sink": s.name})
		return v
	}
	if l := lag(); l != 20 {
		t.Errorf("lag metric %v during the first batch, want 20", l)
	}
	if _, err := pool.Exec(context.Background(), "DELETE FROM "+s.schema+".hold"); err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := pool.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d): %v %v", pid, ok, err)
	}

	waitRowsEnd := func(n int) {
		t.Helper()
		eventually(t, 60*time.Second, func() bool {
			p.alive()
			return storedPositions(t, pool, s.positions(), s.in)[0] == int64(n)
		}, func() string {
			return fmt.Sprintf("position %v, want %d", storedPositions(t, pool, s.positions(), s.in), n)
		})
		if rows, distinct := rowStats(t, pool, s.table()); rows != n || distinct != n {
			t.Errorf("%d rows, %d distinct, want %d", rows, distinct, n)
		}
	}
	waitRowsEnd(20)
	eventually(t, 10*time.Second, func() bool { return lag() == 0 }, func() string { return fmt.Sprintf("lag metric %v after the batch, want 0", lag()) })
	if !strings.Contains(p.logs.String(), "batch failed; retrying") {
		t.Errorf("no retry logged after the backend was terminated")
	}
	kcatProduce(t, s.in, events("ev", 20, 5))
	waitRowsEnd(25)
	if n := len(kcatReadJSON(t, s.dlq)); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	p.stop()
}

// An error of no known class that follows no single record is not a
// record's fault and not a known outage: the sink retries a bounded number
// of times, then stops with an error naming the topic and the batch's
// offsets. Nothing is written or dead-lettered. It follows no record when
// every record fails alone (a trigger raising SQLSTATE 55000 for every
// row), or when records fail only together (a statement trigger raising
// for any statement of more than one row: every single record loads).
func TestSinkRowsUnclassifiedStops(t *testing.T) {
	cases := []struct{ name, ddl, why string }{
		{"every record fails alone", `CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text);
CREATE FUNCTION %[1]s.odd() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'not in a state to take rows' USING ERRCODE = '55000';
END $$;
CREATE TRIGGER odd BEFORE INSERT ON %[1]s.events FOR EACH ROW EXECUTE FUNCTION %[1]s.odd()`,
			"every record of the batch (3) fails alone"},
		{"records fail only together", `CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text);
CREATE FUNCTION %[1]s.many() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF (SELECT count(*) FROM added) > 1 THEN RAISE EXCEPTION 'one row at a time' USING ERRCODE = '55000'; END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER many AFTER INSERT ON %[1]s.events REFERENCING NEW TABLE AS added
	FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.many()`,
			"fail together and none alone"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			pool := pgPool(t)
			s := newRowsSink(t, pool, c.ddl, "{ event_id: event_id, v: v }", "", "")
			kcatProduce(t, s.in, events("ev", 0, 3))
			p := startSink(t, s.topo, "rows-1")
			if err := p.wait(2 * time.Minute); err == nil {
				t.Fatalf("the sink exited with status 0")
			}
			logs := p.logs.String()
			for _, want := range []string{"topic " + s.in + " offsets p0 [0, 3)", "6 attempts", "unclassified error", "55000", c.why} {
				if !strings.Contains(logs, want) {
					t.Errorf("logs lack %q:\n%s", want, tail(logs, 20))
				}
			}
			if rows, _ := rowStats(t, pool, s.table()); rows != 0 {
				t.Errorf("%d rows, want 0", rows)
			}
			if pos := storedPositions(t, pool, s.positions(), s.in); len(pos) != 0 {
				t.Errorf("positions %v, want none", pos)
			}
			if n := len(kcatReadJSON(t, s.dlq)); n != 0 {
				t.Errorf("%d dead letters, want 0", n)
			}
		})
	}
}
