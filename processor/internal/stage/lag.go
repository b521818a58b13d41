package stage

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/internal/partpos"
)

// How often, and for how long at most, the stage reads its input's end
// offsets and its group's committed offsets apart from the consumer.
const (
	lagInterval = 5 * time.Second
	lagTimeout  = 4 * time.Second
)

// lagTracker keeps exactly_stage_consumer_lag_records true while the
// consumer is stuck. Each fetch gives a partition's last stable offset,
// but a stage that cannot fetch or commit (a broker cut off, a
// coordinator that does not answer, an End that hangs) fetches nothing:
// refresh reads the offsets apart from the consumer, as `exactly status`
// does, so the lag rises with the input. When they cannot be read either,
// the lag keeps its last value and its age series grows. A partition keeps
// its series from its assignment until a revocation, or a later
// assignment that leaves it out: a session that ends (a rebuild, a lost
// membership) holds its partitions until the next one is assigned, so the
// series do not vanish while the stage cannot reach its group.
type lagTracker struct {
	metrics stageMetrics
	topic   string

	mu      sync.Mutex
	parts   map[int32]*partLag
	closing bool // the session is closing: its revocations hold
}

// partLag is what the lag of one partition is counted from.
type partLag struct {
	polled     int64 // offset after the last polled record; -1 none since the assignment or an abort
	committed  int64 // the group's committed offset as last read; -1 unknown or none
	lastStable int64 // -1 unknown
	logStart   int64
	endsAt     time.Time // when lastStable and logStart were read
	// blockedAt is the last stable offset that refresh last read below the
	// high watermark, and blockedSince when it first read it there: an open
	// transaction holds it.
	blockedAt    int64
	blockedSince time.Time
	held         bool // its session ended; kept until an assignment leaves it out
}

func newLagTracker(m stageMetrics, topic string) *lagTracker {
	return &lagTracker{metrics: m, topic: topic, parts: map[int32]*partLag{}}
}

// assigned adds the partitions of an assignment. The first assignment of
// a session drops the held partitions it leaves out.
func (l *lagTracker) assigned(parts []int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = false
	for p, pl := range l.parts {
		if pl.held && !slices.Contains(parts, p) {
			l.dropLocked(p)
		}
	}
	for _, p := range parts {
		pl, ok := l.parts[p]
		if !ok {
			pl = &partLag{committed: -1, lastStable: -1}
			l.parts[p] = pl
			l.metrics.inputTransactionOpen(l.topic, p, 0)
		}
		pl.held, pl.polled = false, -1
		l.publishLocked(p, pl)
	}
}

// gone removes partitions taken away by a rebalance; while the session
// closes, or for a lost membership (hold), it keeps them.
func (l *lagTracker) gone(parts []int32, hold bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range parts {
		pl, ok := l.parts[p]
		switch {
		case !ok:
		case hold || l.closing:
			pl.held = true
		default:
			l.dropLocked(p)
		}
	}
}

// closeSession marks every partition held: the session's revocations
// that follow are its close, not a rebalance.
func (l *lagTracker) closeSession() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closing = true
	for _, pl := range l.parts {
		pl.held = true
	}
}

// stop drops every series: the stage holds nothing once Run returns.
func (l *lagTracker) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := range l.parts {
		l.dropLocked(p)
	}
}

func (l *lagTracker) dropLocked(p int32) {
	delete(l.parts, p)
	l.metrics.dropPartition(l.topic, p)
}

// polled records a fetch of partition p: next is the offset after its
// last record, lastStable and logStart the fetch's.
func (l *lagTracker) polled(p int32, next, lastStable, logStart int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pl, ok := l.parts[p]
	if !ok {
		// Assigned before the tracker knew (no callback yet): a fetch
		// only comes from an assigned partition.
		pl = &partLag{committed: -1}
		l.parts[p] = pl
	}
	pl.polled, pl.lastStable, pl.logStart, pl.endsAt = next, lastStable, logStart, time.Now()
	l.publishLocked(p, pl)
}

// aborted forgets the polled positions: the session rewinds to the
// committed offsets, which refresh reads.
func (l *lagTracker) aborted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pl := range l.parts {
		pl.polled = -1
	}
}

// publishLocked sets p's lag from what is known, if its end is.
func (l *lagTracker) publishLocked(p int32, pl *partLag) {
	if pl.lastStable < 0 {
		return
	}
	pos, stored := pl.polled, true
	if pos < 0 {
		pos, stored = pl.committed, pl.committed >= 0
	}
	l.metrics.SetLag(l.topic, p, partpos.Lag(pl.lastStable, pl.logStart, pos, stored), pl.endsAt)
}

// openFor returns how long the last stable offset has stayed at lastStable
// below high, as of at: 0 when it is at the high watermark, or has moved.
func (pl *partLag) openFor(lastStable, high int64, at time.Time) time.Duration {
	switch {
	case lastStable >= high:
		pl.blockedSince = time.Time{}
		return 0
	case pl.blockedSince.IsZero() || pl.blockedAt != lastStable:
		pl.blockedAt, pl.blockedSince = lastStable, at
		return 0
	}
	return at.Sub(pl.blockedSince)
}

// run refreshes the lag every lagInterval until ctx ends.
func (l *lagTracker) run(ctx context.Context, adm *kadm.Client, group string) {
	tick := time.NewTicker(lagInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			l.refresh(ctx, adm, group)
		}
	}
}

// refresh reads the input's last stable and log start offsets and the
// group's committed offsets, each within lagTimeout, and publishes the lag
// of every partition held. What cannot be read keeps its last value.
func (l *lagTracker) refresh(ctx context.Context, adm *kadm.Client, group string) {
	l.mu.Lock()
	n := len(l.parts)
	l.mu.Unlock()
	if n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, lagTimeout)
	defer cancel()
	// read_committed ends: the last stable offsets (KIP-98).
	ends, endErr := adm.ListCommittedOffsets(ctx, l.topic)
	at := time.Now()
	starts, startErr := adm.ListStartOffsets(ctx, l.topic)
	highs, highErr := adm.ListEndOffsets(ctx, l.topic)
	committed, commitErr := adm.FetchOffsetsForTopics(ctx, group, l.topic)
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, pl := range l.parts {
		if commitErr == nil {
			if o, ok := committed.Lookup(l.topic, p); ok && o.Err == nil && o.At >= 0 {
				pl.committed = o.At
			}
		}
		if endErr == nil && startErr == nil {
			e, okE := ends.Lookup(l.topic, p)
			s, okS := starts.Lookup(l.topic, p)
			if okE && okS && e.Err == nil && s.Err == nil {
				pl.lastStable, pl.logStart, pl.endsAt = e.Offset, s.Offset, at
			}
			if h, ok := highs.Lookup(l.topic, p); ok && highErr == nil && okE && e.Err == nil && h.Err == nil {
				l.metrics.inputTransactionOpen(l.topic, p, pl.openFor(e.Offset, h.Offset, at))
			}
		}
		l.publishLocked(p, pl)
	}
}
