//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestVerifySinkEventIDKeys: exactly verify compares a sink's event IDs
// as its table's key column does, and reads them as the sink does. Two
// records whose IDs are one value of the column's type are one row (the
// first, ON CONFLICT DO NOTHING): 1 and 1.0, -0.0 and 0, 2.50 and 2.5 in
// numeric, a UUID in upper case, in braces and without hyphens; an ID the
// type cannot read is a dead letter; a lone surrogate in a field the sink
// does not map is stored in $value and its record is a row. verify finds
// nothing missing, extra or lost.
func TestVerifySinkEventIDKeys(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	schema := uniqueName("vf_keys")
	num, uid, sur, dlq := uniqueName("vf_keys_num"), uniqueName("vf_keys_uuid"), uniqueName("vf_keys_sur"), uniqueName("vf_keys_dlq")
	topo := verifyKeysTopology(t, pool, schema, dlq, []keySink{
		{"num", num, "num", "{ id: { field: id, type: numeric }, b: b }"},
		{"uuid", uid, "uid", "{ id: { field: id, type: uuid }, b: b }"},
		{"sur", sur, "sur", "{ id: id, body: { field: $value, type: json } }"},
	})
	kcatProduce(t, num, [][]byte{
		[]byte(`1|{"id":1,"b":"first"}`), []byte(`2|{"id":1.0,"b":"second"}`),
		[]byte(`3|{"id":-0.0,"b":"negative zero"}`), []byte(`4|{"id":0,"b":"zero"}`),
		[]byte(`5|{"id":2.50,"b":"two and a half"}`), []byte(`6|{"id":2.5,"b":"again"}`),
		[]byte(`7|{"id":"ten","b":"no number"}`),
	})
	kcatProduce(t, uid, [][]byte{
		[]byte(`1|{"id":"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11","b":"upper"}`),
		[]byte(`2|{"id":"{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}","b":"braces"}`),
		[]byte(`3|{"id":"a0eebc999c0b4ef8bb6d6bb9bd380a11","b":"no hyphens"}`),
	})
	kcatProduce(t, sur, [][]byte{[]byte(`1|{"id":"s1","s":"\ud800"}`), []byte(`2|{"id":"s2","s":"fine"}`)})

	loadAll(t, pool, topo, "vf1", schema, num, uid, sur)

	for table, want := range map[string]map[string]string{
		"num": {"1": "first", "0.0": "negative zero", "2.50": "two and a half"},
		"uid": {"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11": "upper"},
		"sur": {"s1": `{"id":"s1","s":"\ud800"}`, "s2": `{"id":"s2","s":"fine"}`},
	} {
		col := "b"
		if table == "sur" {
			col = "body"
		}
		got := queryPairs(t, pool, fmt.Sprintf("SELECT id::text, %s::text FROM %s.%s", col, schema, table))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("table %s holds %v, want %v", table, got, want)
		}
	}
	if n := kcatCount(t, dlq); n != 1 {
		t.Errorf("%d dead letters, want 1 (the id \"ten\")", n)
	}

	rep, code := runVerifyBin(t, exactlyBin, topo, "id")
	if code != 0 || !rep.OK {
		t.Errorf("exactly verify: exit %d, problems %q", code, rep.Problems)
	}
	want := map[string]string{num: "in 7 expected 3 dead 1", uid: "in 3 expected 1 dead 0", sur: "in 2 expected 2 dead 0"}
	for _, c := range rep.Sinks {
		got := fmt.Sprintf("in %d expected %d dead %d", c.In, c.Expected, c.DeadLettered)
		if got != want[c.Input] || c.Failures() != 0 {
			t.Errorf("sink %s: %s, want %s; missing %d, extra %d, lost %d; %q", c.Name, got, want[c.Input], c.Missing, c.Extra, c.Lost, c.Examples)
		}
	}
}

// keySink is a sink of verifyKeysTopology: its name, input topic, table
// (in the test's schema) and columns.
type keySink struct{ name, topic, table, columns string }

// verifyKeysTopology writes a file of json sinks, each with one-partition
// input topic, into schema's tables, dead letters to dlq, creates its
// topics, and drops schema when the test passes.
func verifyKeysTopology(t *testing.T, pool *pgxpool.Pool, schema, dlq string, sinks []keySink) string {
	t.Helper()
	var b []byte
	b = fmt.Appendf(b, "version: 1\nkafka:\n  brokers: [%q]\ntopics:\n", brokers(t))
	for _, s := range sinks {
		b = fmt.Appendf(b, "  - { name: %s, partitions: 1 }\n", s.topic)
	}
	b = fmt.Appendf(b, "  - { name: %s, partitions: 1 }\nsinks:\n", dlq)
	for _, s := range sinks {
		b = fmt.Appendf(b, "  - name: %s\n    input: { topic: %s, format: json }\n    dead_letter: { topic: %s }\n"+
			"    postgres: { dsn: \"${PG_DSN}\", table: %s.%s, event_id: id, columns: %s }\n"+
			"    commit: { interval: 50ms }\n", uniqueName("vf_"+s.name), s.topic, dlq, schema, s.table, s.columns)
	}
	topo := writeFile(t, "topology.yaml", string(b))
	exactlyCmd(t, "topics", "create", topo)
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
	})
	return topo
}

