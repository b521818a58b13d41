package pgsink

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/partpos"
)

// How often, and for how long at most, the sink reads its input's end
// offsets apart from polling.
const (
	lagInterval = 5 * time.Second
	lagTimeout  = 4 * time.Second
)

// watchLag refreshes the lag of the owned partitions every lagInterval
// until ctx ends. A fetch that returns records refreshes it too, but an
// idle sink fetches none, and a sink whose batch waits on Postgres polls
// nothing: without this the lag would stand still while input arrives,
// and its age would grow while the brokers answer.
func (s *Sink) watchLag(ctx context.Context) {
	tick := time.NewTicker(lagInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			refreshCtx, cancel := context.WithTimeout(ctx, lagTimeout)
			s.refreshLag(refreshCtx)
			cancel()
		}
	}
}

// lagHold keeps the lag series of partitions the sink stopped owning
// without a rebalance taking them: a membership lost because the
// coordinator stopped answering, or a client closed for a new one (a
// fence, a recreated topic). The instance may hold them still, and their
// input keeps coming, so their series stay, counted from their last
// position, until the next assignment takes them back or leaves them out.
// Guarded by Sink.mu.
type lagHold struct {
	closing bool // the client closes for a new one: its revocations hold
	held    map[int32]heldLag
}

// heldLag is what a held partition's lag is counted from.
type heldLag struct {
	pos position
	e   ends
}

// gone drops or holds the series of partition p, which s no longer owns.
func (h *lagHold) gone(s *Sink, p int32, hold bool) {
	if !hold && !h.closing {
		delete(h.held, p)
		s.metrics.drop(s.cfg.Input, p)
		return
	}
	pos, owned := s.pos[p]
	e, known := s.ends[p]
	if !owned || !known {
		return
	}
	if h.held == nil {
		h.held = map[int32]heldLag{}
	}
	h.held[p] = heldLag{pos: pos, e: e}
}

// assigned notes that p is owned again.
func (h *lagHold) assigned(p int32) { delete(h.held, p) }

// dropHeld drops the series of the held partitions an assignment left
// out (assigned took back the others).
func (h *lagHold) dropHeld(s *Sink) {
	h.closing = false
	for p := range h.held {
		s.metrics.drop(s.cfg.Input, p)
	}
	clear(h.held)
}

// refresh republishes the lag of the held partitions against ts.
func (h *lagHold) refresh(s *Sink, ts topicState) {
	for p, hl := range h.held {
		if lso, ok := ts.lastStb[p]; ok {
			hl.e = ends{logStart: ts.start[p], lastStable: lso, at: time.Now()}
			h.held[p] = hl
			s.metrics.SetLag(s.cfg.Input, p, partpos.Lag(hl.e.lastStable, hl.e.logStart, hl.pos.next, hl.pos.stored), hl.e.at)
		}
	}
}

// holdLag makes the revocations of the client about to close hold their
// partitions' lag series.
func (s *Sink) holdLag() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lag.closing = true
}

// assignedNone drops the held lag series when an assignment gives the
// sink no partition (more instances than partitions): adjust, which
// drops them otherwise, runs only for partitions assigned.
func (s *Sink) assignedNone(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	if len(assigned[s.cfg.Input]) > 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lag.dropHeld(s)
}
