//go:build integration

package integration

// One bad row never stalls a sink. A row that Postgres
// rejects for its data (a constraint, a cast, a duplicate in the batch, a
// value out of range, a trigger that raises, at statement time or at
// COMMIT) is dead-lettered with its SQLSTATE and message; the rest of the
// batch is written once; the sink goes on, stays ready, and its lag
// metric agrees with `exactly status`.

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// keyedRec is one record: its key and its JSON value.
type keyedRec struct{ key, value string }

// badRowCase is one sink run against a table the test creates.
type badRowCase struct {
	name string
	// ddl creates the table %[1]s.events (and anything it needs) in
	// schema %[1]s.
	ddl, cols, mode string
	// recs are produced to one partition before the sink starts, so they
	// are read in one batch.
	recs []keyedRec
	// want maps each event ID (as Postgres prints it) the table must hold
	// to the text of its column valCol.
	valCol string
	want   map[string]string
	// bad maps the key of each record that must be dead-lettered (reason
	// postgres) to its SQLSTATE.
	bad map[string]string
	// after are produced once the first batch is handled; wantAfter maps
	// their event IDs to valCol, like want.
	after     []keyedRec
	wantAfter map[string]string
}

// lagsAgree samples the sink's lag metric and `exactly status`'s lag: a
// status read between two equal metric reads must equal them. It
// returns the last stable pair, or ok false if none was stable.
func lagsAgree(t *testing.T, addr, topo, sink string) (metric float64, status int64, ok bool) {
	t.Helper()
	lbl := map[string]string{"sink": sink}
	for range 5 {
		m1, _ := sum(scrape(t, addr), "exactly_sink_consumer_lag_records", lbl)
		st := statusLag(t, topo, sink)
		m2, _ := sum(scrape(t, addr), "exactly_sink_consumer_lag_records", lbl)
		if m1 == m2 {
			return m1, st, true
		}
	}
	return 0, 0, false
}

func runBadRowCase(t *testing.T, c badRowCase) {
	pool := pgPool(t)
	s := newLoadSink(t, pool, "ad", 1, c.cols, c.mode, func(schema string) {
		pgExec(t, pool, fmt.Sprintf(c.ddl, schema))
	})
	lines := make([][]byte, 0, len(c.recs))
	offsets := map[string]int64{}
	for i, r := range c.recs {
		lines = append(lines, []byte(r.key+"|"+r.value))
		offsets[r.key] = int64(i)
	}
	kcatProducePartition(t, s.in, 0, lines)
	addr := freeAddr(t)
	p := s.run(t, "i-1", addr)
	waitMetrics(t, p, addr)

	// While the batch is being handled, and after: the lag metric and
	// status agree whenever the metric is steady.
	check := func(want map[string]string, end int64) {
		t.Helper()
		eventually(t, 45*time.Second, func() bool {
			p.alive()
			n, _ := tableCounts(t, pool, s.table)
			return n == int64(len(want)) && storedPositions(t, pool, s.schema+".exactly_positions", s.in)[0] == end
		}, func() string {
			n, _ := tableCounts(t, pool, s.table)
			m, st, _ := lagsAgree(t, addr, s.topo, s.name)
			return fmt.Sprintf("%d rows, want %d; positions %v, want partition 0 at %d; dead letters %d; lag metric %v, status lag %d",
				n, len(want), storedPositions(t, pool, s.schema+".exactly_positions", s.in), end, len(kcatRead(t, s.dlq)), m, st)
		})
		got := tableRows(t, pool, s.table, c.valCol)
		for id, v := range want {
			if g, ok := got[id]; !ok || g != v {
				t.Errorf("row %s: %s = %q (present %v), want %q", id, c.valCol, g, ok, v)
			}
		}
	}
	all := map[string]string{}
	for k, v := range c.want {
		all[k] = v
	}
	check(all, int64(len(c.recs)))

	// The dead letters: each bad record once (at least once is allowed
	// by the README; more than one is reported), with reason postgres,
	// its SQLSTATE, a message and its source offset.
	dls := kcatReadJSON(t, s.dlq)
	seen := map[string]int{}
	for _, d := range dls {
		seen[d.Key]++
		want, ok := c.bad[d.Key]
		if !ok {
			t.Errorf("unexpected dead letter %s: %v", d.Key, d.Headers)
			continue
		}
		h := d.Headers
		if h["exactly.dlq.reason"] != "postgres" || h["exactly.dlq.sqlstate"] != want || h["exactly.dlq.error"] == "" ||
			h["exactly.dlq.source.offset"] != strconv.FormatInt(offsets[d.Key], 10) {
			t.Errorf("dead letter %s: headers %v; want reason postgres, sqlstate %s, an error, source offset %d", d.Key, h, want, offsets[d.Key])
		}
	}
	for k := range c.bad {
		if seen[k] != 1 {
			t.Errorf("record %s: %d dead letters, want 1", k, seen[k])
		}
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}

	// The sink goes on.
	lines = lines[:0]
	for _, r := range c.after {
		lines = append(lines, []byte(r.key+"|"+r.value))
	}
	kcatProducePartition(t, s.in, 0, lines)
	for k, v := range c.wantAfter {
		all[k] = v
	}
	check(all, int64(len(c.recs)+len(c.after)))
	eventually(t, 20*time.Second, func() bool {
		m, st, ok := lagsAgree(t, addr, s.topo, s.name)
		return ok && m == 0 && st == 0
	}, func() string {
		m, st, _ := lagsAgree(t, addr, s.topo, s.name)
		return fmt.Sprintf("caught up: lag metric %v, status lag %d; want 0 and 0", m, st)
	})
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after: %d %s", code, body)
	}
	p.stop()
}

