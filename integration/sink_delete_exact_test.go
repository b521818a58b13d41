//go:build integration

package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A tombstone deletes the row whose event ID is the record key, read as
// the sink reads an event ID it inserts: a key the column cannot hold
// exactly (a rounding numeric, a dropped offset, a rounding float, spaces
// a char(n) would trim) deletes nothing and is a dead letter, reason
// postgres; a key of another spelling of a stored value (2.5 for 2.50)
// deletes that row. A plain cast read 1.005 as 1.01 in numeric(10,2), and
// 2024-01-01T00:00:00+05:00 as midnight in timestamp, and deleted rows
// nobody named.
func TestSinkDeletesByExactEventID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, typ string
		rows      []string          // event IDs inserted first
		deletes   []string          // then a tombstone keyed by each
		want      map[string]string // event_id::text left in the table
		refused   []string          // tombstones that are dead letters
	}{
		{"numeric", "numeric(10,2)", []string{"1.01", "2.50"}, []string{"1.005", "2.5"},
			map[string]string{"1.01": "1.01"}, []string{"1.005"}},
		{"timestamp", "timestamp", []string{"2024-01-01T00:00:00", "2024-01-02T00:00:00"}, []string{"2024-01-01T00:00:00+05:00", "2024-01-02 00:00:00Z"},
			map[string]string{"2024-01-01 00:00:00": "2024-01-01 00:00:00"}, []string{"2024-01-01T00:00:00+05:00"}},
		{"real", "real", []string{"16777216", "0.5"}, []string{"16777217", "0.50"},
			map[string]string{"1.6777216e+07": "1.6777216e+07"}, []string{"16777217"}},
		{"char", "char(3)", []string{"ab", "cd"}, []string{"ab   ", "cd"},
			map[string]string{"ab": "ab"}, []string{"ab   "}},
		// citext off the search_path (as hosted Postgres often installs
		// extensions): the delete compares with citext's =, as the
		// primary key does; text's would keep Abc.
		{"citext", "citext", []string{"Abc", "XyZ"}, []string{"aBC"},
			map[string]string{"XyZ": "XyZ"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSinkSpec("del_" + tc.name)
			pool := pgPool(t)
			typ := tc.typ
			if typ == "citext" {
				typ = citextType(t, pool)
			}
			for _, q := range []string{"CREATE SCHEMA " + s.schema, "CREATE TABLE " + s.table() + " (event_id " + typ + " PRIMARY KEY)"} {
				if _, err := pool.Exec(t.Context(), q); err != nil {
					t.Fatal(err)
				}
			}
			b := sinkYAMLHead(t, s, 1, "{ event_id: event_id }")
			b.WriteString("      tombstones: delete\n    commit: { interval: 50ms, max_records: 1000 }\n")
			topo := writeSinkTopology(t, s, "delete.yaml", b.String())
			var lines [][]byte
			for _, id := range tc.rows {
				lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q}`, id, id))
			}
			for _, id := range tc.deletes {
				lines = append(lines, []byte(id+"|"))
			}
			kcatProduce(t, s.in, lines)
			p := startSink(t, topo, "a1")
			end := int64(len(lines))
			eventually(t, time.Minute, func() bool {
				pos := storedPositions(t, pool, s.positions(), s.in)
				return len(pos) == 1 && pos[0] == end
			}, func() string {
				return fmt.Sprintf("positions %v, want partition 0 at %d", storedPositions(t, pool, s.positions(), s.in), end)
			})
			p.stop()
			got := queryPairs(t, pool, "SELECT event_id::text, event_id::text FROM "+s.table())
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("table holds %v, want %v", got, tc.want)
			}
			dead := map[string]string{}
			for _, r := range kcatReadJSON(t, s.dlq) {
				dead[r.Key] = r.Headers["exactly.dlq.reason"]
			}
			if len(dead) != len(tc.refused) {
				t.Errorf("dead letters %v, want the tombstones %q", dead, tc.refused)
			}
			for _, k := range tc.refused {
				if dead[k] != "postgres" {
					t.Errorf("tombstone %q: dead letter reason %q, want postgres", k, dead[k])
				}
			}
		})
	}
}

// citextType installs the citext extension in schema it_ext, off the
// sink's search_path, unless it is installed already, and returns its
// type, schema-qualified.
func citextType(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var ns string
	if err := pool.QueryRow(t.Context(), "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'citext'").Scan(&ns); err == nil {
		return ns + ".citext"
	}
	for _, q := range []string{"CREATE SCHEMA IF NOT EXISTS it_ext", "CREATE EXTENSION IF NOT EXISTS citext SCHEMA it_ext"} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("citext: %v", err)
		}
	}
	return "it_ext.citext"
}
