package state

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"
)

// noTime is the stream time of a partition that has seen no record.
const noTime = math.MinInt64

// Dedupe is the state of a dedupe step: per input partition, the IDs seen
// with the event time of their first sighting, and the partition's stream
// time (a watermark over its upstream sources, see watermark.go: without
// lineage, the largest record timestamp seen, as Kafka Streams defines it).
//
// A record is a duplicate when its ID is stored and its own timestamp is
// within retention of the first sighting's, before or after it (bounds
// included). The decision reads event times only, so it does not depend on
// how the runs of upstream partitions interleave (live or from a backlog).
// The stream time decides only when an ID is forgotten: once it passes
// kept + retention, where kept is the later of the sighting's event time
// and the stream time then (a late record's ID is kept for the retention
// after it was seen). Only a copy further behind the stream time than
// that can find its ID forgotten.
//
// The changelog of partition p holds, as record key and value:
//   - an ID and its sighting, in Unix milliseconds as decimal text: the
//     event time, then ",kept" when kept is later; a tombstone (null
//     value) once it expired. A value of one number (also as written
//     before sightings had event times) is both;
//   - the empty key and the partition's stream time, written once per
//     transaction that advanced it. IDs are never empty.
//
// Lookups judge expiry themselves, so purging expired IDs (Finish) is
// garbage collection only and never changes an outcome. Stream time is
// part of the state: a restored partition judges exactly as its previous
// owner would have.
//
// Dedupe is safe for concurrent use by one processing goroutine (through
// a DedupeTxn) and the goroutines that restore and drop partitions.
type Dedupe struct {
	db        *DB
	ids       *Store // ID -> sighting (see encodeSighting)
	index     *Store // kept (8 bytes, order-preserving) ++ ID -> empty; local only
	retention int64  // ms

	// partSet: the restored partitions; entries are the IDs stored
	// (approximate after lazy expiry).
	*partSet
}

// NewDedupe returns the dedupe state of a step with this retention, in the
// stores "dedupe" and "dedupe.index" of db.
func NewDedupe(db *DB, retention time.Duration) *Dedupe {
	ids, index := db.Store("dedupe"), db.Store("dedupe.idx")
	return &Dedupe{db: db, ids: ids, index: index, retention: retention.Milliseconds(), partSet: newPartSet(ids, index)}
}

// Emit writes one record to partition p of the changelog, in the open
// Kafka transaction: key and value, or a tombstone for a nil value.
type Emit func(p int32, key, value []byte)

// DedupeTxn is the changes of one Kafka transaction to a Dedupe.
type DedupeTxn struct {
	d    *Dedupe
	txn  *Txn
	emit Emit
	txnParts
	// pending is the ID of the last Check that found no duplicate.
	pending *pendingID
}

// Begin returns a DedupeTxn whose changelog records go to emit.
func (d *Dedupe) Begin(emit Emit) *DedupeTxn {
	txn := d.db.Begin()
	return &DedupeTxn{d: d, txn: txn, emit: emit, txnParts: newTxnParts(d.partSet, txn)}
}

// Check advances partition p's stream time to ts and reports whether id
// was first seen within the retention of ts, in event time. A record that is no duplicate is
// processed, and then Remember records its ID, unless it became a dead
// letter: a dead letter sent back to the input (exactly redrive) must not
// be dropped as its own duplicate.
func (t *DedupeTxn) Check(p int32, id []byte, ts time.Time) (dup bool, err error) {
	return t.CheckFrom(p, "", id, ts)
}

// CheckFrom is Check for a record of upstream source src (see Source).
func (t *DedupeTxn) CheckFrom(p int32, src string, id []byte, ts time.Time) (dup bool, err error) {
	t.pending = nil
	tp, err := t.get(p)
	if err != nil {
		return false, err
	}
	ms, now := ts.UnixMilli(), t.set.wm.Now().UnixMilli()
	t.observe(tp, src, ms, now, t.peek(tp, src, ms, now))
	v, ok, err := t.txn.Get(t.d.ids, p, id)
	if err != nil {
		return false, err
	}
	if ok {
		seen, kept, err := decodeSighting(v)
		if err != nil {
			return false, fmt.Errorf("dedupe partition %d: stored value of id %q: %w", p, id, err)
		}
		if !t.d.expired(kept, tp.streamTime) && t.d.within(ms, seen) {
			return true, nil
		}
	}
	t.pending = &pendingID{p: p, id: id, part: tp, existed: ok, ts: ts.UnixMilli()}
	return false, nil
}

// pendingID is the ID of the last Check that found no duplicate.
type pendingID struct {
	p       int32
	id      []byte
	part    *txnPart
	existed bool
	ts      int64 // the record's timestamp, ms
}

