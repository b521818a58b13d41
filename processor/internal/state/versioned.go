package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Versioned is the state of a join step: per input partition, the table
// partition of the same number, versioned. Each key keeps its values with
// the timestamps of the table records that set them, a tombstone deleting
// the key from its timestamp on, so that a lookup reads the value as of a
// time (Kafka Streams' versioned key-value stores, KIP-889; Flink's
// temporal joins).
//
// The table's own topic is its changelog: the store mirrors a prefix of
// each table partition, read read_committed, and the checkpoint says
// which; the join writes nothing to the topic. Restore reads up to the
// partition's end (Replay); Refresh, while the stage runs, reads what was
// committed since. Applying a table record again (a restore resuming from
// an older checkpoint) changes nothing: a version is keyed by the record's
// key and timestamp, and the later offset of two records with both equal
// wins either way.
//
// Versions older than the newest one at or before the partition's
// newest timestamp minus the history retention are purged as their key is
// updated: a lookup as of a time that far back gives the right value if
// the version then current is still held, else no value.
type Versioned struct {
	db        *DB
	store     *Store
	retention int64 // ms
	*partSet
}

// NewVersioned returns the state of a join step, in store "join" of db,
// keeping history for retention behind each partition's newest timestamp.
func NewVersioned(db *DB, retention time.Duration) *Versioned {
	s := db.Store("join")
	return &Versioned{db: db, store: s, retention: retention.Milliseconds(), partSet: newPartSet(s)}
}

// Version tags: the first byte of a stored version.
const (
	versionValue     = 0
	versionTombstone = 1
)

// versionKey is key's length as a uvarint, key, then ts as 8 big-endian
// bytes with the sign bit flipped, so that versions of a key sort by time.
func versionKey(key []byte, ts int64) []byte {
	b := binary.AppendUvarint(make([]byte, 0, len(key)+binary.MaxVarintLen64+8), uint64(len(key)))
	b = append(b, key...)
	return binary.BigEndian.AppendUint64(b, uint64(ts)^(1<<63))
}

// versionTime returns the timestamp of a version key.
func versionTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ (1 << 63)) }

// Lookup returns the value key had in partition p at ts (Unix ms): the
// value of its latest version at or before ts, unless that is a
// tombstone. ErrNotRestored if p is not restored.
func (v *Versioned) Lookup(p int32, key []byte, ts int64) (value []byte, ok bool, err error) {
	if v.get(p) == nil {
		return nil, false, fmt.Errorf("partition %d: %w", p, ErrNotRestored)
	}
	to := versionKey(key, math.MaxInt64)
	if ts < math.MaxInt64 {
		to = versionKey(key, ts+1)
	}
	_, last, found, err := v.store.Last(p, versionKey(key, math.MinInt64), to)
	if err != nil || !found || len(last) == 0 || last[0] == versionTombstone {
		return nil, false, err
	}
	return last[1:], true, nil
}

// LookupAll is Lookup over every restored partition, for a global table:
// the latest version at or before ts in any of them (a key is in one
// partition when one partitioner writes the table; if not, the later
// version wins, then the higher partition). ErrNotRestored if none is
// restored.
func (v *Versioned) LookupAll(key []byte, ts int64) (value []byte, ok bool, err error) {
	parts := v.Size()
	if len(parts) == 0 {
		return nil, false, fmt.Errorf("table: %w", ErrNotRestored)
	}
	to := versionKey(key, math.MaxInt64)
	if ts < math.MaxInt64 {
		to = versionKey(key, ts+1)
	}
	var best []byte
	bestTS, bestP := int64(math.MinInt64), int32(-1)
	for p := range parts {
		k, last, found, err := v.store.Last(p, versionKey(key, math.MinInt64), to)
		if err != nil {
			return nil, false, err
		}
		if !found {
			continue
		}
		lastTS := versionTime(k)
		if len(last) > 0 && (best == nil || lastTS > bestTS || lastTS == bestTS && p > bestP) {
			best, bestTS, bestP = last, lastTS, p
		}
	}
	if best == nil || best[0] == versionTombstone {
		return nil, false, nil
	}
	return append([]byte{}, best[1:]...), true, nil
}

