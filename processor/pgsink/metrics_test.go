package pgsink

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// A new sink's rare-event counters exist at 0 before anything happens, so
// that their first increase shows in rate() and increase().
func TestNewSinkSeriesStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	if _, err := New(cfg, WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		series int
	}{
		{"exactly_sink_ready", 1},
		{"exactly_sink_retries_total", len(retryCauses)},
		{"exactly_sink_batches_fenced_total", 1},
		{"exactly_sink_batches_committed_total", 1},
		{"exactly_sink_rows_written_total", 1},
		{"exactly_sink_rows_deleted_total", 1},
		{"exactly_sink_rows_duplicate_total", 1},
		{"exactly_sink_rebalances_total", 1},
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
