package stage

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Rewinds. After a transaction is aborted, every input partition it polled
// must be read again from its first unprocessed record, never past it:
//
//   - exactly-once: the aborted outputs are invisible to read_committed
//     readers, so every polled record is unprocessed. GroupTransactSession
//     rewinds each partition it consumes to its committed offset, or, for
//     a partition the group has no commit for (a fresh group, a partition
//     added while running), to where this client started it (franz-go
//     v1.22.3 getAllCommitted). A partition revoked meanwhile is not
//     rewound (it is not consumed), and one re-assigned starts from the
//     offset the group has now.
//   - at-least-once: the outputs were written without a transaction and
//     those acknowledged stay written. rewind moves each partition with a
//     failed record back to its first failed record (never behind the
//     committed offset, never a partition this instance no longer
//     consumes: kgo.Client.SetOffsets skips those), commits what lies
//     before, and remembers which records after it were delivered, so that
//     they are not written twice when polled again.
//
// The at-least-once rewind cannot be SetOffsets(CommittedOffsets()): that
// has nothing for a partition the group never committed, so its records
// would be skipped and the next commit would move past them.

// acked counts acknowledged records by topic and, for dead letters, reason.
type acked struct{ topic, reason string }

// deliveredRange is the tail of a partition polled in an aborted
// at-least-once transaction: records up to upTo, but for those in failed,
// were written and are skipped when polled again.
type deliveredRange struct {
	upTo   int64
	failed map[int64]bool
}

// wasDelivered reports whether src was written before an at-least-once
// abort, and forgets ranges once polling has passed them.
func (t *txn) wasDelivered(src source) bool {
	tp := partition{src.topic, src.partition}
	d, ok := t.delivered[tp]
	if !ok {
		return false
	}
	if src.offset >= d.upTo {
		delete(t.delivered, tp)
	}
	return src.offset <= d.upTo && !d.failed[src.offset]
}

// rewind repositions an at-least-once session after an aborted
// transaction (see the rules above) and commits the offsets of what was
// delivered. The session's client must not be polled concurrently.
func (t *txn) rewind(ctx context.Context, cl *kgo.Client, commit func(context.Context) error) error {
	s := t.stage
	t.mu.Lock()
	failed, ack := t.failed, t.acked
	t.failed, t.acked = nil, map[acked]int64{}
	t.mu.Unlock()
	for a, n := range ack {
		if a.topic == s.cfg.DeadLetter {
			s.deadLettered.Add(n)
			s.metrics.deadLetteredRecords(a.reason, n)
		} else {
			s.produced.Add(n)
			s.metrics.producedRecords(a.topic, n)
		}
	}

	targets := map[partition]int64{}
	bad := map[partition]map[int64]bool{}
	for _, f := range failed {
		tp := partition{f.topic, f.partition}
		if o, ok := targets[tp]; !ok || f.offset < o {
			targets[tp] = f.offset
		}
		if bad[tp] == nil {
			bad[tp] = map[int64]bool{}
		}
		bad[tp][f.offset] = true
	}
	if len(failed) == 0 {
		// No record is named: every polled partition starts again.
		for tp, o := range t.first {
			targets[tp] = o
		}
	}
	committed := cl.CommittedOffsets()
	set := map[string]map[int32]kgo.EpochOffset{}
	for tp, o := range targets {
		if c, ok := committed[tp.topic][tp.p]; ok && c.Offset > o {
			o = c.Offset // never behind a commit: those records are done
		}
		if set[tp.topic] == nil {
			set[tp.topic] = map[int32]kgo.EpochOffset{}
		}
		set[tp.topic][tp.p] = kgo.EpochOffset{Epoch: -1, Offset: o}
		if last, ok := t.lastOff[tp]; ok && last >= o && bad[tp] != nil {
			t.delivered[tp] = mergeDelivered(t.delivered[tp], last, bad[tp])
		}
		s.log.Debug("rewinding partition", "topic", tp.topic, "partition", tp.p, "offset", o)
	}
	cl.SetOffsets(set)
	if err := commit(ctx); err != nil {
		return fmt.Errorf("commit offsets after an abort: %w", err)
	}
	return nil
}

// mergeDelivered returns the delivered range of a partition after an
// abort that polled up to last, in which the records of bad failed and
// every other record was written, given the range of an earlier abort
// (nil if none): its failed records after last are still to be written.
func mergeDelivered(old *deliveredRange, last int64, bad map[int64]bool) *deliveredRange {
	d := &deliveredRange{upTo: last, failed: bad}
	if old == nil {
		return d
	}
	d.upTo = max(old.upTo, last)
	for o := range old.failed {
		if o > last {
			d.failed[o] = true
		}
	}
	return d
}
