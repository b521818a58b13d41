//go:build integration

package pgsink_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// The direct COPY and the upsert's fast statement (every staged row, no
// DISTINCT ON) write what the full INSERT writes: upsert sinks whose
// batches stream into the table (the direct path) or into the staging
// table, or are prepared first (tombstones: delete; the input has none),
// end with the same rows, counts and dead letters as a sink with both off,
// with and without a version column, over clean batches (written by the
// direct COPY), batches with a stored key, a key twice in the batch (the
// COPY's 23505, then the fast statement's 21000, then the full INSERT),
// bad values and an older version.
func TestSinkUpsertFastSameAsFull(t *testing.T) {
	topic, n := directInput(t)
	for _, tc := range []struct {
		name    string
		version string
	}{
		{"no version", ""},
		{"version", "n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := newModeSink(t, "updirect", topic, topology.ModeUpsert)
			streamed := newModeSink(t, "upfast", topic, topology.ModeUpsert)
			prepared := newModeSink(t, "upprep", topic, topology.ModeUpsert)
			full := newModeSink(t, "upfull", topic, topology.ModeUpsert)
			direct.sink = openUpsert(t, direct, topic, tc.version, false)
			streamed.sink = openUpsert(t, streamed, topic, tc.version, false, pgsink.DirectCopy(false))
			prepared.sink = openUpsert(t, prepared, topic, tc.version, true)
			full.sink = openUpsert(t, full, topic, tc.version, false, pgsink.FastUpsert(false), pgsink.DirectCopy(false))
			for _, d := range []*directSink{direct, streamed, prepared, full} {
				if err := runUntil(t, d.sink, int64(n)); err != nil {
					t.Fatalf("sink %s: %v", d.name, err)
				}
				t.Logf("%s %+v", d.name, d.sink.Stats())
			}
			for _, d := range []*directSink{direct, prepared} {
				if st := d.sink.Stats(); st.DirectCopies == 0 || st.DirectFallbacks == 0 {
					t.Errorf("%s: %d direct copies, %d fallbacks; want both", d.name, st.DirectCopies, st.DirectFallbacks)
				}
			}
			if st := streamed.sink.Stats(); st.DirectCopies+st.DirectFallbacks != 0 {
				t.Errorf("%s took the direct path, off: %+v", streamed.name, st)
			}
			for _, fast := range []*directSink{direct, streamed, prepared} {
				fs, ss := fast.sink.Stats(), full.sink.Stats()
				if fs.Rows != ss.Rows || fs.Duplicates != ss.Duplicates || fs.DeadLettered != ss.DeadLettered {
					t.Errorf("counts differ: %s %+v, full %+v", fast.name, fs, ss)
				}
				if fs.DeadLettered != 2 {
					t.Errorf("%s: %d dead letters, want 2", fast.name, fs.DeadLettered)
				}
				checkSameTables(t, fast, full, map[string]func(*directSink) []string{"rows": sinkRows(t), "dead letters": sinkDeadLetters(t)})
			}
			// b4-4: 44 then 99 in one batch, the last and the greatest;
			// b1-1: 11, then 3 in a later batch, older by version.
			want := []string{"b4-4|99|", "b1-1|3|"}
			if tc.version != "" {
				want[1] = "b1-1|11|"
			}
			rows := sinkRows(t)(direct)
			for _, w := range want {
				if !slices.ContainsFunc(rows, func(l string) bool { return strings.HasPrefix(l, w) }) {
					t.Errorf("no row %s...", w)
				}
			}
		})
	}
}