// apply puts the table record (key, ts, value; nil is a tombstone) in b,
// and purges the versions of key that the retention no longer needs, as
// the database holds them with b's writes over them: b is an indexed
// batch, so that the versions kept do not depend on where reads and
// restores cut the table into batches. newest is the partition's newest
// timestamp.
func (v *Versioned) apply(b *Batch, p int32, key []byte, ts int64, value []byte, newest int64) error {
	tagged := []byte{versionValue}
	if value == nil {
		tagged[0] = versionTombstone
	}
	b.Set(v.store, p, versionKey(key, ts), append(tagged, value...))
	if newest == noTime || newest-v.retention <= math.MinInt64+1 {
		return nil
	}
	cutoff := newest - v.retention
	// Keep the newest version at or before cutoff: it answers lookups
	// between it and cutoff.
	var older [][]byte
	err := b.Scan(v.store, p, versionKey(key, math.MinInt64), versionKey(key, cutoff+1), func(k, _ []byte) (bool, error) {
		older = append(older, append([]byte(nil), k...))
		return true, nil
	})
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(older); i++ {
		if versionTime(older[i]) != ts {
			b.Delete(v.store, p, older[i])
		}
	}
	return nil
}

// Restore starts the restore of partition p from its table partition
// (see Replay, which gives each record's timestamp).
func (v *Versioned) Restore(p int32, cl ChangelogPartition, now time.Time) (Restorer, error) {
	r, err := newRestorer(v.db, v.partSet, p, cl, now)
	if err != nil {
		return nil, err
	}
	r.b.b.Close() // empty: the restore's batches are indexed (apply)
	r.b = v.db.NewIndexedBatch()
	return &versionedRestorer{restorer: r, v: v}, nil
}

// versionedRestorer restores a Versioned partition.
type versionedRestorer struct {
	*restorer
	v *Versioned
}

// Apply is refused: a versioned table needs each record's timestamp
// (ApplyRecord).
func (r *versionedRestorer) Apply(int64, []byte, []byte) error {
	return errors.New("a versioned table is restored with record timestamps")
}

// ApplyRecord applies one table record. A record without a key cannot be
// looked up and is skipped.
func (r *versionedRestorer) ApplyRecord(rec *kgo.Record) error {
	if len(rec.Key) > 0 {
		ts := rec.Timestamp.UnixMilli()
		r.part.streamTime = max(r.part.streamTime, ts)
		if err := r.v.apply(r.b, r.p, rec.Key, ts, rec.Value, r.part.streamTime); err != nil {
			return err
		}
	}
	return r.flush(rec.Offset)
}

// Done commits the restore and makes the partition usable.
func (r *versionedRestorer) Done(end int64) (int64, error) { return r.done(end) }

// recordApplier is a Restorer that needs the whole record (its
// timestamp), not only its key and value.
type recordApplier interface {
	ApplyRecord(r *kgo.Record) error
}

// Refresh reads, read_committed, what each restored partition of parts
// has gained in the table topic of tr since its checkpoint, up to ends
// (the partitions' high watermarks, listed at listed: the read waits for
// the transactions open below them, as a restore does), and applies it
// with the checkpoint moved to the end. It reads nothing when every
// partition was already read up to its end. A partition dropped meanwhile
// is left to its next restore. It returns the records applied.
func (v *Versioned) Refresh(ctx context.Context, tr *TableReader, ends map[int32]int64, listed time.Time) (int64, error) {
	topic := tr.topic
	ranges := map[int32]Range{}
	parts := map[int32]*part{}
	for p, end := range ends {
		pt := v.get(p)
		if pt == nil {
			continue
		}
		v.mu.Lock()
		from := pt.offset
		v.mu.Unlock()
		if end > from {
			ranges[p], parts[p] = Range{From: from, End: end}, pt
		}
	}
	if len(ranges) == 0 {
		return 0, nil
	}
	b := v.db.NewIndexedBatch()
	next := map[int32]*part{}
	for p, pt := range parts {
		v.mu.Lock()
		np := *pt
		v.mu.Unlock()
		next[p] = &np
	}
	n, err := tr.Read(ctx, ranges, func(r *kgo.Record) error {
		np := next[r.Partition]
		if len(r.Key) == 0 {
			return nil
		}
		ts := r.Timestamp.UnixMilli()
		np.streamTime = max(np.streamTime, ts)
		return v.apply(b, r.Partition, r.Key, ts, r.Value, np.streamTime)
	})
	if err != nil {
		_ = b.b.Close()
		return n, fmt.Errorf("refresh table %s: %w", topic, err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for p, np := range next {
		if v.m[p] != parts[p] {
			delete(next, p) // dropped, or restored again: its restore reads these
			continue
		}
		np.offset, np.since = ranges[p].End, listed.UnixMilli()
		b.setCheckpoint(v.store, p, np.checkpoint())
	}
	if err := b.Commit(); err != nil {
		return n, err
	}
	for p, np := range next {
		*parts[p] = *np
	}
	return n, nil
}
