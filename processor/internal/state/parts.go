package state

import (
	"errors"
	"fmt"
	"slices"
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
	topicID    [16]byte
	offset     int64 // the checkpoint: changelog records below it are applied
	since      int64 // ms, see Checkpoint.Since
	// clocks are the source clocks (see watermark.go), committed with
	// streamTime; shared with open transactions, never written in place.
	clocks map[string]int64
	// heardAt is when each source was last heard from, and restored when
	// the partition became usable (wall ms): liveness, not state.
	heardAt  map[string]int64
	restored int64
	// minEnd, once endsKnown, is at most the end of every stored session
	// (session windows): stream time that closes none of them spares a
	// scan of them all.
	minEnd    int64
	endsKnown bool
}

// checkpoint returns pt's checkpoint.
func (pt *part) checkpoint() Checkpoint {
	return Checkpoint{TopicID: pt.topicID, Offset: pt.offset, Since: pt.since, StreamTime: pt.streamTime, Entries: pt.entries, Clocks: pt.clocks}
}

// partSet is the restored partitions of a step's stores.
type partSet struct {
	stores []*Store // the step's stores; checkpoints are keyed by the first
	mu     sync.Mutex
	m      map[int32]*part
	// wm and expected (its upstream sources) are set before the first
	// transaction (SetWatermark).
	wm       Watermark
	expected []string
}

func newPartSet(stores ...*Store) *partSet {
	return &partSet{stores: stores, m: map[int32]*part{}, wm: Watermark{Now: time.Now}}
}

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

