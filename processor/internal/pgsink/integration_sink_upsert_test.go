//go:build integration

package pgsink_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// The upsert's fast statement (every staged row, no DISTINCT ON) writes
// what the full INSERT writes: upsert sinks whose batches stream into the
// staging table, or are prepared first (tombstones: delete; the input has
// none), end with the same rows, counts and dead letters as a sink with
// the fast statement off, with and without a version column, over batches
// with a stored key, a key twice in the batch (the fast statement's
// 21000, then the full INSERT), bad values and an older version.
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
			streamed := newModeSink(t, "upfast", topic, topology.ModeUpsert)
			prepared := newModeSink(t, "upprep", topic, topology.ModeUpsert)
			full := newModeSink(t, "upfull", topic, topology.ModeUpsert)
			streamed.sink = openUpsert(t, streamed, topic, tc.version, false)
			prepared.sink = openUpsert(t, prepared, topic, tc.version, true)
			full.sink = openUpsert(t, full, topic, tc.version, false, pgsink.FastUpsert(false))
			for _, d := range []*directSink{streamed, prepared, full} {
				if err := runUntil(t, d.sink, int64(n)); err != nil {
					t.Fatalf("sink %s: %v", d.name, err)
				}
				t.Logf("%s %+v", d.name, d.sink.Stats())
			}
			for _, fast := range []*directSink{streamed, prepared} {
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
			rows := sinkRows(t)(streamed)
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
// table, the rows are the same without the sort.
func TestSinkUpsertFastOrderFollowsTable(t *testing.T) {
	topic := uniqueName("sk_order_in")
	adm := kadm.NewClient(kafkaClient(t))
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
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
	}{
		{"serial", "ALTER TABLE %s ADD COLUMN seq bigserial"},
		{"plain", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newModeSink(t, "uporder", topic, topology.ModeUpsert)
			order := "event_id"
			if tc.alter != "" {
				psqlLines(t, fmt.Sprintf(tc.alter, d.schema+".events"))
				order = "seq"
			}
			d.sink = openUpsert(t, d, topic, "", false)
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
