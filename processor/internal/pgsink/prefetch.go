package pgsink

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The next batch is polled while PostgreSQL writes the one before it, so
// that the database does not wait while the sink polls Kafka: at most
// fetch_max_bytes of records ahead (about one fetch, which the client
// would hold anyway), for memory; the loop then waits for the write. The
// rules that keep it exact:
//
//   - A batch beside is written only after the one before it committed,
//     with the positions that one stored as its start (landed): its
//     guard then expects exactly them. When the one before did not
//     commit (fenced and re-sought, or the sink stops), the batch beside
//     and whatever was polled with it are dropped: they are read again
//     from the stored positions.
//   - No rebalance runs while either batch holds records: the client
//     blocks rebalances from a poll until AllowRebalance
//     (BlockRebalanceOnPoll), which the loop calls only with no batch open
//     and none written beside. So that a rebalance never waits long, the
//     loop writes a batch without polling beside it (and so drains) at
//     least once per prefetchSpan.
//   - Records stay in order: a partition's records of the batch beside
//     follow those of the one before, and the batches commit in turn.

// prefetchSpan bounds the time between two drains (AllowRebalance) while
// batches are written beside the poll: a rebalance waits at most about
// this long plus a batch's write. Ten commit intervals, at least one
// second, at most a tenth of the session timeout.
func prefetchSpan(cfg Config) time.Duration {
	d := max(10*cfg.CommitInterval, time.Second)
	if cfg.SessionTimeout > 0 {
		d = min(d, cfg.SessionTimeout/10)
	}
	return d
}

// full reports whether b is due to be written: open, and at its record
// cap or past its commit interval.
func (b *batch) full(cfg Config) bool {
	return b.open && (b.records >= cfg.MaxRecords || time.Since(b.started) >= cfg.CommitInterval)
}

// inflight is a batch being written beside the poll of the next.
type inflight struct {
	b    *batch
	done chan struct{}
	err  error // writeBatch's, once done is closed
	// poll is the context of the polls beside the write, cancelled when
	// it ends, so that the loop learns of it without waiting for records.
	poll   context.Context
	cancel context.CancelFunc
}

// finished reports whether w is a write that has ended.
func (w *inflight) finished() bool {
	if w == nil {
		return false
	}
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// writeBeside starts writing b in its own goroutine and returns it.
func (s *Sink) writeBeside(ctx context.Context, b *batch) *inflight {
	w := &inflight{b: b, done: make(chan struct{})}
	w.poll, w.cancel = context.WithCancel(ctx)
	go func() {
		defer close(w.done)
		defer w.cancel()
		w.err = s.writeBatch(ctx, b)
	}()
	return w
}

// nextBeside is the batch polled beside w's: its partitions' records
// follow w's.
func nextBeside(w *inflight) *batch {
	b := newBatch()
	b.beside = true
	b.after = w.b.next
	return b
}

// pollBeside polls into b, beside w's write when there is one: until
// that write ends, at the latest.
func (s *Sink) pollBeside(ctx context.Context, b *batch, w *inflight) kgo.Fetches {
	if w == nil {
		return s.poll(ctx, b)
	}
	return s.poll(w.poll, b)
}

// await waits for w's write, if any, to end.
func (s *Sink) await(w *inflight) {
	if w != nil {
		<-w.done
	}
}

// settle waits for w's write, if any, and returns the batch to go on
// with: b, or an empty one (landed).
func (s *Sink) settle(w *inflight, b *batch) (*batch, error) {
	if w == nil {
		return b, nil
	}
	<-w.done
	b, _, err := s.landed(w, b, nil)
	return b, err
}

// landed handles the end of w's write, b being the batch polled beside
// it and fetches the last poll's: w's error, if it failed; else, when w
// committed, b with the positions w stored as its start; when it did
// not (fenced and re-sought, or ctx ended), an empty batch and no
// fetches, since they were polled from positions no longer current.
func (s *Sink) landed(w *inflight, b *batch, fetches kgo.Fetches) (*batch, kgo.Fetches, error) {
	if w.err != nil {
		return nil, nil, w.err
	}
	s.ready.Closed()
	if !w.b.committed {
		return newBatch(), nil, nil
	}
	b.beside = false
	s.rebase(b)
	if b.open {
		s.ready.Opened(b.started)
	}
	return b, fetches, nil
}

// rebase sets the start of each partition of b, a batch polled beside
// the one before, which has since committed, to the sink's position now;
// a partition no longer owned (a lost membership) loses its records.
func (s *Sink) rebase(b *batch) {
	s.mu.Lock()
	gone := map[int32]bool{}
	for _, p := range b.order {
		pos, owned := s.pos[p]
		if !owned {
			gone[p] = true
			continue
		}
		b.start[p] = pos
	}
	s.mu.Unlock()
	if len(gone) == 0 {
		return
	}
	keep := b.recs[:0]
	for _, r := range b.recs {
		if !gone[r.Partition] {
			keep = append(keep, r)
		}
	}
	b.recs = keep
	order := b.order[:0]
	for _, p := range b.order {
		if gone[p] {
			delete(b.start, p)
			delete(b.next, p)
			delete(b.first, p)
			continue
		}
		order = append(order, p)
	}
	b.order = order
	deleted := b.deleted[:0]
	for _, d := range b.deleted {
		if !gone[d.Partition] {
			deleted = append(deleted, d)
		}
	}
	b.deleted = deleted
	if len(b.order) == 0 {
		*b = *newBatch()
	}
}
