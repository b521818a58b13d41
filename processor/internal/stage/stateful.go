package stage

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/state"
	"github.com/exactly-io/exactly/processor/transform"
)

// The stateful step (topology.Stateful, a Go function registered with
// transform.RegisterStateful) in the engine. Its state (state.KV) lives
// and commits as the dedupe step's does (see dedupe.go): the same
// database, changelog rules, restore and drop.
//
// The step runs among the stage's other steps. Each input record gets a
// recordStore over the open transaction's state, bound to the record's
// input partition, which the step hands to the function. The record's
// changes are kept once it has its outputs or was filtered, and dropped
// when it becomes a dead letter; at the transaction's end, every key the
// transaction changed goes to the changelog once, with its last value, in
// the same transaction as the outputs and input offsets.

// statefulOutputs is recordOutputs for a stage with a stateful step. skip
// says that the record has neither outputs nor a dead letter, because its
// state could not be used: the transaction then aborts.
func (t *txn) statefulOutputs(r *kgo.Record, src source) (outs []*kgo.Record, skip bool, err error) {
	st := &recordStore{kv: t.kv, p: r.Partition}
	outs, err = t.stage.recordOutputs(transform.WithStore(t.ctx, st), r)
	switch {
	case errors.Is(st.err, state.ErrNotRestored):
		// Revoked while polled (or its restore failed): the
		// transaction must not commit this record's offset.
		t.kv.Drop()
		t.stateLost = true
		return nil, true, nil
	case st.err != nil:
		t.kv.Drop()
		t.fail(src, fmt.Errorf("stateful state: %w", st.err))
		return nil, true, nil
	case err != nil:
		t.kv.Drop() // a dead letter changes no state; a transient error aborts
		return nil, false, err
	}
	if err := t.kv.Keep(); err != nil {
		t.fail(src, fmt.Errorf("stateful state: %w", err))
		return nil, true, nil
	}
	return outs, false, nil
}

// dryOutputs is recordOutputs leaving no change in the state: for the
// dead letter of a record whose output the broker refused, which says why
// the record had failed first.
func (t *txn) dryOutputs(r *kgo.Record) ([]*kgo.Record, error) {
	if t.agg != nil {
		return nil, t.aggregateVerdict(r)
	}
	if t.kv == nil {
		return t.stage.recordOutputs(t.ctx, r)
	}
	defer t.kv.Drop()
	return t.stage.recordOutputs(transform.WithStore(t.ctx, &recordStore{kv: t.kv, p: r.Partition}), r)
}

// recordStore is the transform.Store of one input record: partition p of
// the open transaction's state. err keeps its first failure, which is the
// state's, never the record's (transform's guard serializes calls).
type recordStore struct {
	kv  *state.KVTxn
	p   int32
	err error
}

func (s *recordStore) Get(key []byte) ([]byte, bool, error) {
	v, ok, err := s.kv.Get(s.p, key)
	return v, ok, s.failed(err)
}

func (s *recordStore) Put(key, value []byte) error { return s.failed(s.kv.Put(s.p, key, value)) }

func (s *recordStore) Delete(key []byte) error { return s.failed(s.kv.Delete(s.p, key)) }

func (s *recordStore) failed(err error) error {
	if err != nil && s.err == nil {
		s.err = err
	}
	return err
}
