// Package promutil builds the Prometheus collectors of one subsystem,
// named exactly_<subsystem>_<name>, each labelled first by the owner
// (stage or sink), so that the stage engine and the sink name and register
// their metrics the same way.
package promutil

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Factory makes collectors of one subsystem and remembers them for
// Register.
type Factory struct {
	Subsystem string // e.g. "stage"
	Owner     string // the first label of every series, e.g. "stage"
	all       []prometheus.Collector
}

func (f *Factory) labels(extra []string) []string { return append([]string{f.Owner}, extra...) }

// name is the metric name as registered: exactly_<subsystem>_<name>.
func (f *Factory) name(name string) string {
	return prometheus.BuildFQName("exactly", f.Subsystem, name)
}

// Counter returns a counter vector labelled by owner and labels.
func (f *Factory) Counter(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "exactly", Subsystem: f.Subsystem, Name: name, Help: help}, f.labels(labels))
	f.all = append(f.all, c)
	return c
}

// Gauge returns a gauge vector labelled by owner and labels.
func (f *Factory) Gauge(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "exactly", Subsystem: f.Subsystem, Name: name, Help: help}, f.labels(labels))
	f.all = append(f.all, g)
	return g
}

// Histogram returns a histogram vector labelled by owner and labels.
func (f *Factory) Histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "exactly", Subsystem: f.Subsystem, Name: name, Help: help, Buckets: buckets}, f.labels(labels))
	f.all = append(f.all, h)
	return h
}

// Register registers every collector made so far on reg.
func (f *Factory) Register(reg prometheus.Registerer) error {
	for _, c := range f.all {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Partition is a partition number as a label value.
func Partition(p int32) string { return strconv.Itoa(int(p)) }