// TestVerifyKeysEqualByTheColumnsEquality: event IDs that the key column's
// own = calls equal while their texts differ (citext off the search_path,
// interval, text under a nondeterministic ICU collation) are one row, and
// verify matches each record to it: nothing missing or extra. A row
// deleted by hand is then missing. verify compared these keys by their
// text, and called the second spelling missing.
func TestVerifyKeysEqualByTheColumnsEquality(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	schema := uniqueName("vf_eq")
	ci, iv, co, dlq := uniqueName("vf_eq_ci"), uniqueName("vf_eq_iv"), uniqueName("vf_eq_co"), uniqueName("vf_eq_dlq")
	for _, q := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE COLLATION IF NOT EXISTS public.it_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
		"CREATE TABLE " + schema + ".ci (id " + citextType(t, pool) + " PRIMARY KEY, b text)",
		"CREATE TABLE " + schema + ".iv (id interval PRIMARY KEY, b text)",
		"CREATE TABLE " + schema + ".co (id text COLLATE public.it_ci PRIMARY KEY, b text)",
	} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	topo := verifyKeysTopology(t, pool, schema, dlq, []keySink{
		{"ci", ci, "ci", "{ id: id, b: b }"},
		{"iv", iv, "iv", "{ id: id, b: b }"},
		{"co", co, "co", "{ id: id, b: b }"},
	})
	kcatProduce(t, ci, [][]byte{[]byte(`1|{"id":"Abc","b":"first"}`), []byte(`2|{"id":"aBC","b":"second"}`), []byte(`3|{"id":"x","b":"x"}`)})
	kcatProduce(t, iv, [][]byte{
		[]byte(`1|{"id":"1 day","b":"day"}`), []byte(`2|{"id":"24 hours","b":"hours"}`),
		[]byte(`3|{"id":"1 mon","b":"month"}`), []byte(`4|{"id":"30 days","b":"days"}`), []byte(`5|{"id":"1 min","b":"min"}`),
	})
	kcatProduce(t, co, [][]byte{[]byte(`1|{"id":"Mixed","b":"first"}`), []byte(`2|{"id":"mIXED","b":"second"}`), []byte(`3|{"id":"y","b":"y"}`)})

	loadAll(t, pool, topo, "vfeq", schema, ci, iv, co)

	rows := map[string]int{}
	for _, table := range []string{"ci", "iv", "co"} {
		rows[table] = len(queryPairs(t, pool, fmt.Sprintf("SELECT id::text, b FROM %s.%s", schema, table)))
	}
	if rows["ci"] != 2 || rows["iv"] != 3 || rows["co"] != 2 {
		t.Fatalf("rows %v, want ci 2, iv 3, co 2", rows)
	}
	rep, code := runVerifyBin(t, exactlyBin, topo, "id")
	if code != 0 || !rep.OK {
		t.Errorf("exactly verify: exit %d, problems %q", code, rep.Problems)
	}
	for _, c := range rep.Sinks {
		if c.Failures() != 0 {
			t.Errorf("sink %s: missing %d, extra %d, lost %d; %q", c.Name, c.Missing, c.Extra, c.Lost, c.Examples)
		}
	}

	if tag, err := pool.Exec(t.Context(), "DELETE FROM "+schema+".ci WHERE lower(id::text) = 'abc'"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("delete the row Abc: %v, %v", tag, err)
	}
	rep, code = runVerifyBin(t, exactlyBin, topo, "id")
	if code == 0 || rep.OK {
		t.Fatalf("verify after a row was deleted by hand: exit %d, OK %v", code, rep.OK)
	}
	for _, c := range rep.Sinks {
		if want := int64(0); c.Input == ci {
			want = 2 // both records of the deleted row
			if c.Missing != want || c.Extra != 0 {
				t.Errorf("sink %s: missing %d, extra %d; want %d missing", c.Name, c.Missing, c.Extra, want)
			}
		} else if c.Failures() != 0 {
			t.Errorf("sink %s: %d failures after another table's row was deleted", c.Name, c.Failures())
		}
	}
}

// loadAll runs the sinks of topo as instance until the positions table in
// schema holds the read_committed end of every topic, then stops them.
func loadAll(t *testing.T, pool *pgxpool.Pool, topo, instance, schema string, topics ...string) {
	t.Helper()
	p := startSink(t, topo, instance)
	defer p.stop()
	positions := schema + ".exactly_positions"
	eventually(t, time.Minute, func() bool {
		for _, topic := range topics {
			if !positionsTableAtEnd(t, pool, positions, topic) {
				return false
			}
		}
		return true
	}, func() string { return "the sinks did not reach the end of their topics" })
}
