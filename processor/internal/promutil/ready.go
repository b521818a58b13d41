package promutil

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Ready is the gauge exactly_<subsystem>_ready: 1 for each owner whose
// ready function returns nil when scraped, else 0; the same answer as
// /readyz, as a series that alert rules can use.
type Ready struct {
	desc  *prometheus.Desc
	mu    sync.Mutex
	ready map[string]func() error // by owner
}

// Ready returns the subsystem's readiness gauge.
func (f *Factory) Ready(help string) *Ready {
	r := &Ready{
		desc:  prometheus.NewDesc(prometheus.BuildFQName("exactly", f.Subsystem, "ready"), help, []string{f.Owner}, nil),
		ready: map[string]func() error{},
	}
	f.all = append(f.all, r)
	return r
}

// Set makes owner's series report ready(); a second Set for the same owner
// replaces the first.
func (r *Ready) Set(owner string, ready func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready[owner] = ready
}

// Describe implements prometheus.Collector.
func (r *Ready) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

// Collect implements prometheus.Collector.
func (r *Ready) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	owners := make([]string, 0, len(r.ready))
	for o := range r.ready {
		owners = append(owners, o)
	}
	fns := make([]func() error, len(owners))
	sort.Strings(owners)
	for i, o := range owners {
		fns[i] = r.ready[o]
	}
	r.mu.Unlock()
	for i, o := range owners {
		v := 0.0
		if fns[i]() == nil {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(r.desc, prometheus.GaugeValue, v, o)
	}
}
