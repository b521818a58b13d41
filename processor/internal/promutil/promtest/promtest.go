// Package promtest holds what the stage's and the sink's metric tests share.
// Tests import it; nothing else does.
package promtest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/exactly-io/exactly/processor/internal/promutil"
)

// Series is a metric name and how many series of it a registry should hold.
type Series struct {
	Name  string
	Count int
}

// StartAtZero checks, in one subtest per name, that reg holds want's count
// of series of each name, every one of them at 0 (a counter not yet
// increased, a gauge such as ready not yet set).
func StartAtZero(t *testing.T, reg *prometheus.Registry, want []Series) {
	t.Helper()
	for _, c := range want {
		t.Run(c.Name, func(t *testing.T) {
			if n := countSeries(t, reg, c.Name); n != c.Count {
				t.Errorf("%d series, want %d", n, c.Count)
			}
		})
	}
}

// countSeries returns how many series of name reg holds, failing the test
// if any is not 0.
func countSeries(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	ms := Family(t, reg, name)
	for _, m := range ms {
		// Not started: not ready (0), like every counter.
		if v := m.GetCounter().GetValue() + m.GetGauge().GetValue(); v != 0 {
			t.Errorf("%s = %v, want 0", name, v)
		}
	}
	return len(ms)
}

// StartedAt checks that reg holds one series of the gauge name, a Unix
// time in [from, to].
func StartedAt(t *testing.T, reg *prometheus.Registry, name string, from, to time.Time) {
	t.Helper()
	ms := Family(t, reg, name)
	if len(ms) != 1 {
		t.Fatalf("%s: %d series, want 1", name, len(ms))
	}
	v := ms[0].GetGauge().GetValue()
	if lo, hi := float64(from.UnixNano())/1e9, float64(to.UnixNano())/1e9; v < lo || v > hi {
		t.Errorf("%s = %v, want a time in [%v, %v]", name, v, lo, hi)
	}
}

// Family gathers reg and returns the series of the metric name, none if
// reg has no such metric; a Gather error fails the test.
func Family(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

// Registered returns a fresh registry with the metrics newMetrics registers
// on it (processor.NewMetrics, pgsink.NewMetrics), failing the test on an
// error.
func Registered[M any](t testing.TB, newMetrics func(prometheus.Registerer) (M, error)) (*prometheus.Registry, M) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return reg, m
}

// Recorder is a prometheus.Registerer that keeps what is registered on it,
// so that a test can reach every collector a NewMetrics makes.
type Recorder struct{ Collectors []prometheus.Collector }

// Register keeps c.
func (r *Recorder) Register(c prometheus.Collector) error {
	r.Collectors = append(r.Collectors, c)
	return nil
}

// MustRegister keeps cs.
func (r *Recorder) MustRegister(cs ...prometheus.Collector) {
	r.Collectors = append(r.Collectors, cs...)
}

// Unregister keeps what it has.
func (r *Recorder) Unregister(prometheus.Collector) bool { return false }

// Touch creates one series of c, so that Gather shows its family: in a
// vector, by trying label counts until the vector accepts one (a vector
// does not say how many labels it takes); in a readiness gauge, for the
// owner ""; in a since gauge, for the owner ""; in an age gauge, for empty labels. A collector of another
// kind fails the test.
func Touch(t testing.TB, c prometheus.Collector) {
	t.Helper()
	if r, ok := c.(*promutil.Ready); ok {
		r.Set("", func() error { return nil })
		return
	}
	if s, ok := c.(*promutil.Since); ok {
		s.Set("", time.Now)
		return
	}
	if a, ok := c.(*promutil.Age); ok {
		a.Set(time.Now(), make([]string, a.Labels())...)
		return
	}
	for n := range 8 {
		lvs := make([]string, n)
		var err error
		switch v := c.(type) {
		case *prometheus.CounterVec:
			_, err = v.GetMetricWithLabelValues(lvs...)
		case *prometheus.GaugeVec:
			_, err = v.GetMetricWithLabelValues(lvs...)
		case *prometheus.HistogramVec:
			_, err = v.GetMetricWithLabelValues(lvs...)
		case *prometheus.SummaryVec:
			_, err = v.GetMetricWithLabelValues(lvs...)
		default:
			t.Fatalf("cannot make a series of %T", c)
		}
		if err == nil {
			return
		}
	}
	t.Fatalf("cannot make a series of %T", c)
}
