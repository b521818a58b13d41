package promutil

import (
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scraped is a gauge whose series hold a T each and get their value from
// it when scraped, so that a value that depends on the time or on a
// function's answer is current at every scrape.
type scraped[T any] struct {
	desc   *prometheus.Desc
	now    func() time.Time
	value  func(now time.Time, v T) float64
	mu     sync.Mutex
	series map[string]scrapedSeries[T] // by the labels joined
}

type scrapedSeries[T any] struct {
	labels []string
	v      T
}

func newScraped[T any](name string, help string, labels []string, value func(now time.Time, v T) float64) *scraped[T] {
	return &scraped[T]{
		desc:   prometheus.NewDesc(name, help, labels, nil),
		now:    time.Now,
		value:  value,
		series: map[string]scrapedSeries[T]{},
	}
}

func seriesKey(labels []string) string {
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

// set makes the series of labels hold v; a second set replaces the first.
func (s *scraped[T]) set(v T, labels ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.series[seriesKey(labels)] = scrapedSeries[T]{labels: append([]string(nil), labels...), v: v}
}

func (s *scraped[T]) delete(labels ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.series, seriesKey(labels))
}

// Describe implements prometheus.Collector.
func (s *scraped[T]) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector. The values are computed after
// the lock is released: a series' function may take its own locks.
func (s *scraped[T]) Collect(ch chan<- prometheus.Metric) {
	now := s.now()
	s.mu.Lock()
	keys := make([]string, 0, len(s.series))
	for k := range s.series {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	series := make([]scrapedSeries[T], len(keys))
	for i, k := range keys {
		series[i] = s.series[k]
	}
	s.mu.Unlock()
	for _, e := range series {
		ch <- prometheus.MustNewConstMetric(s.desc, prometheus.GaugeValue, s.value(now, e.v), e.labels...)
	}
}

// secondsSince is the seconds from at to now, 0 for a time after now.
func secondsSince(now, at time.Time) float64 { return max(now.Sub(at).Seconds(), 0) }