// Upsert into (event_id uuid
// primary key, v text); one batch of 4 in which two event IDs differ only
// in case. 3 rows; for that UUID the last record wins; the lag metric
// equals status's lag.
func TestSinkUpsertUUIDsDifferingInCase(t *testing.T) {
	const upper, lower = "6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
	rec := func(id, v string) keyedRec { return keyedRec{id, fmt.Sprintf(`{"event_id":%q,"v":%q}`, id, v)} }
	runBadRowCase(t, badRowCase{
		ddl:  "CREATE TABLE %[1]s.events (event_id uuid PRIMARY KEY, v text)",
		cols: "{ event_id: event_id, v: v }", mode: "upsert", valCol: "v",
		recs: []keyedRec{
			rec(upper, "first"),
			rec("11111111-1111-1111-1111-111111111111", "one"),
			rec(lower, "last"),
			rec("22222222-2222-2222-2222-222222222222", "two"),
		},
		want: map[string]string{lower: "last", "11111111-1111-1111-1111-111111111111": "one", "22222222-2222-2222-2222-222222222222": "two"},
		after: []keyedRec{
			rec("33333333-3333-3333-3333-333333333333", "three"),
			rec(upper, "again"),
		},
		wantAfter: map[string]string{"33333333-3333-3333-3333-333333333333": "three", lower: "again"},
	})
}