// openUpsert opens d's sink in upsert mode with version column version
// (unless ""), its batches prepared or streamed into the staging table.
func openUpsert(t *testing.T, d *directSink, input, version string, prepared bool, opts ...pgsink.Option) *pgsink.Sink {
	t.Helper()
	cfg := pgsink.Config{
		Sink: d.name, InstanceID: "d1", Brokers: []string{brokers(t)},
		Input: input, DeadLetterTable: d.schema + ".dead", DSN: pgDSN(t),
		Table: d.schema + ".events", PositionsTable: d.schema + ".positions", EventID: "event_id",
		Columns:        []pgsink.Column{{Name: "event_id", Source: "event_id"}, {Name: "n", Source: "n"}, {Name: "body", Source: "$value"}},
		CommitInterval: 50 * time.Millisecond, MaxRecords: 10, Mode: topology.ModeUpsert, Version: version,
	}
	if prepared {
		cfg.Tombstones = topology.TombstonesDelete
	}
	s, err := pgsink.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The fast upsert statement leaves out its sort only when nothing on the
// table can tell the rows' order: on a table with a serial column, rows
// new to the table draw their values in the records' order; on a plain
// table, the rows are the same without the sort. The direct COPY draws
// them in the records' order too.
func TestSinkUpsertFastOrderFollowsTable(t *testing.T) {
	topic := newTopic(t, "sk_order_in")
	var lines [][]byte
	var want []string
	for i := range 40 {
		id := fmt.Sprintf("k%02d", (i*17)%40) // not in key order
		lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q,"n":%d}`, id, id, i))
		want = append(want, id)
	}
	kcatProduce(t, topic, lines)
	for _, tc := range []struct {
		name, alter string
		direct      bool
	}{
		{"serial", "ALTER TABLE %s ADD COLUMN seq bigserial", false},
		{"plain", "", false},
		{"serial, direct", "ALTER TABLE %s ADD COLUMN seq bigserial", true},
		{"plain, direct", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newModeSink(t, "uporder", topic, topology.ModeUpsert)
			order := "event_id"
			if tc.alter != "" {
				psqlLines(t, fmt.Sprintf(tc.alter, d.schema+".events"))
				order = "seq"
			}
			d.sink = openUpsert(t, d, topic, "", false, pgsink.DirectCopy(tc.direct))
			if err := runUntil(t, d.sink, int64(len(lines))); err != nil {
				t.Fatal(err)
			}
			got := psqlLines(t, "SELECT event_id FROM "+d.schema+".events"+" WHERE event_id <> 'seed-1' ORDER BY "+order)
			exp := slices.Clone(want)
			if tc.alter == "" {
				slices.Sort(exp)
			}
			if !slices.Equal(got, exp) {
				t.Fatalf("rows by %s:\n%v\nwant\n%v", order, got, exp)
			}
		})
	}
}

// ON CONFLICT DO UPDATE fires a table's statement-level UPDATE triggers
// even when every row is new; COPY does not. On a table with one, the
// upsert's direct COPY is rolled back after it wrote, and the batch takes
// the staged load, which fires the trigger; a row-level UPDATE trigger
// does not keep the direct path off, as no new row fires it.
func TestSinkUpsertDirectKeepsUpdateTriggers(t *testing.T) {
	topic := newTopic(t, "sk_uptrig_in")
	var lines [][]byte
	for i := range 30 {
		lines = append(lines, fmt.Appendf(nil, `k%02d|{"event_id":"k%02d","n":%d}`, i, i, i))
	}
	kcatProduce(t, topic, lines)
	for _, tc := range []struct {
		name, level string
		direct      bool
	}{
		{"statement", "STATEMENT", false},
		{"row", "ROW", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newModeSink(t, "uptrig", topic, topology.ModeUpsert)
			tbl := d.schema + ".events"
			psqlLines(t, "CREATE TABLE "+d.schema+".fired (at timestamptz DEFAULT now())")
			psqlLines(t, "CREATE FUNCTION "+d.schema+".log_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "+d.schema+".fired DEFAULT VALUES; RETURN NULL; END $$")
			psqlLines(t, "CREATE TRIGGER on_update AFTER UPDATE ON "+tbl+" FOR EACH "+tc.level+" EXECUTE FUNCTION "+d.schema+".log_update()")
			d.sink = openUpsert(t, d, topic, "", false)
			if err := runUntil(t, d.sink, int64(len(lines))); err != nil {
				t.Fatal(err)
			}
			st := d.sink.Stats()
			fired := psqlLines(t, "SELECT count(*) FROM "+d.schema+".fired")
			rows := psqlLines(t, "SELECT count(*) FROM "+tbl+" WHERE event_id <> 'seed-1'")
			if rows[0] != "30" || st.Rows != 30 {
				t.Fatalf("%s rows in the table, %d written; want 30", rows[0], st.Rows)
			}
			if tc.direct {
				if st.DirectCopies == 0 || st.DirectFallbacks != 0 || fired[0] != "0" {
					t.Fatalf("row trigger: %d direct copies, %d fallbacks, fired %s times; want copies, no fallback, never fired", st.DirectCopies, st.DirectFallbacks, fired[0])
				}
				return
			}
			if st.DirectCopies != 0 || st.DirectFallbacks == 0 || fired[0] == "0" {
				t.Fatalf("statement trigger: %d direct copies, %d fallbacks, fired %s times; want no copy written, fallbacks, fired", st.DirectCopies, st.DirectFallbacks, fired[0])
			}
		})
	}
}

// After a batch with a stored key falls back, an upsert stream of new
// keys goes back to the direct COPY once its rest is over: streamed
// batches count the rest down as prepared ones do.
func TestSinkUpsertDirectAfterFallback(t *testing.T) {
	topic := newTopic(t, "sk_upback_in")
	lines := [][]byte{[]byte(`seed-1|{"event_id":"seed-1","n":1}`)} // stored: the first batch falls back
	for i := range 109 {
		lines = append(lines, fmt.Appendf(nil, `k%03d|{"event_id":"k%03d","n":%d}`, i, i, i))
	}
	kcatProduce(t, topic, lines)
	d := newModeSink(t, "upback", topic, topology.ModeUpsert)
	d.sink = openUpsert(t, d, topic, "", false)
	if err := runUntil(t, d.sink, int64(len(lines))); err != nil {
		t.Fatal(err)
	}
	st := d.sink.Stats()
	t.Logf("%+v", st)
	// 11 batches of 10: the first falls back, the second rests.
	if st.DirectFallbacks != 1 || st.DirectCopies < 8 {
		t.Fatalf("%d direct copies, %d fallbacks; want 1 fallback and the rest of the batches copied", st.DirectCopies, st.DirectFallbacks)
	}
	if got := psqlLines(t, "SELECT count(*), sum(n) FROM "+d.schema+".events"); got[0] != "110|5887" {
		t.Fatalf("count|sum(n) = %s, want 110|5887", got[0])
	}
}
