//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSinkTableChangedWhileRunning: the target table is dropped and
// created again with another column type, then altered, while the sink
// runs. Each batch after a change is written with the new types: a value
// the new column cannot hold exactly is a dead letter (1.5 into integer,
// 1.25 into numeric(10,1)), never rounded by Postgres's assignment cast
// (1.5 stored as 2, 1.25 as 1.3).
func TestSinkTableChangedWhileRunning(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("tblchg")
	pool := pgPool(t)
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := pool.Exec(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec("CREATE SCHEMA "+s.schema, "CREATE TABLE "+s.table()+" (event_id text PRIMARY KEY, amount numeric(10,2))")
	b := sinkYAMLHead(t, s, 1, "{ event_id: event_id, amount: amount }")
	b.WriteString("    commit: { interval: 50ms, max_records: 1000 }\n")
	topo := writeSinkTopology(t, s, "changed.yaml", b.String())
	p := startSink(t, topo, "a1")
	at := func(end int64) {
		t.Helper()
		eventually(t, time.Minute, func() bool {
			pos := storedPositions(t, pool, s.positions(), s.in)
			return len(pos) == 1 && pos[0] == end
		}, func() string {
			return fmt.Sprintf("positions %v, want partition 0 at %d", storedPositions(t, pool, s.positions(), s.in), end)
		})
	}
	kcatProduce(t, s.in, [][]byte{[]byte(`a|{"event_id":"a","amount":1.25}`)})
	at(1)
	exec("DROP TABLE "+s.table(), "CREATE TABLE "+s.table()+" (event_id text PRIMARY KEY, amount integer)")
	kcatProduce(t, s.in, [][]byte{[]byte(`b|{"event_id":"b","amount":1.5}`), []byte(`c|{"event_id":"c","amount":2}`)})
	at(3)
	exec("ALTER TABLE " + s.table() + " ALTER COLUMN amount TYPE numeric(10,1)")
	kcatProduce(t, s.in, [][]byte{[]byte(`d|{"event_id":"d","amount":1.25}`), []byte(`e|{"event_id":"e","amount":1.5}`)})
	at(5)
	p.stop()
	got := queryPairs(t, pool, "SELECT event_id, amount::text FROM "+s.table())
	if want := map[string]string{"c": "2.0", "e": "1.5"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("table holds %v, want %v (b and d are dead letters, not rounded)", got, want)
	}
	dead := map[string]string{}
	for _, r := range kcatReadJSON(t, s.dlq) {
		dead[r.Key] = r.Headers["exactly.dlq.reason"]
	}
	if fmt.Sprint(dead) != fmt.Sprint(map[string]string{"b": "postgres", "d": "postgres"}) {
		t.Errorf("dead letters %v, want b and d (reason postgres)", dead)
	}
	for _, say := range []string{"target table columns changed while running", "target table was dropped and created again while running"} {
		if !strings.Contains(p.logs.String(), say) {
			t.Errorf("the sink did not say %q", say)
		}
	}
}

// A target table dropped while the sink is stopped is created again, empty,
// at the next start, and the sink resumes after what it loaded: it says
// so at WARN, naming the table and the reset that loads the rows again,
// instead of carrying on without a word.
func TestSinkTableDroppedWhileStopped(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("tbldrop")
	pool := pgPool(t)
	if _, err := pool.Exec(t.Context(), "CREATE SCHEMA "+s.schema); err != nil {
		t.Fatal(err)
	}
	b := sinkYAMLHead(t, s, 1, "{ event_id: event_id, amount: amount }")
	b.WriteString("    commit: { interval: 50ms, max_records: 1000 }\n")
	topo := writeSinkTopology(t, s, "dropped.yaml", b.String())
	kcatProduce(t, s.in, [][]byte{[]byte(`a|{"event_id":"a","amount":1.25}`)})
	p := startSink(t, topo, "a1")
	eventually(t, time.Minute, func() bool {
		pos := storedPositions(t, pool, s.positions(), s.in)
		return len(pos) == 1 && pos[0] == 1
	}, func() string { return fmt.Sprintf("positions %v", storedPositions(t, pool, s.positions(), s.in)) })
	if strings.Contains(p.logs.String(), "created empty") {
		t.Fatalf("a new table with no stored positions was warned about:\n%s", tail(p.logs.String(), 10))
	}
	p.stop()
	if _, err := pool.Exec(t.Context(), "DROP TABLE "+s.table()); err != nil {
		t.Fatal(err)
	}
	p = startSink(t, topo, "a1")
	kcatProduce(t, s.in, [][]byte{[]byte(`b|{"event_id":"b","amount":2}`)})
	eventually(t, time.Minute, func() bool {
		pos := storedPositions(t, pool, s.positions(), s.in)
		return len(pos) == 1 && pos[0] == 2
	}, func() string { return fmt.Sprintf("positions %v", storedPositions(t, pool, s.positions(), s.in)) })
	p.stop()
	logs := p.logs.String()
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "created empty") || !strings.Contains(logs, s.table()) || !strings.Contains(logs, "exactly reset --sink") {
		t.Fatalf("no WARN naming the re-created table and the reset:\n%s", tail(logs, 20))
	}
	if strings.Contains(logs, "target table is empty") {
		t.Fatalf("a table holding row b was warned about as empty:\n%s", tail(logs, 20))
	}

	// Dropped and created again by hand, empty, while the sink is
	// stopped: the table exists at start, and the sink still says that
	// the rows it loaded are not in it.
	for _, q := range []string{"DROP TABLE " + s.table(), "CREATE TABLE " + s.table() + " (event_id text PRIMARY KEY, amount numeric)"} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	p = startSink(t, topo, "a1")
	waitLogged(t, p, "the target table is empty, but the sink's stored positions are past records it loaded", 1, time.Minute,
		"a WARN that the table created again by hand is empty while the positions are past records loaded")
	p.stop()
	if logs := p.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "exactly reset --sink") {
		t.Fatalf("the empty-table warning is no WARN naming the reset:\n%s", tail(logs, 20))
	}
}

// A sink whose role may write its target table but not create the
// positions table next to it stops at start naming the statement that was
// refused, so that "permission denied for schema" does not leave the
// reader to guess which table, the target existing.
func TestSinkSetupNamesTheRefusedStatement(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("setupref")
	pool := pgPool(t)
	role := s.schema + "_role"
	for _, q := range []string{
		"CREATE SCHEMA " + s.schema,
		"CREATE TABLE " + s.table() + " (event_id text PRIMARY KEY, amount numeric)",
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + s.schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE ON " + s.table() + " TO " + role,
	} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s.schema+" CASCADE")
		_, _ = pool.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
	})
	topo := writeSinkTopology(t, s, "refused.yaml", sinkYAMLHead(t, s, 1, "{ event_id: event_id, amount: amount }").String())
	dsn := strings.Replace(pgDSN(t), "postgres://postgres@", "postgres://"+role+"@", 1)
	if !strings.Contains(dsn, role) {
		t.Fatalf("PG_DSN %q names no postgres user to replace", pgDSN(t))
	}
	code, logs := exactlyExit(t, []string{"PG_DSN=" + dsn}, "sink", "--topology", topo, "--instance-id", "a1", "--metrics-addr", "")
	// The statement, as logfmt quotes it: CREATE TABLE IF NOT EXISTS "schema"."positions".
	want := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS \"%s\".\"positions\"`, s.schema)
	if code != 1 || !strings.Contains(logs, want) || !strings.Contains(logs, "permission denied") {
		t.Fatalf("exit %d, want 1 naming the positions table's creation and the refusal:\n%s", code, tail(logs, 15))
	}
}
