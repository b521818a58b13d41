// Package state is the local state of stateful stages: a Pebble database
// per stage instance, holding one key range per store and input partition,
// and the exactly-once rules around it.
//
// The truth is each store's changelog topic: a compacted topic with one
// partition per input partition, to which every change is written in the
// Kafka transaction that commits the outputs and input offsets of the
// records that caused it (KIP-98, with KIP-447 offsets). The local
// database mirrors a prefix of each changelog partition, and says which
// in a checkpoint written in the same Pebble batch as the changes (see
// Checkpoint): when a partition is assigned, its store is brought to the
// changelog's end by reading, read_committed, only what follows the
// checkpoint, or rebuilt from the changelog's start when the checkpoint
// is missing or no longer matches the topic (see Checkpoint.Check and
// ReadChangelog). Changes of an open transaction are buffered in a Txn,
// which reads through them, and reach the database, with the checkpoint,
// only when the Kafka transaction commits: an aborted transaction never
// reaches it.
package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// DB is the local database of one stage instance.
type DB struct {
	db   *pebble.DB
	dir  string
	lock *os.File
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

// metaPrefix starts the keys of the database's own records (identity,
// checkpoints). Store names are text and never start with 0xff.
const metaPrefix = "\xff"

var identityKey = []byte(metaPrefix + "identity")

// memTableSize is Pebble's memtable size (its default is 4 MiB): larger
// memtables mean fewer flushes and L0 compactions while a restore writes
// millions of keys, which was most of a restore's CPU; at most two are
// held (MemTableStopWritesThreshold), off the Go heap.
const memTableSize = 32 << 20

// Open opens the Pebble database in dir, kept from an earlier run if
// there is one, for the stage instance called identity (its stage,
// instance ID and changelog topic, say). A database made for another
// identity, or that Pebble cannot open, is emptied first: its state is
// rebuilt from the changelogs.
//
// dir is locked (an OS file lock on dir + ".lock") until Close: two processes must
// never share a state directory, and the second gets ErrLocked.
//
// Pebble writes no WAL and does not sync: every write is a batch that
// carries its own checkpoint, so whatever prefix of them a crash keeps is
// consistent, and what it loses is read again from the changelog.
func Open(dir, identity string, log *slog.Logger) (*DB, error) {
	if dir == "" {
		return nil, errors.New("open state: empty directory")
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	d, err := open(dir, identity, log)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	d.lock = lock
	return d, nil
}

func open(dir, identity string, log *slog.Logger) (*DB, error) {
	opts := func() *pebble.Options {
		return &pebble.Options{DisableWAL: true, Logger: pebbleLog{log}, MemTableSize: memTableSize, L0CompactionThreshold: 8}
	}
	_, serr := os.Stat(dir)
	existed := serr == nil
	db, err := pebble.Open(dir, opts())
	if err == nil {
		var id []byte
		var closer interface{ Close() error }
		id, closer, err = db.Get(identityKey)
		switch {
		case err == nil:
			same := string(id) == identity
			_ = closer.Close()
			if same {
				return &DB{db: db, dir: dir}, nil
			}
			err = fmt.Errorf("made for %q", id)
		case errors.Is(err, pebble.ErrNotFound):
			err = errors.New("no identity")
		}
		_ = db.Close()
	}
	if existed && log != nil {
		log.Info("emptying the local state directory: its state is rebuilt from the changelogs", "dir", dir, "reason", err.Error())
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("open state: empty %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open state: %w", err)
	}
	db, err = pebble.Open(dir, opts())
	if err != nil {
		return nil, fmt.Errorf("open state in %s: %w", dir, err)
	}
	if err := db.Set(identityKey, []byte(identity), pebble.NoSync); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open state in %s: %w", dir, err)
	}
	return &DB{db: db, dir: dir}, nil
}

// lockDir takes an exclusive lock on dir + ".lock" (flock on unix,
// LockFileEx on windows), which holds the PID of its owner.
func lockDir(dir string) (*os.File, error) {
	name := dir + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state: lock: %w", err)
	}
	if err := tryLock(f); err != nil {
		pid, _ := os.ReadFile(name)
		_ = f.Close()
		owner := strings.TrimSpace(string(pid))
		if owner == "" {
			owner = "unknown"
		}
		return nil, fmt.Errorf("%w: %s is held by process %s (give each instance its own --state-dir or --instance-id)", ErrLocked, dir, owner)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Dir returns the database's directory.
func (d *DB) Dir() string { return d.dir }

// Close flushes the database (without a WAL, unflushed writes would be
// lost), closes it and releases its lock. The directory stays, for the
// next run to resume from.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.db.Flush()
	if cerr := d.db.Close(); err == nil {
		err = cerr
	}
	if d.lock != nil {
		_ = d.lock.Close() // releases the lock
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
	return s.scanIn(s.db.db.NewIter, p, from, to, fn)
}

// scanIn is scan over the iterators newIter makes: the database's, or an
// indexed batch's.
func (s *Store) scanIn(newIter func(*pebble.IterOptions) (*pebble.Iterator, error), p int32, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	_, hi := s.bounds(p)
	opts := &pebble.IterOptions{LowerBound: s.key(p, from), UpperBound: hi}
	if to != nil {
		opts.UpperBound = s.key(p, to)
	}
	it, err := newIter(opts)
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

// Last returns copies of the greatest key of partition p in [from, to)
// and its value: one seek, where Scan would walk the range.
func (s *Store) Last(p int32, from, to []byte) (k, v []byte, ok bool, err error) {
	err = s.db.use(func() error {
		it, err := s.db.db.NewIter(&pebble.IterOptions{LowerBound: s.key(p, from), UpperBound: s.key(p, to)})
		if err != nil {
			return err
		}
		if it.Last() {
			k, v, ok = bytes.Clone(it.Key()[len(s.name)+5:]), bytes.Clone(it.Value()), true
		}
		return it.Close()
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("state %s: last: %w", s.name, err)
	}
	return k, v, ok, nil
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
	db      *DB
	b       *pebble.Batch
	indexed bool
}

// NewBatch returns an empty Batch.
func (d *DB) NewBatch() *Batch { return &Batch{db: d, b: d.db.NewBatch()} }

// NewIndexedBatch returns an empty Batch that Scan reads through: its own
// writes over the database's.
func (d *DB) NewIndexedBatch() *Batch { return &Batch{db: d, b: d.db.NewIndexedBatch(), indexed: true} }

// Scan is Store.Scan of s as b would leave it, for an indexed batch (the
// database alone for another).
func (b *Batch) Scan(s *Store, p int32, from, to []byte, fn func(k, v []byte) (bool, error)) error {
	if !b.indexed {
		return s.Scan(p, from, to, fn)
	}
	return b.db.use(func() error { return s.scanIn(b.b.NewIter, p, from, to, fn) })
}

// again returns an empty batch of b's kind.
func (b *Batch) again() *Batch {
	if b.indexed {
		return b.db.NewIndexedBatch()
	}
	return b.db.NewBatch()
}

// Set sets k to v in partition p of s.
func (b *Batch) Set(s *Store, p int32, k, v []byte) { _ = b.b.Set(s.key(p, k), v, nil) }

// Delete deletes k from partition p of s.
func (b *Batch) Delete(s *Store, p int32, k []byte) { _ = b.b.Delete(s.key(p, k), nil) }

// Clear deletes every key of partition p of s.
func (b *Batch) Clear(s *Store, p int32) {
	lo, hi := s.bounds(p)
	_ = b.b.DeleteRange(lo, hi, nil)
}

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