// Invented inputs of the kind: each batch holds good records around one
// (or two) that Postgres refuses for its data.
func TestSinkBadRowNeverStalls(t *testing.T) {
	j := func(id, field, raw string) keyedRec {
		if field == "" {
			return keyedRec{id, fmt.Sprintf(`{"event_id":%q}`, id)}
		}
		return keyedRec{id, fmt.Sprintf(`{"event_id":%q,%q:%s}`, id, field, raw)}
	}
	cases := []badRowCase{
		{
			name: "check constraint",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, qty integer CHECK (qty >= 0))",
			cols: "{ event_id: event_id, qty: qty }", valCol: "qty",
			recs:  []keyedRec{j("g1", "qty", "1"), j("b1", "qty", "-1"), j("g2", "qty", "2")},
			want:  map[string]string{"g1": "1", "g2": "2"},
			bad:   map[string]string{"b1": "23514"},
			after: []keyedRec{j("g3", "qty", "3")}, wantAfter: map[string]string{"g3": "3"},
		},
		{
			name: "smallint out of range",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, n smallint)",
			cols: "{ event_id: event_id, n: n }", valCol: "n",
			recs:  []keyedRec{j("g1", "n", "1"), j("g2", "n", "32767"), j("b1", "n", "70000"), j("g3", "n", "-32768")},
			want:  map[string]string{"g1": "1", "g2": "32767", "g3": "-32768"},
			bad:   map[string]string{"b1": "22003"},
			after: []keyedRec{j("g4", "n", "4")}, wantAfter: map[string]string{"g4": "4"},
		},
		{
			name: "numeric(5,2) overflow",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, amount numeric(5,2))",
			cols: "{ event_id: event_id, amount: amount }", valCol: "amount",
			recs:  []keyedRec{j("b1", "amount", "12345.67"), j("g1", "amount", "999.99"), j("g2", "amount", "1.5")},
			want:  map[string]string{"g1": "999.99", "g2": "1.50"},
			bad:   map[string]string{"b1": "22003"},
			after: []keyedRec{j("g3", "amount", "3")}, wantAfter: map[string]string{"g3": "3.00"},
		},
		{
			name: "not null",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text NOT NULL)",
			cols: "{ event_id: event_id, v: v }", valCol: "v",
			recs:  []keyedRec{j("g1", "v", `"a"`), j("g2", "v", `"b"`), j("b1", "v", "null")},
			want:  map[string]string{"g1": "a", "g2": "b"},
			bad:   map[string]string{"b1": "23502"},
			after: []keyedRec{j("g3", "v", `"c"`)}, wantAfter: map[string]string{"g3": "c"},
		},
		{
			name: "trigger raises",
			ddl:  refuseTrigger("CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text)", "IF NEW.v = 'boom' THEN RAISE EXCEPTION 'trigger refuses %%', NEW.v; END IF;"),
			cols: "{ event_id: event_id, v: v }", valCol: "v",
			recs:  []keyedRec{j("g1", "v", `"a"`), j("b1", "v", `"boom"`), j("g2", "v", `"b"`)},
			want:  map[string]string{"g1": "a", "g2": "b"},
			bad:   map[string]string{"b1": "P0001"},
			after: []keyedRec{j("g3", "v", `"c"`)}, wantAfter: map[string]string{"g3": "c"},
		},
		{
			name: "deferred foreign key fails at commit",
			ddl: `CREATE TABLE %[1]s.parent (id text PRIMARY KEY);
INSERT INTO %[1]s.parent VALUES ('p1'), ('p2');
CREATE TABLE %[1]s.events (event_id text PRIMARY KEY,
	parent text REFERENCES %[1]s.parent (id) DEFERRABLE INITIALLY DEFERRED)`,
			cols: "{ event_id: event_id, parent: parent }", valCol: "parent",
			recs:  []keyedRec{j("g1", "parent", `"p1"`), j("b1", "parent", `"nope"`), j("g2", "parent", `"p2"`)},
			want:  map[string]string{"g1": "p1", "g2": "p2"},
			bad:   map[string]string{"b1": "23503"},
			after: []keyedRec{j("g3", "parent", `"p1"`)}, wantAfter: map[string]string{"g3": "p1"},
		},
		{
			name: "string that does not cast to integer",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, n integer)",
			cols: "{ event_id: event_id, n: n }", valCol: "n",
			recs:  []keyedRec{j("g1", "n", "1"), j("b1", "n", `"twelve"`), j("g2", "n", `"2"`)},
			want:  map[string]string{"g1": "1", "g2": "2"},
			bad:   map[string]string{"b1": "22P02"},
			after: []keyedRec{j("g3", "n", "3")}, wantAfter: map[string]string{"g3": "3"},
		},
		{
			name: "duplicate event IDs in one batch, insert mode: the first stays",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text)",
			cols: "{ event_id: event_id, v: v }", valCol: "v",
			recs:  []keyedRec{j("d1", "v", `"first"`), j("g1", "v", `"a"`), j("d1", "v", `"second"`), j("d1", "v", `"third"`)},
			want:  map[string]string{"d1": "first", "g1": "a"},
			after: []keyedRec{j("g2", "v", `"b"`), j("d1", "v", `"fourth"`)}, wantAfter: map[string]string{"g2": "b"},
		},
		{
			name: "duplicate event IDs in one batch, upsert mode: the last wins",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text)",
			cols: "{ event_id: event_id, v: v }", mode: "upsert", valCol: "v",
			recs:  []keyedRec{j("d1", "v", `"first"`), j("g1", "v", `"a"`), j("d1", "v", `"second"`), j("d1", "v", `"third"`)},
			want:  map[string]string{"d1": "third", "g1": "a"},
			after: []keyedRec{j("g2", "v", `"b"`)}, wantAfter: map[string]string{"g2": "b"},
		},
		{
			name: "two bad rows of different kinds in one upsert batch",
			ddl:  "CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, qty smallint CHECK (qty <> 13))",
			cols: "{ event_id: event_id, qty: qty }", mode: "upsert", valCol: "qty",
			recs:  []keyedRec{j("g1", "qty", "1"), j("b1", "qty", "13"), j("g2", "qty", "2"), j("b2", "qty", "99999"), j("g1", "qty", "11")},
			want:  map[string]string{"g1": "11", "g2": "2"},
			bad:   map[string]string{"b1": "23514", "b2": "22003"},
			after: []keyedRec{j("g3", "qty", "3")}, wantAfter: map[string]string{"g3": "3"},
		},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			runBadRowCase(t, c)
		})
	}
}

