package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// noTime is the stream time of a partition that has seen no record.
const noTime = math.MinInt64

// Dedupe is the state of a dedupe step: per input partition, the IDs seen
// and when, in stream time, and the partition's stream time (the largest
// record timestamp seen, as Kafka Streams defines it).
//
// The changelog of partition p holds, as record key and value:
//   - an ID and the stream time, in Unix milliseconds as decimal text,
//     when it was first seen; a tombstone (null value) once it expired;
//   - the empty key and the partition's stream time, written once per
//     transaction that advanced it. IDs are never empty.
//
// An ID is a duplicate while streamTime - seen <= retention. Lookups judge
// expiry themselves, so purging expired IDs (Finish) is garbage collection
// only and never changes an outcome. Stream time is part of the state: a
// restored partition judges exactly as its previous owner would have.
//
// Dedupe is safe for concurrent use by one processing goroutine (through
// a DedupeTxn) and the goroutines that restore and drop partitions.
type Dedupe struct {
	db        *DB
	ids       *Store // ID -> seen (decimal ms)
	index     *Store // seen (8 bytes, order-preserving) ++ ID -> empty; local only
	retention int64  // ms

	mu    sync.Mutex
	parts map[int32]*dedupePart // restored partitions
}

type dedupePart struct {
	streamTime int64 // committed, ms
	ids        int64 // committed IDs (approximate after lazy expiry)
}

// NewDedupe returns the dedupe state of a step with this retention, in the
// stores "dedupe" and "dedupe.index" of db.
func NewDedupe(db *DB, retention time.Duration) *Dedupe {
	return &Dedupe{db: db, ids: db.Store("dedupe"), index: db.Store("dedupe.idx"), retention: retention.Milliseconds(), parts: map[int32]*dedupePart{}}
}

// Emit writes one record to partition p of the changelog, in the open
// Kafka transaction: key and value, or a tombstone for a nil value.
type Emit func(p int32, key, value []byte)

// DedupeTxn is the changes of one Kafka transaction to a Dedupe.
type DedupeTxn struct {
	d     *Dedupe
	txn   *Txn
	emit  Emit
	parts map[int32]*txnPart // partitions touched
	// pending is the ID of the last Check that found no duplicate.
	pending *pendingID
}

type txnPart struct {
	part       *dedupePart // the restored partition it read
	streamTime int64
	advanced   bool
	added      int64
}

// Begin returns a DedupeTxn whose changelog records go to emit.
func (d *Dedupe) Begin(emit Emit) *DedupeTxn {
	return &DedupeTxn{d: d, txn: d.db.Begin(), emit: emit, parts: map[int32]*txnPart{}}
}

func (t *DedupeTxn) part(p int32) (*txnPart, error) {
	if tp, ok := t.parts[p]; ok {
		return tp, nil
	}
	t.d.mu.Lock()
	dp := t.d.parts[p]
	t.d.mu.Unlock()
	if dp == nil {
		return nil, fmt.Errorf("partition %d: %w", p, ErrNotRestored)
	}
	tp := &txnPart{part: dp, streamTime: dp.streamTime}
	t.parts[p] = tp
	return tp, nil
}

// Check advances partition p's stream time to ts and reports whether id
// was seen within the retention. A record that is no duplicate is
// processed, and then Remember records its ID, unless it became a dead
// letter: a dead letter sent back to the input (exactly redrive) must not
// be dropped as its own duplicate.
func (t *DedupeTxn) Check(p int32, id []byte, ts time.Time) (dup bool, err error) {
	t.pending = nil
	tp, err := t.part(p)
	if err != nil {
		return false, err
	}
	if ms := ts.UnixMilli(); ms > tp.streamTime {
		tp.streamTime, tp.advanced = ms, true
	}
	v, ok, err := t.txn.Get(t.d.ids, p, id)
	if err != nil {
		return false, err
	}
	if ok {
		seen, err := parseMillis(v)
		if err != nil {
			return false, fmt.Errorf("dedupe partition %d: stored value of id %q: %w", p, id, err)
		}
		if !t.d.expired(seen, tp.streamTime) {
			return true, nil
		}
	}
	t.pending = &pendingID{p: p, id: id, part: tp, existed: ok}
	return false, nil
}

// pendingID is the ID of the last Check that found no duplicate.
type pendingID struct {
	p       int32
	id      []byte
	part    *txnPart
	existed bool
}

// Remember records the ID of the last Check that found no duplicate as
// seen now, in stream time, and writes it to the changelog. Retention
// counts from this first sighting: a duplicate changes nothing but the
// stream time.
func (t *DedupeTxn) Remember() {
	pd := t.pending
	if pd == nil {
		return
	}
	t.pending = nil
	val := strconv.AppendInt(nil, pd.part.streamTime, 10)
	t.txn.Set(t.d.ids, pd.p, pd.id, val)
	t.txn.Set(t.d.index, pd.p, indexKey(pd.part.streamTime, pd.id), nil)
	t.emit(pd.p, pd.id, val)
	if !pd.existed {
		pd.part.added++
	}
}

// expired reports whether an ID seen at seen is forgotten at stream time
// now.
func (d *Dedupe) expired(seen, now int64) bool {
	return seen < now-d.retention && now-d.retention < now // no overflow near noTime
}

