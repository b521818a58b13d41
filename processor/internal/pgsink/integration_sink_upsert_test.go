//go:build integration

package pgsink_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// The upsert's fast statement (every staged row, no DISTINCT ON) writes
// what the full INSERT writes: an upsert sink whose batches stream into
// the staging table and a sink of the same input whose batches are
// prepared and take the full INSERT (tombstones: delete; the input has
// none) end with the same rows, counts and dead letters, with and without
// a version column, over batches with a stored key, a key twice in the
// batch (the fast statement's 21000, then the full INSERT), bad values
// and an older version.
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
			fast := newModeSink(t, "upfast", topic, topology.ModeUpsert)
			full := newModeSink(t, "upfull", topic, topology.ModeUpsert)
			for _, d := range []*directSink{fast, full} {
				d.sink = openUpsert(t, d, topic, tc.version, d == full)
				if err := runUntil(t, d.sink, int64(n)); err != nil {
					t.Fatalf("sink %s: %v", d.name, err)
				}
			}
			fs, ss := fast.sink.Stats(), full.sink.Stats()
			t.Logf("fast %+v", fs)
			t.Logf("full %+v", ss)
			if fs.Rows != ss.Rows || fs.Duplicates != ss.Duplicates || fs.DeadLettered != ss.DeadLettered {
				t.Errorf("counts differ: fast %+v, full %+v", fs, ss)
			}
			if fs.DeadLettered != 2 {
				t.Errorf("%d dead letters, want 2", fs.DeadLettered)
			}
			checkSameTables(t, fast, full, map[string]func(*directSink) []string{"rows": sinkRows(t), "dead letters": sinkDeadLetters(t)})
			// b4-4: 44 then 99 in one batch, the last and the greatest;
			// b1-1: 11, then 3 in a later batch, older by version.
			want := []string{"b4-4|99|", "b1-1|3|"}
			if tc.version != "" {
				want[1] = "b1-1|11|"
			}
			rows := sinkRows(t)(fast)
			for _, w := range want {
				if !slices.ContainsFunc(rows, func(l string) bool { return strings.HasPrefix(l, w) }) {
					t.Errorf("no row %s...", w)
				}
			}
		})
	}
}

// openUpsert opens d's sink in upsert mode with version column version
// (unless ""), its batches prepared (full) or streamed into the staging
// table.
func openUpsert(t *testing.T, d *directSink, input, version string, full bool) *pgsink.Sink {
	t.Helper()
	cfg := pgsink.Config{
		Sink: d.name, InstanceID: "d1", Brokers: []string{brokers(t)},
		Input: input, DeadLetterTable: d.schema + ".dead", DSN: pgDSN(t),
		Table: d.schema + ".events", PositionsTable: d.schema + ".positions", EventID: "event_id",
		Columns:        []pgsink.Column{{Name: "event_id", Source: "event_id"}, {Name: "n", Source: "n"}, {Name: "body", Source: "$value"}},
		CommitInterval: 50 * time.Millisecond, MaxRecords: 10, Mode: topology.ModeUpsert, Version: version,
	}
	if full {
		cfg.Tombstones = topology.TombstonesDelete
	}
	s, err := pgsink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
