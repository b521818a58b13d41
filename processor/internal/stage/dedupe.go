package stage

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/state"
	"github.com/exactly-io/exactly/processor/transform"
)

// The dedupe step (topology.Dedupe) in the engine: a stateful step (see
// state.go) whose state is the IDs seen per input partition
// (state.Dedupe). The ID of a record is checked against its partition's
// store before the other steps run, and remembered once they produced
// outputs or filtered it (not when it became a dead letter, which exactly
// redrive may send back).

// expirePerTxn bounds the expired IDs purged per transaction, so that a
// jump in stream time does not make one transaction huge; the rest go in
// the next ones (lookups judge expiry themselves meanwhile).
const expirePerTxn = 1000

// dedupeStep is the stage's dedupe step.
type dedupeStep struct {
	stepInfo
	d     *transform.Dedupe
	store *state.Dedupe // set by open
}

func (d *dedupeStep) open(db *state.DB) stateStore {
	d.store = state.NewDedupe(db, d.d.Retention)
	return d.store
}

func (d *dedupeStep) begin(t *txn) stepTxn {
	return &dedupeTxn{t: t, d: d.d, dd: d.store.Begin(t.emitChangelog)}
}

// dedupeTxn is the dedupe step in one session's transactions.
type dedupeTxn struct {
	t  *txn
	d  *transform.Dedupe
	dd *state.DedupeTxn
}

// outputs counts a duplicate as deduplicated; it has neither outputs nor
// a dead letter.
func (x *dedupeTxn) outputs(r *kgo.Record, src source) ([]*kgo.Record, bool, error) {
	t := x.t
	if t.unwritableTimestamp(r) {
		return nil, true, nil
	}
	s := t.stage
	in, err := s.decodeInput(r)
	if err != nil {
		return nil, false, err
	}
	id, err := x.d.ID(t.ctx, &in)
	if err != nil {
		return nil, false, &dlq.RecordError{Reason: deadletter.ReasonTransform, Step: x.d.Step, Err: err}
	}
	dup, err := x.dd.CheckFrom(r.Partition, sourceOf(r), id, r.Timestamp)
	switch {
	case errors.Is(err, state.ErrNotRestored):
		// Revoked while polled (or its restore failed): the
		// transaction must not commit this record's offset.
		t.stateLost = true
		return nil, true, nil
	case err != nil:
		t.fail(src, fmt.Errorf("dedupe state: %w", err))
		return nil, true, nil
	case dup:
		t.deduplicated++
		return nil, true, nil
	}
	outs, err := s.transformOutputs(t.ctx, r, in)
	if err == nil {
		x.dd.Remember()
	}
	return outs, false, err
}

func (x *dedupeTxn) verdict(r *kgo.Record) error {
	_, err := x.t.stage.recordOutputs(x.t.ctx, r)
	return err
}

// finish puts stream time and expired IDs in the transaction too.
func (x *dedupeTxn) finish() {
	if _, err := x.dd.Finish(expirePerTxn); err != nil {
		x.t.fail(x.t.last, fmt.Errorf("dedupe state: %w", err))
	}
}

func (x *dedupeTxn) Commit(ends map[int32]int64) error { return x.dd.Commit(ends) }
func (x *dedupeTxn) Discard()                          { x.dd.Discard() }