// A trigger that raises for one row with its own SQLSTATE (RAISE ... USING
// ERRCODE = 'U0001', a common way to tag an application's errors): the
// error is the row's, as the bisection can see (the other halves commit),
// so the row is dead-lettered and the 4 good rows written. Counted as an
// unclassified batch error, it would be retried until the sink exits, and
// again after every restart: the stream stalled for good.
func TestSinkTriggerWithCustomSQLSTATE(t *testing.T) {
	pool := pgPool(t)
	c := newLoadSink(t, pool, "cust", 1, "{ event_id: event_id, n: n }", "", func(s string) {
		pgExec(t, pool, "CREATE TABLE "+s+".events (event_id text PRIMARY KEY, n int)")
		pgExec(t, pool, "CREATE FUNCTION "+s+`.refuse3() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.n = 3 THEN RAISE EXCEPTION 'three is refused' USING ERRCODE = 'U0001'; END IF; RETURN NEW; END $$`)
		pgExec(t, pool, "CREATE TRIGGER refuse3 BEFORE INSERT ON "+s+".events FOR EACH ROW EXECUTE FUNCTION "+s+".refuse3()")
	})
	var lines [][]byte
	for i := 1; i <= 5; i++ {
		lines = append(lines, fmt.Appendf(nil, `c%d|{"event_id":"c%d","n":%d}`, i, i, i))
	}
	kcatProduce(t, c.in, lines)
	addr := freeAddr(t)
	p := c.run(t, "i-1", addr)
	waitRows(t, pool, c.table, 4, 45*time.Second, p)
	eventually(t, 30*time.Second, func() bool { return len(kcatRead(t, c.dlq)) == 1 }, func() string {
		return fmt.Sprintf("%d dead letters, want 1", len(kcatRead(t, c.dlq)))
	})
	dl := kcatRead(t, c.dlq)[0]
	if dl.Key != "c3" || dl.Headers["exactly.dlq.sqlstate"] != "U0001" {
		t.Errorf("dead letter key %q headers %v; want c3 with exactly.dlq.sqlstate U0001", dl.Key, dl.Headers)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
}

// A bad row (a check on length refuses a 1.5 MB text) whose dead letter is
// larger than the dead-letter topic accepts (max.message.bytes, 1 MB by
// default; the input topic allows 4 MB). Retrying the dead letter's
// MESSAGE_TOO_LARGE as transient would stall the sink forever, the two
// good rows of the batch never written. Accepted: the good rows are written and the bad record leaves a dead
// letter (its value may be cut, its headers say why), or the sink exits
// non-zero naming the dead-letter topic; never a silent endless retry.
func TestSinkDeadLetterLargerThanItsTopicAccepts(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "huge")
	pgExec(t, pool, "CREATE TABLE "+schema+".events (event_id text PRIMARY KEY, v text CHECK (length(v) < 1000))")
	name, in, dlq := uniqueName("huge"), uniqueName("huge_in"), uniqueName("huge_dlq")
	topo := userTopology(t, []fileTopic{{name: in, parts: 1, config: map[string]string{"max.message.bytes": "4000000"}}, {name: dlq, parts: 1}},
		"sinks:\n"+jsonSinkItem(name, in, dlq, schema+".events", "", "{ event_id: event_id, v: v }", ""))
	rng := rand.New(rand.NewPCG(13, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	big := make([]byte, 1_500_000)
	for i := range big {
		big[i] = alphabet[rng.IntN(len(alphabet))]
	}
	kcatProduceLarge(t, in, [][]byte{
		[]byte(`h1|{"event_id":"h1","v":"small"}`),
		fmt.Appendf(nil, `h2|{"event_id":"h2","v":"%s"}`, big),
		[]byte(`h3|{"event_id":"h3","v":"small3"}`),
	})
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "i-1", "--log-level", "info")
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) && !p.exited() {
		if n, _ := tableCounts(t, pool, schema+".events"); n == 2 && len(kcatRead(t, dlq)) == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling an external process
	}
	if p.exited() {
		if p.err == nil || !strings.Contains(p.logs.String(), dlq) {
			t.Fatalf("the sink exited (%v) without an error naming the dead-letter topic %s:\n%s", p.err, dlq, tail(p.logs.String(), 20))
		}
		return
	}
	n, _ := tableCounts(t, pool, schema+".events")
	dls := kcatRead(t, dlq)
	if n != 2 || len(dls) != 1 {
		t.Fatalf("after 40 s: %d rows (want h1 and h3), %d dead letters (want h2's); logs:\n%s", n, len(dls), tail(p.logs.String(), 20))
	}
	if dls[0].Key != "h2" || dls[0].Headers["exactly.dlq.sqlstate"] != "23514" {
		t.Errorf("dead letter key %q headers %v; want h2 with exactly.dlq.sqlstate 23514", dls[0].Key, dls[0].Headers)
	}
}

// kcatProduceLarge is kcatProduce for records above librdkafka's default
// 1 MB message.max.bytes.
func kcatProduceLarge(t testing.TB, topic string, lines [][]byte) {
	t.Helper()
	kcatProduceArgs(t, topic, lines, "-X", "message.max.bytes=8000000")
}
