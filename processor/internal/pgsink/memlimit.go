package pgsink

import (
	"sync/atomic"
)

// The soft memory limit of a process that runs one sink and nothing else
// (WithMemoryLimit). What the sink holds live is bounded by its fetches
// (two per broker: the one being read and the next), the records polled
// beside a write (up to fetch_max_bytes), and its batch, the records held
// until the database commits them. A batch's size in bytes is only known
// once the sink has held one, so the limit starts from the fetches and
// rises with the largest batch: the collector never runs without pause
// for a batch of large records. The rest is the runtime's and the
// program's own, and room for the collector.
const (
	memLimitBase    = 24 << 20
	memLimitFetches = 4 // fetch_max_bytes
	// memRecordOverhead is about what a record takes beside its key and
	// value: the *kgo.Record, its slot in the batch, its row's values.
	memRecordOverhead = 256
)

// WithMemoryLimit has the sink set the process's soft memory limit with
// set (runtime/debug.SetMemoryLimit): memoryLimit at start, and again
// each time a batch is larger than any before. For a process that runs
// this sink and nothing else, with no GOMEMLIMIT of the user's.
func WithMemoryLimit(set func(int64)) Option {
	return func(s *Sink) { s.memLimit.set = set }
}

// memLimit tracks the largest batch for WithMemoryLimit.
type memLimit struct {
	set     func(int64)
	largest atomic.Int64 // bytes of the largest batch written
}

// memoryLimit is the limit for a sink whose largest batch held batch
// bytes: 24 MiB, plus 4 × fetch_max_bytes, plus that batch; 40 MiB
// before the first batch at the defaults, 53 MiB once it held 10000
// records of 1 KiB.
func (s *Sink) memoryLimit(batch int64) int64 {
	return memLimitBase + memLimitFetches*int64(s.cfg.FetchMaxBytes) + batch
}

// startMemoryLimit sets the limit before the first batch, if the sink
// sets one.
func (s *Sink) startMemoryLimit() {
	if s.memLimit.set == nil {
		return
	}
	limit := s.memoryLimit(0)
	s.memLimit.set(limit)
	s.log.Info("soft memory limit set, raised with the largest batch; GOMEMLIMIT overrides it", "limit_bytes", limit)
}

// growMemoryLimit raises the limit when b is the largest batch yet.
func (s *Sink) growMemoryLimit(b *batch) {
	if s.memLimit.set == nil {
		return
	}
	n := int64(b.bytes) + memRecordOverhead*int64(b.records)
	for {
		old := s.memLimit.largest.Load()
		if n <= old {
			return
		}
		if s.memLimit.largest.CompareAndSwap(old, n) {
			break
		}
	}
	limit := s.memoryLimit(n)
	s.memLimit.set(limit)
	s.log.Debug("soft memory limit raised", "limit_bytes", limit, "batch_bytes", n)
}
