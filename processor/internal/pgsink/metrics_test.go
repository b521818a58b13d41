package pgsink

import (
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
)

// A new sink's rare-event counters exist at 0 before anything happens, so
// that their first increase shows in rate() and increase(); so do the
// series the alert rules read. The time of the last commit is the sink's
// start until it commits.
func TestNewSinkSeriesStartAtZero(t *testing.T) {
	reg, m := promtest.Registered(t, NewMetrics)
	before := time.Now()
	cfg := testConfig()
	if _, err := New(cfg, WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	promtest.StartAtZero(t, reg, []promtest.Series{
		{Name: "exactly_sink_ready", Count: 1},
		{Name: "exactly_sink_retries_total", Count: len(retryCauses)},
		{Name: "exactly_sink_batches_fenced_total", Count: 1},
		{Name: "exactly_sink_batches_committed_total", Count: 1},
		{Name: "exactly_sink_rows_written_total", Count: 1},
		{Name: "exactly_sink_rows_deleted_total", Count: 1},
		{Name: "exactly_sink_rows_duplicate_total", Count: 1},
		{Name: "exactly_sink_rebalances_total", Count: 1},
		{Name: "exactly_sink_direct_copies_total", Count: 2},
		{Name: "exactly_sink_records_consumed_total", Count: 1},
		{Name: "exactly_sink_records_dead_lettered_total", Count: len(deadLetterReasons)},
	})
	promtest.StartedAt(t, reg, "exactly_sink_last_commit_timestamp_seconds", before, time.Now())
}