// Finish ends the transaction's changes before its commit: for each
// partition it touched, it writes the stream time to the changelog if it
// advanced, and purges up to limit expired IDs (deleted, and tombstoned in
// the changelog). It returns the number purged.
func (t *DedupeTxn) Finish(limit int) (int, error) {
	purged := 0
	for p, tp := range t.parts {
		if tp.advanced {
			t.emit(p, []byte{}, strconv.AppendInt(nil, tp.streamTime, 10))
		}
		if tp.streamTime == noTime || purged >= limit {
			continue
		}
		cutoff := tp.streamTime - t.d.retention // seen < cutoff: expired
		type stale struct {
			seen int64
			id   []byte
		}
		var found []stale
		err := t.d.index.Scan(p, nil, indexKey(cutoff, nil), func(k, _ []byte) (bool, error) {
			seen, id := parseIndexKey(k)
			found = append(found, stale{seen, append([]byte(nil), id...)})
			return purged+len(found) < limit, nil
		})
		if err != nil {
			return purged, err
		}
		for _, s := range found {
			t.txn.Delete(t.d.index, p, indexKey(s.seen, s.id))
			v, ok, err := t.txn.Get(t.d.ids, p, s.id)
			if err != nil {
				return purged, err
			}
			if cur, perr := parseMillis(v); !ok || perr != nil || cur != s.seen {
				continue // seen again since, or gone: only the index entry was stale
			}
			t.txn.Delete(t.d.ids, p, s.id)
			t.emit(p, s.id, nil)
			tp.added--
			purged++
		}
	}
	return purged, nil
}

// Commit applies the transaction's changes to the partitions still
// restored as they were when it read them: a partition revoked (and maybe
// restored again) meanwhile has its state from the changelog instead.
func (t *DedupeTxn) Commit() error {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	keep := func(p int32) bool { tp := t.parts[p]; return tp != nil && t.d.parts[p] == tp.part }
	if err := t.txn.Commit(keep); err != nil {
		return err
	}
	for p, tp := range t.parts {
		if keep(p) {
			tp.part.streamTime = tp.streamTime
			tp.part.ids += tp.added
		}
	}
	clear(t.parts)
	t.pending = nil
	return nil
}

// Discard forgets the transaction's changes: it was aborted.
func (t *DedupeTxn) Discard() {
	t.txn.Discard()
	clear(t.parts)
	t.pending = nil
}

// Drop forgets partitions ps (revoked or lost): their keys are deleted and
// lookups in them fail with ErrNotRestored until they are restored again.
func (d *Dedupe) Drop(ps ...int32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var errs []error
	for _, p := range ps {
		delete(d.parts, p)
		errs = append(errs, d.ids.Clear(p), d.index.Clear(p))
	}
	return errors.Join(errs...)
}

// DropAll drops every restored partition (a new Kafka session).
func (d *Dedupe) DropAll() error {
	d.mu.Lock()
	ps := make([]int32, 0, len(d.parts))
	for p := range d.parts {
		ps = append(ps, p)
	}
	d.mu.Unlock()
	return d.Drop(ps...)
}

// Size returns the number of IDs stored per restored partition (IDs purged
// lazily may be counted until they are).
func (d *Dedupe) Size() map[int32]int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[int32]int64, len(d.parts))
	for p, dp := range d.parts {
		out[p] = dp.ids
	}
	return out
}

// StreamTime returns the committed stream time of partition p, and whether
// p is restored and has seen a record.
func (d *Dedupe) StreamTime(p int32) (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dp := d.parts[p]
	if dp == nil || dp.streamTime == noTime {
		return time.Time{}, false
	}
	return time.UnixMilli(dp.streamTime), true
}

// Restorer rebuilds one partition of a Dedupe from its changelog.
type Restorer struct {
	d     *Dedupe
	p     int32
	b     *Batch
	part  *dedupePart
	count int64
}

// restoreBatch is how many changelog records a restore writes per batch.
const restoreBatch = 10_000

// Restore starts the restore of partition p: p is dropped, then filled by
// Apply, in changelog order, and usable once Done returns.
func (d *Dedupe) Restore(p int32) (*Restorer, error) {
	if err := d.Drop(p); err != nil {
		return nil, err
	}
	return &Restorer{d: d, p: p, b: d.db.NewBatch(), part: &dedupePart{streamTime: noTime}}, nil
}

// Apply applies one changelog record. Stale index entries that overwritten
// or tombstoned IDs leave are purged later (see Finish).
func (r *Restorer) Apply(key, value []byte) error {
	r.count++
	switch {
	case len(key) == 0:
		st, err := parseMillis(value)
		if err != nil {
			return fmt.Errorf("dedupe changelog partition %d: stream time: %w", r.p, err)
		}
		r.part.streamTime = max(r.part.streamTime, st)
	case value == nil:
		r.b.Delete(r.d.ids, r.p, key)
		r.part.ids--
	default:
		seen, err := parseMillis(value)
		if err != nil {
			return fmt.Errorf("dedupe changelog partition %d: id %q: %w", r.p, key, err)
		}
		r.b.Set(r.d.ids, r.p, key, value)
		r.b.Set(r.d.index, r.p, indexKey(seen, key), nil)
		r.part.ids++
	}
	if r.b.Len() >= restoreBatch {
		if err := r.b.Commit(); err != nil {
			return err
		}
		r.b = r.d.db.NewBatch()
	}
	return nil
}

// Done commits the restore and makes the partition usable. It returns the
// number of changelog records applied.
func (r *Restorer) Done() (int64, error) {
	if err := r.b.Commit(); err != nil {
		return 0, err
	}
	r.part.ids = max(r.part.ids, 0)
	r.d.mu.Lock()
	r.d.parts[r.p] = r.part
	r.d.mu.Unlock()
	return r.count, nil
}

// indexKey orders by seen (sign bit flipped, big-endian), then ID.
func indexKey(seen int64, id []byte) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(id)), uint64(seen)^(1<<63))
	return append(k, id...)
}

func parseIndexKey(k []byte) (int64, []byte) {
	return int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63)), k[8:]
}

func parseMillis(v []byte) (int64, error) {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want Unix milliseconds as decimal text, got %q", v)
	}
	return n, nil
}
