package pgsink

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The load casts every row's values (a materialized CTE: each value a
// column cannot hold exactly is refused, even in a row that DISTINCT ON
// drops), then keeps one row per key compared in the column's type: the first
// in insert mode, the last in upsert mode; a key-only upsert does nothing
// on conflict.
func TestLoadSQL(t *testing.T) {
	tests := []struct {
		name, mode string
		version    string
		cols       []Column
		types      []colType
		want       string
	}{
		// The greatest version of a run wins, the first of equal ones;
		// a stored row gives way only to a greater version.
		{"upsert with version", "upsert", "v", []Column{{"event_id", "event_id"}, {"body", "$value"}, {"v", "v"}}, []colType{plainType("text"), plainType("jsonb"), plainType("bigint")},
			`WITH exactly_cast_rows AS MATERIALIZED (SELECT c0::text AS v0, c1::jsonb AS v1, c2::bigint AS v2, ord FROM pg_temp.exactly_sink_staging) INSERT INTO "raw"."events" AS stored ("event_id", "body", "v") SELECT v0, v1, v2 FROM (SELECT DISTINCT ON (v0) * FROM exactly_cast_rows ORDER BY v0, v2 DESC, ord ASC) AS staged ORDER BY ord ON CONFLICT ("event_id") DO UPDATE SET "body" = EXCLUDED."body", "v" = EXCLUDED."v" WHERE stored."v" < EXCLUDED."v" OR stored."v" IS NULL`},
		{"upsert with a key-only version", "upsert", "v", []Column{{"event_id", "event_id"}, {"v", "v"}}, []colType{plainType("text"), plainType("timestamp with time zone")},
			`WITH exactly_cast_rows AS MATERIALIZED (SELECT c0::text AS v0, CASE WHEN c1 IS NULL THEN NULL`},
		{"insert", "insert", "", []Column{{"event_id", "event_id"}, {"v", "v"}}, []colType{plainType("uuid"), plainType("text")},
			`WITH exactly_cast_rows AS MATERIALIZED (SELECT c0::uuid AS v0, c1::text AS v1, ord FROM pg_temp.exactly_sink_staging) INSERT INTO "raw"."events" ("event_id", "v") SELECT v0, v1 FROM (SELECT DISTINCT ON (v0) * FROM exactly_cast_rows ORDER BY v0, ord ASC) AS staged ORDER BY ord ON CONFLICT ("event_id") DO NOTHING`},
		{"upsert", "upsert", "", []Column{{"v", "v"}, {"event_id", "event_id"}}, []colType{plainType("text"), plainType("uuid")},
			`WITH exactly_cast_rows AS MATERIALIZED (SELECT c0::text AS v0, c1::uuid AS v1, ord FROM pg_temp.exactly_sink_staging) INSERT INTO "raw"."events" ("v", "event_id") SELECT v0, v1 FROM (SELECT DISTINCT ON (v1) * FROM exactly_cast_rows ORDER BY v1, ord DESC) AS staged ORDER BY ord ON CONFLICT ("event_id") DO UPDATE SET "v" = EXCLUDED."v"`},
		{"upsert key only", "upsert", "", []Column{{"event_id", "event_id"}}, []colType{plainType("bigint")},
			`WITH exactly_cast_rows AS MATERIALIZED (SELECT c0::bigint AS v0, ord FROM pg_temp.exactly_sink_staging) INSERT INTO "raw"."events" ("event_id") SELECT v0 FROM (SELECT DISTINCT ON (v0) * FROM exactly_cast_rows ORDER BY v0, ord DESC) AS staged ORDER BY ord ON CONFLICT ("event_id") DO NOTHING`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) { c.Mode, c.Columns, c.Version = tt.mode, tt.cols, tt.version })
			s.types = tt.types
			s.buildSQL()
			// The staging table's name ends in its shape's hash.
			tt.want = strings.ReplaceAll(tt.want, "pg_temp.exactly_sink_staging)", "pg_temp."+s.sql.stagingName+")")
			if tt.version != "" && tt.types[len(tt.types)-1].base != "bigint" {
				// A checked cast: its whole text is castExpr's.
				if !strings.HasPrefix(s.sql.insert, tt.want) || !strings.Contains(s.sql.insert, `AS v1, ord FROM pg_temp.`+s.sql.stagingName+`) INSERT INTO "raw"."events" AS stored ("event_id", "v") SELECT v0, v1 FROM (SELECT DISTINCT ON (v0) * FROM exactly_cast_rows ORDER BY v0, v1 DESC, ord ASC) AS staged ORDER BY ord ON CONFLICT ("event_id") DO UPDATE SET "v" = EXCLUDED."v" WHERE stored."v" < EXCLUDED."v" OR stored."v" IS NULL`) {
					t.Errorf("insert:\n%s", s.sql.insert)
				}
				return
			}
			if s.sql.insert != tt.want {
				t.Errorf("insert:\n%s\nwant\n%s", s.sql.insert, tt.want)
			}
			if got := s.stagingColumns(); len(got) != len(tt.cols)+1 || got[len(got)-1] != ordColumn {
				t.Errorf("staging columns %v", got)
			}
		})
	}
}

// A stuck batch names its offsets per partition: from the stored position,
// or the first offset read.
func TestBatchRanges(t *testing.T) {
	b := newBatch()
	b.order = []int32{2, 0}
	b.start[2] = position{stored: true, next: 10}
	b.start[0] = position{}
	b.first[0], b.first[2] = 5, 12
	b.next[2], b.next[0] = 14, 8
	if got, want := b.ranges(), "p2 [10, 14), p0 [5, 8)"; got != want {
		t.Errorf("ranges %q, want %q", got, want)
	}
}

// An error of no known class follows records only when something else of
// the load was written.
func TestFollowsRecords(t *testing.T) {
	pe := &pgconn.PgError{Code: "U0001", Message: "refused"}
	tests := []struct {
		name                 string
		ops, failed, unknown int
		wantErr              bool
	}{
		{"no unclassified error", 5, 2, 0, false},
		{"one of five fails alone", 5, 1, 1, false},
		{"unclassified and row errors, one op written", 5, 4, 2, false},
		{"every op fails alone", 5, 5, 5, true},
		{"every op fails, some for a row error", 5, 5, 1, true},
		{"a batch of one record", 1, 1, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, nil)
			res := &result{unclassified: tt.unknown}
			if tt.unknown > 0 {
				res.first = pe
			}
			err := s.followsRecords(tt.ops, res, tt.failed)
			if (err != nil) != tt.wantErr {
				t.Fatalf("followsRecords = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && (!errors.Is(err, pe) || Classify(err) != ClassUnknown || !strings.Contains(err.Error(), "follows no record")) {
				t.Errorf("error %v: want the unclassified error, wrapped", err)
			}
		})
	}
}

// A created table's version column read from a field is bigint, so that
// versions compare as numbers; other sources keep their types.
func TestVersionColumnType(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"field", "v", `"v" bigint`},
		{"offset", "$offset", `"v" bigint`},
		{"timestamp", "$timestamp", `"v" timestamptz`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) {
				c.Mode, c.Version = "upsert", "v"
				c.Columns = []Column{{"event_id", "event_id"}, {"v", tt.src}}
			})
			if setup := strings.Join(s.setupSQL(), "\n"); !strings.Contains(setup, tt.want) {
				t.Errorf("setup lacks %q:\n%s", tt.want, setup)
			}
		})
	}
}
