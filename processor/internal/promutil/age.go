package promutil

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Age is a gauge of seconds since a time, per label set, computed when
// scraped: a value read at that time keeps its series while its age
// grows, so that an alert can tell a value that is current from one that
// could not be read again (a broker cut off), where a stored age would
// only move when something updates it.
type Age struct {
	desc   *prometheus.Desc
	labels int // owner included
	now    func() time.Time
	mu     sync.Mutex
	at     map[string]ageSeries // by the labels joined
}

type ageSeries struct {
	labels []string
	at     time.Time
}

// Age returns an age gauge labelled by owner and labels.
func (f *Factory) Age(name, help string, labels ...string) *Age {
	a := &Age{
		desc:   prometheus.NewDesc(prometheus.BuildFQName("exactly", f.Subsystem, name), help, f.labels(labels), nil),
		labels: len(labels) + 1,
		now:    time.Now,
		at:     map[string]ageSeries{},
	}
	f.all = append(f.all, a)
	return a
}

func ageKey(labels []string) string {
	n := 0
	for _, l := range labels {
		n += len(l) + 1
	}
	b := make([]byte, 0, n)
	for _, l := range labels {
		b = append(append(b, l...), 0)
	}
	return string(b)
}

// Set records that the series of labels was last read at at.
func (a *Age) Set(at time.Time, labels ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at[ageKey(labels)] = ageSeries{labels: append([]string(nil), labels...), at: at}
}

// Labels is how many labels a series has, the owner's included.
func (a *Age) Labels() int { return a.labels }

// Delete removes the series of labels.
func (a *Age) Delete(labels ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.at, ageKey(labels))
}

// Describe implements prometheus.Collector.
func (a *Age) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

// Collect implements prometheus.Collector.
func (a *Age) Collect(ch chan<- prometheus.Metric) {
	now := a.now()
	a.mu.Lock()
	keys := make([]string, 0, len(a.at))
	for k := range a.at {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	series := make([]ageSeries, len(keys))
	for i, k := range keys {
		series[i] = a.at[k]
	}
	a.mu.Unlock()
	for _, s := range series {
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, max(now.Sub(s.at).Seconds(), 0), s.labels...)
	}
}
