package pgsink

import (
	"strings"
	"testing"

	"github.com/exactly-io/exactly/topology"
)

func TestFastRest(t *testing.T) {
	var f fastRest
	if f.skip() {
		t.Fatal("a new sink skips the fast statement")
	}
	// Each key twice doubles the rest, up to maxDirectRest.
	for _, want := range []int{1, 2, 4, 8, 16, 32, 64, 64} {
		f.done(false)
		n := 0
		for f.skip() {
			n++
		}
		if n != want {
			t.Fatalf("rested %d batches, want %d", n, want)
		}
	}
	f.done(true)
	f.done(false)
	if !f.skip() || f.skip() {
		t.Fatal("after a success, a key twice rests one batch")
	}
}

func TestBuildFastUpsertSQL(t *testing.T) {
	cols := []Column{{Name: "event_id", Source: "event_id"}, {Name: "v", Source: "v"}, {Name: "body", Source: "$value"}}
	types := []colType{plainType("text"), plainType("bigint"), plainType("jsonb")}
	for _, tc := range []struct {
		name    string
		mode    string
		cols    []Column
		version int
		hidden  bool     // nothing on the table can tell the rows' order
		want    []string // substrings; none: no fast statement
	}{
		{"insert mode", topology.ModeInsert, cols, -1, false, nil},
		{"event id alone", topology.ModeUpsert, cols[:1], -1, false, nil},
		{"upsert", topology.ModeUpsert, cols, -1, false, []string{
			`INSERT INTO "s"."t" ("event_id", "v", "body") SELECT c0::text, `, `FROM pg_temp.exactly_sink_staging_x ORDER BY ord ON CONFLICT ("event_id") DO UPDATE SET "v" = EXCLUDED."v", "body" = EXCLUDED."body"`}},
		{"version", topology.ModeUpsert, cols, 1, false, []string{
			`INSERT INTO "s"."t" AS stored `, `DO UPDATE SET "v" = EXCLUDED."v", "body" = EXCLUDED."body" WHERE stored."v" < EXCLUDED."v" OR stored."v" IS NULL`}},
		{"order hidden", topology.ModeUpsert, cols, -1, true, []string{
			`INSERT INTO "s"."t" ("event_id", "v", "body") SELECT c0::text, `, `FROM pg_temp.exactly_sink_staging_x ON CONFLICT ("event_id") DO UPDATE SET "v" = EXCLUDED."v", "body" = EXCLUDED."body"`}},
		{"version, order hidden", topology.ModeUpsert, cols, 1, true, []string{
			`FROM pg_temp.exactly_sink_staging_x ON CONFLICT ("event_id") DO UPDATE SET "v" = EXCLUDED."v", "body" = EXCLUDED."body" WHERE stored."v" < EXCLUDED."v" OR stored."v" IS NULL`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sink{cfg: Config{Mode: tc.mode, Columns: tc.cols, EventID: "event_id"}, table: table{"s", "t"}, types: types[:len(tc.cols)], versionIndex: tc.version, orderHidden: tc.hidden}
			s.sql.stagingName = stagingTable + "_x"
			if tc.version >= 0 {
				s.cfg.Version = tc.cols[tc.version].Name
			}
			got := s.buildFastUpsertSQL()
			if tc.want == nil {
				if got != "" {
					t.Fatalf("fast statement %q, want none", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("fast statement\n%s\nlacks\n%s", got, w)
				}
			}
		})
	}
}