// TopicID returns the ID of the changelog topic partition p was restored
// from, false if p is not restored.
func (s *partSet) TopicID(p int32) ([16]byte, bool) {
	pt := s.get(p)
	if pt == nil {
		return [16]byte{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return pt.topicID, true
}

// Drop forgets partitions ps (revoked or lost): lookups in them fail with
// ErrNotRestored until they are restored again. Their keys and checkpoints
// stay, consistent with each other, for that restore to resume from.
func (s *partSet) Drop(ps ...int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range ps {
		delete(s.m, p)
	}
	return nil
}

// Checkpoint returns the stored checkpoint of partition p, if any.
func (s *partSet) Checkpoint(p int32) (Checkpoint, bool, error) { return s.stores[0].checkpoint(p) }

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
	// clocks are the source clocks; ownClocks once copied from part's,
	// clocksChanged once one moved.
	clocks                   map[string]int64
	ownClocks, clocksChanged bool
	wm                       watermarkCache
	added                    int64
	since                    int64 // ms, when the transaction first touched it
	minEnd                   int64 // see part.minEnd
	endsKnown                bool
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
	tp := &txnPart{part: pt, streamTime: pt.streamTime, clocks: pt.clocks, since: time.Now().UnixMilli(), minEnd: pt.minEnd, endsKnown: pt.endsKnown}
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
// time or source clocks moved to its changelog, under the empty key
// (never a store key): see encodeStreamTime.
func (t *txnParts) emitStreamTime(emit Emit) {
	for _, p := range t.sorted() {
		if tp := t.m[p]; tp.advanced || tp.clocksChanged {
			emit(p, []byte{}, encodeStreamTime(tp.streamTime, tp.clocks))
		}
	}
}

// commit applies the transaction's changes, once Kafka committed it, to
// the partitions still restored as they were when it read them: a
// partition revoked (and maybe restored again) meanwhile has its state
// from the changelog instead. ends are the changelog's end offsets after
// the transaction's last changelog record, per partition it wrote to; the
// checkpoint of each partition applied moves there, in the same batch.
// A partition missing from ends keeps its checkpoint: a restore then reads
// the transaction's records again, which changes nothing (every changelog
// record sets or deletes a key, or raises the stream time).
func (t *txnParts) commit(ends map[int32]int64) error {
	t.set.mu.Lock()
	defer t.set.mu.Unlock()
	keep := func(p int32) bool { tp := t.m[p]; return tp != nil && t.set.m[p] == tp.part }
	next := make(map[int32]*part, len(t.m))
	for p, tp := range t.m {
		if !keep(p) {
			continue
		}
		np := *tp.part
		np.streamTime, np.clocks = tp.streamTime, tp.clocks
		np.minEnd, np.endsKnown = tp.minEnd, tp.endsKnown
		np.entries = max(np.entries+tp.added, 0)
		if e, ok := ends[p]; ok && e > np.offset {
			// Every record after e was written after the transaction
			// touched p.
			np.offset, np.since = e, tp.since
		}
		next[p] = &np
	}
	err := t.txn.Commit(keep, func(b *Batch) {
		for p, np := range next {
			b.setCheckpoint(t.set.stores[0], p, np.checkpoint())
		}
	})
	if err != nil {
		return err
	}
	for p, np := range next {
		*t.m[p].part = *np
	}
	clear(t.m)
	return nil
}

// discard forgets the transaction's changes: it was aborted.
func (t *txnParts) discard() {
	t.txn.Discard()
	clear(t.m)
}

// Restorer brings one partition of a stateful step's stores to the end of
// its changelog: read the changelog from From, Apply each committed record
// in offset order, then Done.
type Restorer interface {
	// From is the first changelog offset to read: the checkpoint's, or
	// the changelog's start when the store is rebuilt.
	From() int64
	// Rebuild says why the store is rebuilt from the start ("" when the
	// restore resumes from the checkpoint).
	Rebuild() string
	// Lost reports whether the rebuild loses state the checkpoint
	// recorded (ErrStateLost): the changelog no longer holds it.
	Lost() bool
	// Apply applies the changelog record at offset (a nil value is a
	// tombstone).
	Apply(offset int64, key, value []byte) error
	// Done commits the restore, read up to end (exclusive), and makes the
	// partition usable. It returns the number of changelog records
	// applied.
	Done(end int64) (int64, error)
}

// restoreBatch is how many changelog records a restore writes per batch.
const restoreBatch = 10_000

// restorer is what every step's restore shares: a batch written every
// restoreBatch records with the checkpoint of where it stopped, and the
// partition's stream time.
type restorer struct {
	set     *partSet
	db      *DB
	p       int32
	b       *Batch
	part    *part
	count   int64
	from    int64
	rebuild string
	lost    bool
	start   int64 // ms, before the changelog's offsets were listed
	cl      ChangelogPartition
}

// newRestorer drops partition p of set and starts its restore: from its
// checkpoint if Checkpoint.Check accepts it against cl, else from the
// changelog's start, with p's keys and checkpoint deleted first. now must
// be taken before cl was listed.
func newRestorer(db *DB, set *partSet, p int32, cl ChangelogPartition, now time.Time) (*restorer, error) {
	if err := set.Drop(p); err != nil {
		return nil, err
	}
	r := &restorer{set: set, db: db, p: p, b: db.NewBatch(), start: now.UnixMilli(), cl: cl}
	cp, ok, err := set.Checkpoint(p)
	if err != nil {
		return nil, err
	}
	if ok {
		err = cp.Check(cl, now)
	} else {
		err = noCheckpoint(cl)
	}
	if err == nil {
		r.part = &part{streamTime: cp.StreamTime, entries: cp.Entries, topicID: cp.TopicID, offset: cp.Offset, since: cp.Since, clocks: cp.Clocks}
		r.from = cp.Offset
		return r, nil
	}
	r.rebuild, r.lost = err.Error(), errors.Is(err, ErrStateLost)
	// Records read in this restore are read after now: see Checkpoint.Since.
	r.part = &part{streamTime: noTime, topicID: cl.TopicID, offset: cl.Start, since: r.start}
	r.from = cl.Start
	b := db.NewBatch()
	for _, st := range set.stores {
		b.Clear(st, p)
	}
	// The emptied store holds every record below the log start: there
	// are none. With this checkpoint a rebuild killed before its first
	// batch is judged from where it began, so records deleted from the
	// changelog meanwhile are lost state (Checkpoint.Check), not a
	// silent rebuild from the later log start.
	b.setCheckpoint(set.stores[0], p, r.part.checkpoint())
	if err := b.Commit(); err != nil {
		return nil, err
	}
	return r, nil
}

// From returns the first changelog offset to read.
func (r *restorer) From() int64 { return r.from }

// Rebuild says why the store is rebuilt ("" if it resumes).
func (r *restorer) Rebuild() string { return r.rebuild }

// Lost reports whether the rebuild loses the checkpoint's state.
func (r *restorer) Lost() bool { return r.lost }

// streamTime applies a stream-time record (the empty key).
func (r *restorer) streamTime(offset int64, value []byte) error {
	st, clocks, err := decodeStreamTime(value)
	if err != nil {
		return fmt.Errorf("changelog partition %d: stream time: %w", r.p, err)
	}
	r.part.streamTime = max(r.part.streamTime, st)
	r.part.clocks = mergeClocks(r.part.clocks, clocks)
	return r.flush(offset)
}

// flush counts the record at offset applied and commits the batch, with
// a checkpoint just after that record, once it is large: a restore cut
// short resumes there.
func (r *restorer) flush(offset int64) error {
	r.count++
	r.part.offset = offset + 1
	if r.b.Len() < restoreBatch {
		return nil
	}
	r.b.setCheckpoint(r.set.stores[0], r.p, r.part.checkpoint())
	if err := r.b.Commit(); err != nil {
		return err
	}
	r.b = r.b.again()
	return nil
}

// done commits the last batch with the checkpoint end, and makes the
// partition usable. Every record from end on was written after the
// restore listed end, so Since becomes the restore's start.
func (r *restorer) done(end int64) (int64, error) {
	r.part.entries = max(r.part.entries, 0)
	r.part.offset = max(r.part.offset, end)
	r.part.since = r.start
	r.part.restored = r.set.wm.Now().UnixMilli()
	r.b.setCheckpoint(r.set.stores[0], r.p, r.part.checkpoint())
	if err := r.b.Commit(); err != nil {
		return 0, err
	}
	r.set.put(r.p, r.part)
	return r.count, nil
}

// touched is the keys of a store that an open transaction changed, by
// partition: at its end, each goes to the changelog with the value the
// transaction leaves it (see emitTouched).
type touched map[int32]map[string]bool

func (t touched) add(p int32, k []byte) {
	m := t[p]
	if m == nil {
		m = map[string]bool{}
		t[p] = m
	}
	m[string(k)] = true
}

// emitTouched writes each touched key of s to its partition's changelog,
// partitions and keys in order: its value in txn, or a tombstone once
// deleted. Written once per key and transaction, however often it
// changed.
func (t touched) emit(txn *Txn, s *Store, emit Emit) error {
	ps := make([]int32, 0, len(t))
	for p := range t {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		keys := make([]string, 0, len(t[p]))
		for k := range t[p] {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, ok, err := txn.Get(s, p, []byte(k))
			if err != nil {
				return err
			}
			if !ok {
				v = nil
			}
			emit(p, []byte(k), v)
		}
	}
	return nil
}

// restoreStore starts the restore of partition p of a step whose
// changelog records set and delete keys of store (see storeRestorer), as
// Dedupe.Restore does.
func restoreStore(db *DB, set *partSet, store *Store, check func(key []byte) error, p int32, cl ChangelogPartition, now time.Time) (Restorer, error) {
	r, err := newRestorer(db, set, p, cl, now)
	if err != nil {
		return nil, err
	}
	return &storeRestorer{restorer: r, store: store, check: check}, nil
}

// storeRestorer restores a step whose changelog records each set (a
// value) or delete (a tombstone) one key of one store, the empty key
// holding the stream time. Entries are counted once the restore is done.
type storeRestorer struct {
	*restorer
	store *Store
	// check, if not nil, vets a key before it is applied.
	check func(key []byte) error
}

// Apply applies one changelog record.
func (r *storeRestorer) Apply(offset int64, key, value []byte) error {
	if len(key) == 0 {
		return r.streamTime(offset, value)
	}
	if r.check != nil {
		if err := r.check(key); err != nil {
			return fmt.Errorf("%s changelog partition %d: %w", r.store.name, r.p, err)
		}
	}
	if value == nil {
		r.b.Delete(r.store, r.p, key)
	} else {
		r.b.Set(r.store, r.p, key, value)
	}
	return r.flush(offset)
}

// Done commits the restore, counts the partition's keys if the restore
// applied any record (else the checkpoint's count stands) and makes it
// usable.
func (r *storeRestorer) Done(end int64) (int64, error) {
	if r.count > 0 {
		if err := r.b.Commit(); err != nil {
			return 0, err
		}
		r.b = r.b.again()
		r.part.entries = 0
		err := r.store.Scan(r.p, nil, nil, func(_, _ []byte) (bool, error) {
			r.part.entries++
			return true, nil
		})
		if err != nil {
			return 0, err
		}
	}
	return r.done(end)
}

// noCheckpoint is why a partition without a checkpoint is rebuilt. Its
// store must hold every record from offset 0, so a changelog that no
// longer starts there lost records: only DeleteRecords or retention move
// a log start (KIP-107), never compaction, and nothing of this program
// deletes changelog records (a reset to empty state recreates the topic,
// which starts again at 0).
func noCheckpoint(cl ChangelogPartition) error {
	if cl.Start > 0 {
		return fmt.Errorf("%w: %w: no checkpoint, and the changelog starts at offset %d, not 0 (records were deleted)", ErrCheckpoint, ErrStateLost, cl.Start)
	}
	return fmt.Errorf("%w: no checkpoint", ErrCheckpoint)
}
