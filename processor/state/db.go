// Package state is the local state of stateful stages: a Pebble database
// per stage instance, holding one key range per store and input partition,
// and the exactly-once rules around it.
//
// The local database is a cache. The truth is each store's changelog
// topic: a compacted topic with one partition per input partition, to
// which every change is written in the Kafka transaction that commits the
// outputs and input offsets of the records that caused it (KIP-98, with
// KIP-447 offsets). The database is emptied when it is opened, and a
// partition's key range is rebuilt from its changelog partition, read
// read_committed to its end, whenever the partition is assigned (see
// ReadChangelog). Changes of an open transaction are buffered in a Txn,
// which reads through them, and reach the database only when the Kafka
// transaction commits: an aborted transaction leaves the store as the
// changelog has it.
package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// DB is the local database of one stage instance.
type DB struct {
	db  *pebble.DB
	dir string
	// mu guards closed: Pebble panics on a closed database, and Kafka
	// callbacks (a revocation) may run while Run closes it.
	mu     sync.RWMutex
	closed bool
}

// use runs fn unless d is closed (ErrClosed).
func (d *DB) use(fn func() error) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	return fn()
}

// Open empties dir (the local state of an earlier run is not trusted: it
// is rebuilt from the changelogs) and opens a Pebble database in it. Pebble
// writes no WAL and does not sync: a crash loses nothing the changelog
// does not have.
func Open(dir string, log *slog.Logger) (*DB, error) {
	if dir == "" {
		return nil, errors.New("open state: empty directory")
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("open state: empty %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	db, err := pebble.Open(filepath.Clean(dir), &pebble.Options{DisableWAL: true, Logger: pebbleLog{log}})
	if err != nil {
		return nil, fmt.Errorf("open state in %s: %w", dir, err)
	}
	return &DB{db: db, dir: dir}, nil
}

// Close closes the database and removes its directory.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.db.Close()
	if rerr := os.RemoveAll(d.dir); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("close state: %w", err)
	}
	return nil
}

// Store is one named key-value store of a DB, with a key range per input
// partition. Keys and values are bytes; a nil value is stored as empty.
type Store struct {
	db   *DB
	name []byte
}

// Store returns the store called name. Names must not be prefixes of each
// other's with a NUL: they are followed by one in every key.
func (d *DB) Store(name string) *Store { return &Store{db: d, name: []byte(name)} }

// key returns the database key of k in partition p: name, NUL, p as 4
// big-endian bytes, k.
func (s *Store) key(p int32, k []byte) []byte {
	out := make([]byte, 0, len(s.name)+5+len(k))
	out = append(append(out, s.name...), 0)
	out = binary.BigEndian.AppendUint32(out, uint32(p))
	return append(out, k...)
}

// bounds returns the key range of partition p. Partitions are
// non-negative int32s, so p+1 fits in the 4 bytes.
func (s *Store) bounds(p int32) (lo, hi []byte) {
	lo = s.key(p, nil)
	hi = binary.BigEndian.AppendUint32(append(bytes.Clone(s.name), 0), uint32(p)+1)
	return lo, hi
}

// Get returns a copy of the value of k in partition p.
func (s *Store) Get(p int32, k []byte) (v []byte, ok bool, err error) {
	err = s.db.use(func() error {
		val, closer, err := s.db.db.Get(s.key(p, k))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, ok = bytes.Clone(val), true
		if v == nil {
			v = []byte{}
		}
		return closer.Close()
	})
	if err != nil {
		return nil, false, fmt.Errorf("state %s: get: %w", s.name, err)
	}
	return v, ok, nil
}

// Scan calls fn for each key of partition p in [from, to) in order (a nil
// to: to the end), until fn returns false or an error. The slices are valid
// during the call only.
func (s *Store) Scan(p int32, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	return s.db.use(func() error { return s.scan(p, from, to, fn) })
}

func (s *Store) scan(p int32, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	_, hi := s.bounds(p)
	opts := &pebble.IterOptions{LowerBound: s.key(p, from), UpperBound: hi}
	if to != nil {
		opts.UpperBound = s.key(p, to)
	}
	it, err := s.db.db.NewIter(opts)
	if err != nil {
		return fmt.Errorf("state %s: scan: %w", s.name, err)
	}
	skip := len(s.name) + 5
	for ok := it.First(); ok; ok = it.Next() {
		more, err := fn(it.Key()[skip:], it.Value())
		if err != nil || !more {
			_ = it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state %s: scan: %w", s.name, err)
	}
	return nil
}

// Clear deletes every key of partition p.
func (s *Store) Clear(p int32) error {
	lo, hi := s.bounds(p)
	if err := s.db.use(func() error { return s.db.db.DeleteRange(lo, hi, pebble.NoSync) }); err != nil {
		return fmt.Errorf("state %s: clear partition %d: %w", s.name, p, err)
	}
	return nil
}

// Batch is writes to the stores of a DB, applied at once by Commit.
type Batch struct {
	db *DB
	b  *pebble.Batch
}

// NewBatch returns an empty Batch.
func (d *DB) NewBatch() *Batch { return &Batch{db: d, b: d.db.NewBatch()} }

// Set sets k to v in partition p of s.
func (b *Batch) Set(s *Store, p int32, k, v []byte) { _ = b.b.Set(s.key(p, k), v, nil) }

// Delete deletes k from partition p of s.
func (b *Batch) Delete(s *Store, p int32, k []byte) { _ = b.b.Delete(s.key(p, k), nil) }

// Len returns the number of writes in b.
func (b *Batch) Len() int { return int(b.b.Count()) }

// Commit applies b and releases it.
func (b *Batch) Commit() error {
	defer b.b.Close()
	if err := b.db.use(func() error { return b.b.Commit(pebble.NoSync) }); err != nil {
		return fmt.Errorf("state: commit batch: %w", err)
	}
	return nil
}

// pebbleLog sends Pebble's log lines to slog.
type pebbleLog struct{ l *slog.Logger }

func (p pebbleLog) Infof(format string, args ...any) {
	if p.l != nil {
		p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLog) Errorf(format string, args ...any) {
	if p.l != nil {
		p.l.Error("pebble: " + fmt.Sprintf(format, args...))
	}
}

func (p pebbleLog) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}
