//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// changeSinkTopology writes a one-sink topology for s (input s.in with
// partitions partitions) whose postgres block ends with extra (lines
// indented six spaces), with sink name name and positions table
// <schema>.<positions>, and creates its topics. The table is dropped when
// the test passes.
func changeSinkTopology(t testing.TB, s sinkSpec, name, positions string, partitions int, columns, extra string) string {
	t.Helper()
	s.name = name
	b := sinkYAMLHead(t, s, partitions, columns)
	text := strings.Replace(b.String(), "positions_table: "+s.positions(), "positions_table: "+s.schema+"."+positions, 1)
	text += extra + fmt.Sprintf("    commit: { interval: %s, max_records: %d }\n", s.interval, s.maxRecords)
	return writeSinkTopology(t, s, name+".yaml", text)
}

// versionRows reads table's rows as "event_id|v|note" lines, ordered by
// event_id, with an independent pgx query.
func versionRows(t testing.TB, pool *pgxpool.Pool, table, cols string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), fmt.Sprintf("SELECT concat_ws('|', %s) FROM %s ORDER BY event_id", cols, table))
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return nil
		}
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// positionsAt reports whether every partition's position in positions is
// its read_committed end (an empty partition may have none stored).
func positionsAt(t testing.TB, pool *pgxpool.Pool, positions, topic string) bool {
	t.Helper()
	got, want := storedPositions(t, pool, positions, topic), committedEnds(t, topic)
	for p, n := range want {
		if got[p] != n {
			return false
		}
	}
	return true
}

// The version guard: k1 at version 2 on partition 0, then k1 at version 1
// on partition 1, read later: the row keeps version 2. In one batch, the
// greatest version of a key wins, the first of equal ones. A record
// without a version is a dead letter (reason version), one whose version
// is not a bigint is located by the bisection (reason postgres, naming the
// field) while the rest of its batch loads. Replaying both
// partitions from the start, as a new sink, changes nothing.
func TestSinkVersionGuard(t *testing.T) {
	s := newSinkSpec("s17a_ver")
	const cols = "{ event_id: event_id, v: v, note: note }"
	const extra = "      mode: upsert\n      version: v\n"
	topo := changeSinkTopology(t, s, s.name, "positions", 2, cols, extra)
	pool := pgPool(t)
	table := s.table()
	read := func() []string { return versionRows(t, pool, table, "event_id, v, note") }

	// Same-batch duplicates, produced before the sink starts so that
	// its first poll reads them together.
	kcatProducePartition(t, s.in, 0, [][]byte{
		[]byte(`k2|{"event_id":"k2","v":1,"note":"a"}`),
		[]byte(`k2|{"event_id":"k2","v":3,"note":"b"}`),
		[]byte(`k2|{"event_id":"k2","v":3,"note":"c"}`),
		[]byte(`k2|{"event_id":"k2","v":2,"note":"d"}`),
		[]byte(`k3|{"event_id":"k3","note":"no version"}`),
		[]byte(`k3|{"event_id":"k3","v":null,"note":"null version"}`),
		[]byte(`k4|{"event_id":"k4","v":"abc","note":"not a bigint"}`),
	})
	p := startSink(t, topo, "v1")
	eventually(t, time.Minute, func() bool { return positionsAt(t, pool, s.positions(), s.in) },
		func() string {
			return fmt.Sprintf("positions %v; rows %v", storedPositions(t, pool, s.positions(), s.in), read())
		})

	kcatProducePartition(t, s.in, 0, [][]byte{[]byte(`k1|{"event_id":"k1","v":2,"note":"p0 v2"}`)})
	eventually(t, time.Minute, func() bool { return positionsAt(t, pool, s.positions(), s.in) && len(read()) == 2 },
		func() string { return fmt.Sprintf("k1 v2 stored: rows %v", read()) })
	kcatProducePartition(t, s.in, 1, [][]byte{[]byte(`k1|{"event_id":"k1","v":1,"note":"p1 v1"}`)})
	eventually(t, time.Minute, func() bool { return positionsAt(t, pool, s.positions(), s.in) },
		func() string {
			return fmt.Sprintf("k1 v1 read: positions %v", storedPositions(t, pool, s.positions(), s.in))
		})
	p.stop()

	want := []string{"k1|2|p0 v2", "k2|3|b"}
	if got := read(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows %q, want %q", got, want)
	}
	var typ string
	if err := pool.QueryRow(context.Background(), "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'v'", table).Scan(&typ); err != nil || typ != "bigint" {
		t.Fatalf("version column type %q (%v), want bigint", typ, err)
	}
	dl := kcatReadJSON(t, s.dlq)
	if len(dl) != 3 {
		t.Fatalf("%d dead letters, want the 2 records without a version and the one not a bigint: %+v", len(dl), dl)
	}
	for _, d := range dl[:2] {
		if d.Headers[deadletter.HeaderReason] != deadletter.ReasonVersion || !strings.Contains(d.Headers[deadletter.HeaderError], `version column "v"`) {
			t.Errorf("dead letter %+v: want reason version naming the column", d)
		}
	}
	if d := dl[2]; d.Headers[deadletter.HeaderReason] != deadletter.ReasonPostgres || d.Headers[deadletter.HeaderSQLState] != "22P02" || !strings.Contains(d.Headers[deadletter.HeaderError], `field "v"`) {
		t.Errorf("dead letter %+v: want reason postgres, 22P02, naming field v", d)
	}

	// Replay both partitions from the start, as a new sink with its own
	// positions, into the same table, with a stored row to be guarded
	// against a greater version: nothing changes.
	replay := changeSinkTopology(t, s, s.name+"_replay", "positions_replay", 2, cols, extra)
	r := startSink(t, replay, "v2")
	eventually(t, time.Minute, func() bool { return positionsAt(t, pool, s.schema+".positions_replay", s.in) },
		func() string {
			return fmt.Sprintf("replay positions %v", storedPositions(t, pool, s.schema+".positions_replay", s.in))
		})
	r.stop()
	if got := read(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after the replay rows %q, want %q", got, want)
	}
	if n := len(kcatReadJSON(t, s.dlq)); n != 6 {
		t.Fatalf("%d dead letters after the replay, want 6 (the replay's own 3)", n)
	}
}

