package promutil

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Since is a gauge of seconds since a time that each owner's function
// returns when scraped. Unlike Age it has one series per owner from the
// owner's start, whatever the owner holds, so an alert can read it for an
// instance that never got a partition.
type Since struct {
	desc *prometheus.Desc
	now  func() time.Time
	mu   sync.Mutex
	at   map[string]func() time.Time // by owner
}

// Since returns a gauge of seconds since a time, labelled by owner.
func (f *Factory) Since(name, help string) *Since {
	s := &Since{
		desc: prometheus.NewDesc(prometheus.BuildFQName("exactly", f.Subsystem, name), help, []string{f.Owner}, nil),
		now:  time.Now,
		at:   map[string]func() time.Time{},
	}
	f.all = append(f.all, s)
	return s
}

// Set makes owner's series report the seconds since at(); a second Set
// for the same owner replaces the first.
func (s *Since) Set(owner string, at func() time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at[owner] = at
}

// Describe implements prometheus.Collector.
func (s *Since) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *Since) Collect(ch chan<- prometheus.Metric) {
	now := s.now()
	s.mu.Lock()
	owners := make([]string, 0, len(s.at))
	for o := range s.at {
		owners = append(owners, o)
	}
	sort.Strings(owners)
	fns := make([]func() time.Time, len(owners))
	for i, o := range owners {
		fns[i] = s.at[o]
	}
	s.mu.Unlock()
	for i, o := range owners {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, max(now.Sub(fns[i]()).Seconds(), 0), o)
	}
}