// Remember records the ID of the last Check that found no duplicate as
// seen at the record's timestamp, kept from the later of it and the
// stream time, and writes it to the changelog. Retention counts from this
// first sighting: a duplicate changes nothing but the stream time.
func (t *DedupeTxn) Remember() {
	pd := t.pending
	if pd == nil {
		return
	}
	t.pending = nil
	kept := max(pd.part.streamTime, pd.ts)
	val := encodeSighting(pd.ts, kept)
	t.txn.Set(t.d.ids, pd.p, pd.id, val)
	t.txn.Set(t.d.index, pd.p, indexKey(kept, pd.id), nil)
	t.emit(pd.p, pd.id, val)
	if !pd.existed {
		pd.part.added++
	}
}

// expired reports whether an ID kept from kept is forgotten at stream time
// now.
func (d *Dedupe) expired(kept, now int64) bool {
	return kept < now-d.retention && now-d.retention < now // no overflow near noTime
}

// within reports whether event times ts and seen are at most the
// retention apart.
func (d *Dedupe) within(ts, seen int64) bool {
	if ts < seen {
		ts, seen = seen, ts
	}
	diff := ts - seen
	return diff >= 0 && diff <= d.retention // diff < 0: overflowed, far apart
}

// encodeSighting is the changelog value of an ID first seen at event time
// seen and kept from kept: "seen", or "seen,kept" when kept is later.
func encodeSighting(seen, kept int64) []byte {
	b := strconv.AppendInt(nil, seen, 10)
	if kept != seen {
		b = append(b, ',')
		b = strconv.AppendInt(b, kept, 10)
	}
	return b
}

// decodeSighting reads encodeSighting's value.
func decodeSighting(v []byte) (seen, kept int64, err error) {
	head, tail, two := bytes.Cut(v, []byte{','})
	if seen, err = parseMillis(head); err != nil || !two {
		return seen, seen, err
	}
	kept, err = parseMillis(tail)
	return seen, kept, err
}

// Finish ends the transaction's changes before its commit: for each
// partition it touched, it writes the stream time to the changelog if it
// advanced, and purges up to limit expired IDs (deleted, and tombstoned in
// the changelog). It returns the number purged.
func (t *DedupeTxn) Finish(limit int) (int, error) {
	purged := 0
	t.emitStreamTime(t.emit)
	for p, tp := range t.m {
		if tp.streamTime == noTime || purged >= limit {
			continue
		}
		cutoff := tp.streamTime - t.d.retention // kept < cutoff: expired
		type stale struct {
			kept int64
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
			t.txn.Delete(t.d.index, p, indexKey(s.kept, s.id))
			v, ok, err := t.txn.Get(t.d.ids, p, s.id)
			if err != nil {
				return purged, err
			}
			if _, cur, perr := decodeSighting(v); !ok || perr != nil || cur != s.kept {
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

// Commit applies the transaction's changes, once Kafka committed it, to
// the partitions still restored as they were when it read them, and moves
// their checkpoints to ends, the changelog's end offsets after the
// transaction's records (see txnParts.commit).
func (t *DedupeTxn) Commit(ends map[int32]int64) error {
	t.pending = nil
	return t.commit(ends)
}

// Discard forgets the transaction's changes: it was aborted.
func (t *DedupeTxn) Discard() {
	t.discard()
	t.pending = nil
}

// dedupeRestorer rebuilds one partition of a Dedupe from its changelog.
type dedupeRestorer struct {
	*restorer
	d *Dedupe
}

// Restore starts the restore of partition p, whose changelog partition is
// cl (listed after now): p is dropped, then brought to the changelog's end
// by Apply, from its checkpoint or rebuilt (see Restorer), and usable once
// Done returns.
func (d *Dedupe) Restore(p int32, cl ChangelogPartition, now time.Time) (Restorer, error) {
	r, err := newRestorer(d.db, d.partSet, p, cl, now)
	if err != nil {
		return nil, err
	}
	return &dedupeRestorer{restorer: r, d: d}, nil
}

// Apply applies one changelog record. Stale index entries that overwritten
// or tombstoned IDs leave are purged later (see Finish).
func (r *dedupeRestorer) Apply(offset int64, key, value []byte) error {
	switch {
	case len(key) == 0:
		return r.streamTime(offset, value)
	case value == nil:
		r.b.Delete(r.d.ids, r.p, key)
		r.part.entries--
	default:
		_, kept, err := decodeSighting(value)
		if err != nil {
			return fmt.Errorf("dedupe changelog partition %d: id %q: %w", r.p, key, err)
		}
		r.b.Set(r.d.ids, r.p, key, value)
		r.b.Set(r.d.index, r.p, indexKey(kept, key), nil)
		r.part.entries++
	}
	return r.flush(offset)
}

// Done commits the restore, read up to end, and makes the partition
// usable. It returns the number of changelog records applied.
func (r *dedupeRestorer) Done(end int64) (int64, error) { return r.done(end) }

// indexKey orders by kept (sign bit flipped, big-endian), then ID.
func indexKey(kept int64, id []byte) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(id)), uint64(kept)^(1<<63))
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
