package stage

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/state"
	"github.com/exactly-io/exactly/processor/transform"
)

// The stateful step (topology.Stateful, a Go function registered with
// transform.RegisterStateful) in the engine: a stateful step (see
// state.go) whose state is a key-value store per input partition
// (state.KV).
//
// The step runs among the stage's other steps. Each input record gets a
// recordStore over the open transaction's state, bound to the record's
// input partition, which the step hands to the function. The record's
// changes are kept once it has its outputs or was filtered, and dropped
// when it becomes a dead letter; at the transaction's end, every key the
// transaction changed goes to the changelog once, with its last value, in
// the same transaction as the outputs and input offsets.

// kvStep is the stage's stateful step.
type kvStep struct {
	stepInfo
	store *state.KV // set by open
}

func (k *kvStep) open(db *state.DB) stateStore {
	k.store = state.NewKV(db)
	return k.store
}

func (k *kvStep) begin(t *txn) stepTxn { return &kvTxn{t: t, kv: k.store.Begin(t.emitChangelog)} }

// kvTxn is the stateful step in one session's transactions.
type kvTxn struct {
	t  *txn
	kv *state.KVTxn
}

// outputs skips a record whose state could not be used: the transaction
// then aborts.
func (x *kvTxn) outputs(r *kgo.Record, src source) (outs []*kgo.Record, skip bool, err error) {
	t := x.t
	if t.unwritableTimestamp(r) {
		return nil, true, nil
	}
	st := &recordStore{kv: x.kv, p: r.Partition}
	outs, err = t.stage.recordOutputs(transform.WithStore(t.ctx, st), r)
	switch {
	case errors.Is(st.err, state.ErrNotRestored):
		// Revoked while polled (or its restore failed): the
		// transaction must not commit this record's offset.
		x.kv.Drop()
		t.stateLost = true
		return nil, true, nil
	case st.err != nil:
		x.kv.Drop()
		t.fail(src, fmt.Errorf("stateful state: %w", st.err))
		return nil, true, nil
	case err != nil:
		x.kv.Drop() // a dead letter changes no state; a transient error aborts
		return nil, false, err
	}
	if err := x.kv.Keep(); err != nil {
		t.fail(src, fmt.Errorf("stateful state: %w", err))
		return nil, true, nil
	}
	return outs, false, nil
}

func (x *kvTxn) verdict(r *kgo.Record) error {
	defer x.kv.Drop()
	_, err := x.t.stage.recordOutputs(transform.WithStore(x.t.ctx, &recordStore{kv: x.kv, p: r.Partition}), r)
	return err
}

// finish puts the last value of every key the transaction changed in it.
func (x *kvTxn) finish() {
	if err := x.kv.Finish(); err != nil {
		x.t.fail(x.t.last, fmt.Errorf("stateful state: %w", err))
	}
}

func (x *kvTxn) Commit(ends map[int32]int64) error { return x.kv.Commit(ends) }
func (x *kvTxn) Discard()                          { x.kv.Discard() }

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
