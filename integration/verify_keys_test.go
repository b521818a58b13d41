//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	var b []byte
	b = fmt.Appendf(b, "version: 1\nkafka:\n  brokers: [%q]\ntopics:\n", brokers(t))
	for _, tp := range []string{num, uid, sur, dlq} {
		b = fmt.Appendf(b, "  - { name: %s, partitions: 1 }\n", tp)
	}
	b = append(b, "sinks:\n"...)
	for _, s := range []struct{ name, topic, table, columns string }{
		{"num", num, "num", "{ id: { field: id, type: numeric }, b: b }"},
		{"uuid", uid, "uid", "{ id: { field: id, type: uuid }, b: b }"},
		{"sur", sur, "sur", "{ id: id, body: { field: $value, type: json } }"},
	} {
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

	p := startSink(t, topo, "vf1")
	positions := schema + ".exactly_positions"
	eventually(t, time.Minute, func() bool {
		return positionsTableAtEnd(t, pool, positions, num) && positionsTableAtEnd(t, pool, positions, uid) && positionsTableAtEnd(t, pool, positions, sur)
	}, func() string { return "the sinks did not reach the end of their topics" })
	p.stop()

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
