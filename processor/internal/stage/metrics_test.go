package stage

import (
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
)

// A new stage's rare-event counters exist at 0 before anything happens, so
// that their first increase shows in rate() and increase(); so do the
// series the alert rules read. The time of the last commit is the
// stage's start until it commits.
func TestNewStageSeriesStartAtZero(t *testing.T) {
	reg, m := promtest.Registered(t, NewMetrics)
	before := time.Now()
	if _, err := New(Config{Stage: "clean", InstanceID: "a", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq"},
		WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	promtest.StartAtZero(t, reg, []promtest.Series{
		{Name: "exactly_stage_ready", Count: 1},
		{Name: "exactly_stage_transactions_aborted_total", Count: 3},
		{Name: "exactly_stage_retries_total", Count: 2},
		{Name: "exactly_stage_transaction_triggers_total", Count: 5},
		{Name: "exactly_stage_transactions_committed_total", Count: 1},
		{Name: "exactly_stage_records_filtered_total", Count: 1},
		{Name: "exactly_stage_rebalances_total", Count: 1},
		{Name: "exactly_stage_session_rebuilds_total", Count: 1},
		// Histograms: the series exist (no sample) before the first commit.
		{Name: "exactly_stage_transaction_duration_seconds", Count: 1},
		{Name: "exactly_stage_transaction_commit_duration_seconds", Count: 1},
		{Name: "exactly_stage_transaction_records", Count: 1},
		{Name: "exactly_stage_end_to_end_latency_seconds", Count: 1},
		{Name: "exactly_stage_records_consumed_total", Count: 1},
		{Name: "exactly_stage_records_dead_lettered_total", Count: 6},
	})
	promtest.StartedAt(t, reg, "exactly_stage_last_commit_timestamp_seconds", before, time.Now())
}
