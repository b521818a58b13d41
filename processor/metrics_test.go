package processor

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A new stage's rare-event counters exist at 0 before anything happens, so
// that their first increase shows in rate() and increase().
func TestNewStageSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Stage: "clean", InstanceID: "a", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq"},
		WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		series int
	}{
		{"exactly_stage_ready", 1},
		{"exactly_stage_transactions_aborted_total", 3},
		{"exactly_stage_retries_total", 2},
		{"exactly_stage_transactions_committed_total", 1},
		{"exactly_stage_records_filtered_total", 1},
		{"exactly_stage_rebalances_total", 1},
		{"exactly_stage_session_rebuilds_total", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if n := countSeries(t, reg, c.name); n != c.series {
				t.Errorf("%d series, want %d", n, c.series)
			}
		})
	}
}

// countSeries returns how many series of name reg holds, failing the test
// if any is not 0.
func countSeries(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				// Not started: not ready (0), like every counter.
				if v := m.GetCounter().GetValue() + m.GetGauge().GetValue(); v != 0 {
					t.Errorf("%s = %v, want 0", name, v)
				}
			}
			return len(mf.GetMetric())
		}
	}
	return 0
}
