package state

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The partition bookkeeping that every stateful step shares: which input
// partitions are restored, their stream time (the largest event time seen,
// as Kafka Streams defines it) and entry count, and how one Kafka
// transaction's view of them is applied on commit.

// part is one restored input partition of a store.
type part struct {
	streamTime int64 // committed, ms; noTime before any record
	entries    int64 // committed entries (approximate where a step purges lazily)
}

// partSet is the restored partitions of a step's stores.
type partSet struct {
	stores []*Store // the step's stores, cleared when a partition is dropped
	mu     sync.Mutex
	m      map[int32]*part
}

func newPartSet(stores ...*Store) *partSet { return &partSet{stores: stores, m: map[int32]*part{}} }

func (s *partSet) get(p int32) *part {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[p]
}

func (s *partSet) put(p int32, pt *part) {
	s.mu.Lock()
	s.m[p] = pt
	s.mu.Unlock()
}

// Drop forgets partitions ps (revoked or lost): their keys are deleted and
// lookups in them fail with ErrNotRestored until they are restored again.
func (s *partSet) Drop(ps ...int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, p := range ps {
		delete(s.m, p)
		for _, st := range s.stores {
			errs = append(errs, st.Clear(p))
		}
	}
	return errors.Join(errs...)
}

// DropAll drops every restored partition (a new Kafka session).
func (s *partSet) DropAll() error {
	s.mu.Lock()
	ps := make([]int32, 0, len(s.m))
	for p := range s.m {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	return s.Drop(ps...)
}

// Size returns the number of entries stored per restored partition.
func (s *partSet) Size() map[int32]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]int64, len(s.m))
	for p, pt := range s.m {
		out[p] = pt.entries
	}
	return out
}

// StreamTime returns the committed stream time of partition p, and whether
// p is restored and has seen a record.
func (s *partSet) StreamTime(p int32) (time.Time, bool) {
	pt := s.get(p)
	if pt == nil {
		return time.Time{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pt.streamTime == noTime {
		return time.Time{}, false
	}
	return time.UnixMilli(pt.streamTime), true
}

// txnPart is one partition as an open transaction sees it.
type txnPart struct {
	part       *part // the restored partition it read
	streamTime int64
	advanced   bool
	added      int64
}

// txnParts is the partitions an open transaction touched, and its buffer.
type txnParts struct {
	set *partSet
	txn *Txn
	m   map[int32]*txnPart
}

func newTxnParts(set *partSet, txn *Txn) txnParts {
	return txnParts{set: set, txn: txn, m: map[int32]*txnPart{}}
}

// get returns partition p as the transaction sees it (ErrNotRestored if
// it is not restored).
func (t *txnParts) get(p int32) (*txnPart, error) {
	if tp, ok := t.m[p]; ok {
		return tp, nil
	}
	pt := t.set.get(p)
	if pt == nil {
		return nil, fmt.Errorf("partition %d: %w", p, ErrNotRestored)
	}
	t.set.mu.Lock()
	tp := &txnPart{part: pt, streamTime: pt.streamTime}
	t.set.mu.Unlock()
	t.m[p] = tp
	return tp, nil
}

// advance moves tp's stream time to ms if it is later.
func (tp *txnPart) advance(ms int64) {
	if ms > tp.streamTime {
		tp.streamTime, tp.advanced = ms, true
	}
}

// sorted returns the partitions touched, in order.
func (t *txnParts) sorted() []int32 {
	ps := make([]int32, 0, len(t.m))
	for p := range t.m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// emitStreamTime writes the stream time of each partition whose stream
// time advanced to its changelog, under the empty key (never a store
// key), in Unix milliseconds as decimal text.
func (t *txnParts) emitStreamTime(emit Emit) {
	for _, p := range t.sorted() {
		if tp := t.m[p]; tp.advanced {
			emit(p, []byte{}, strconv.AppendInt(nil, tp.streamTime, 10))
		}
	}
}

// commit applies the transaction's changes to the partitions still
// restored as they were when it read them: a partition revoked (and maybe
// restored again) meanwhile has its state from the changelog instead.
func (t *txnParts) commit() error {
	t.set.mu.Lock()
	defer t.set.mu.Unlock()
	keep := func(p int32) bool { tp := t.m[p]; return tp != nil && t.set.m[p] == tp.part }
	if err := t.txn.Commit(keep); err != nil {
		return err
	}
	for p, tp := range t.m {
		if keep(p) {
			tp.part.streamTime = tp.streamTime
			tp.part.entries = max(tp.part.entries+tp.added, 0)
		}
	}
	clear(t.m)
	return nil
}

// discard forgets the transaction's changes: it was aborted.
func (t *txnParts) discard() {
	t.txn.Discard()
	clear(t.m)
}

// Restorer rebuilds one partition of a stateful step's stores from its
// changelog: Apply each changelog record in offset order, then Done.
type Restorer interface {
	// Apply applies one changelog record (a nil value is a tombstone).
	Apply(key, value []byte) error
	// Done commits the restore and makes the partition usable. It
	// returns the number of changelog records applied.
	Done() (int64, error)
}

// restoreBatch is how many changelog records a restore writes per batch.
const restoreBatch = 10_000

// restorer is what every step's restore shares: a batch written every
// restoreBatch records, and the partition's stream time.
type restorer struct {
	set   *partSet
	db    *DB
	p     int32
	b     *Batch
	part  *part
	count int64
}

// newRestorer drops partition p of set and starts its restore.
func newRestorer(db *DB, set *partSet, p int32) (*restorer, error) {
	if err := set.Drop(p); err != nil {
		return nil, err
	}
	return &restorer{set: set, db: db, p: p, b: db.NewBatch(), part: &part{streamTime: noTime}}, nil
}

// streamTime applies a stream-time record (the empty key).
func (r *restorer) streamTime(value []byte) error {
	st, err := parseMillis(value)
	if err != nil {
		return fmt.Errorf("changelog partition %d: stream time: %w", r.p, err)
	}
	r.part.streamTime = max(r.part.streamTime, st)
	return r.flush()
}

// flush counts the record applied and commits the batch once it is large.
func (r *restorer) flush() error {
	r.count++
	if r.b.Len() < restoreBatch {
		return nil
	}
	if err := r.b.Commit(); err != nil {
		return err
	}
	r.b = r.db.NewBatch()
	return nil
}

// done commits the last batch and makes the partition usable.
func (r *restorer) done() (int64, error) {
	if err := r.b.Commit(); err != nil {
		return 0, err
	}
	r.part.entries = max(r.part.entries, 0)
	r.set.put(r.p, r.part)
	return r.count, nil
}