// A version column whose type does not order versions as numbers or times
// (here text, as a sink creates for a plain field before `version` is set)
// is refused at start, naming the column: as text, "10" < "9", and newer
// versions would be dropped silently. On a bigint column, versions that
// Postgres reads as NaN or an infinity are dead letters (reason version):
// a row stored with one could never be replaced.
func TestSinkVersionColumnMustOrder(t *testing.T) {
	s := newSinkSpec("vorder")
	const cols = "{ event_id: event_id, v: v, note: note }"
	pool := pgPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+s.schema); err != nil {
		t.Fatal(err)
	}
	table := s.table()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (event_id text PRIMARY KEY, v text, note text)"); err != nil {
		t.Fatal(err)
	}
	topo := changeSinkTopology(t, s, s.name, "positions", 1, cols, "      mode: upsert\n      version: v\n")
	p := startSink(t, topo, "v1")
	err := p.wait(time.Minute)
	if err == nil {
		t.Fatalf("sink with a text version column exited 0; want a refusal")
	}
	if logs := p.logs.String(); !strings.Contains(logs, `version column \"v\"`) && !strings.Contains(logs, `version column "v"`) || !strings.Contains(logs, "text") {
		t.Fatalf("refusal does not name the version column and its type; logs:\n%s", tail(logs, 20))
	}

	if _, err := pool.Exec(ctx, "ALTER TABLE "+table+" ALTER COLUMN v TYPE bigint USING v::bigint"); err != nil {
		t.Fatal(err)
	}
	kcatProducePartition(t, s.in, 0, [][]byte{
		[]byte(`a|{"event_id":"a","v":9,"note":"nine"}`),
		[]byte(`a|{"event_id":"a","v":10,"note":"ten"}`),
		[]byte(`b|{"event_id":"b","v":"NaN","note":"nan"}`),
		[]byte(`c|{"event_id":"c","v":"-Infinity","note":"minus infinity"}`),
		[]byte(`d|{"event_id":"d","v":"inf","note":"inf"}`),
	})
	p = startSink(t, topo, "v1")
	eventually(t, time.Minute, func() bool { return positionsAt(t, pool, s.positions(), s.in) },
		func() string { return fmt.Sprintf("positions %v", storedPositions(t, pool, s.positions(), s.in)) })
	p.stop()
	if got, want := strings.Join(versionRows(t, pool, table, "event_id, v, note"), ","), "a|10|ten"; got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
	dl := kcatReadJSON(t, s.dlq)
	if len(dl) != 3 {
		t.Fatalf("%d dead letters, want the 3 records whose version is NaN or an infinity: %+v", len(dl), dl)
	}
	for _, d := range dl {
		if d.Headers[deadletter.HeaderReason] != deadletter.ReasonVersion || !strings.Contains(d.Headers[deadletter.HeaderError], "no later version") {
			t.Errorf("dead letter %+v: want reason version saying it could never be replaced", d)
		}
	}
}
