package state

import "slices"

// Txn buffers the changes of one Kafka transaction to the stores of a DB.
// Reads through it see its changes; Commit applies them, Discard forgets
// them. A Txn is used by one goroutine.
type Txn struct {
	db      *DB
	parent  *Txn               // see Nest
	changes map[string]*change // by database key: the last change wins
}

type change struct {
	s   *Store
	p   int32
	k   []byte
	v   []byte
	del bool
}

// Begin returns an empty Txn.
func (d *DB) Begin() *Txn { return &Txn{db: d, changes: map[string]*change{}} }

// Nest returns an empty Txn whose reads see its own changes, then t's:
// the changes of one record, say, kept by merging them into t (Merge) or
// dropped (Discard).
func (t *Txn) Nest() *Txn { return &Txn{db: t.db, parent: t, changes: map[string]*change{}} }

// Get returns the value of k in partition p of s as t has it.
func (t *Txn) Get(s *Store, p int32, k []byte) ([]byte, bool, error) {
	if c, ok := t.changes[string(s.key(p, k))]; ok {
		return c.v, !c.del, nil
	}
	if t.parent != nil {
		return t.parent.Get(s, p, k)
	}
	return s.Get(p, k)
}

// Set sets k to v in partition p of s. t keeps k and v.
func (t *Txn) Set(s *Store, p int32, k, v []byte) {
	t.changes[string(s.key(p, k))] = &change{s: s, p: p, k: k, v: v}
}

// Delete deletes k from partition p of s.
func (t *Txn) Delete(s *Store, p int32, k []byte) {
	t.changes[string(s.key(p, k))] = &change{s: s, p: p, k: k, del: true}
}

// Len returns the number of keys t changes.
func (t *Txn) Len() int { return len(t.changes) }

// Commit applies the changes of the partitions for which keep is true (nil:
// all) in one batch, with what extra (if not nil) adds to it, and empties
// t.
func (t *Txn) Commit(keep func(p int32) bool, extra func(b *Batch)) error {
	b := t.db.NewBatch()
	keys := make([]string, 0, len(t.changes))
	for k := range t.changes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c := t.changes[k]
		if keep != nil && !keep(c.p) {
			continue
		}
		if c.del {
			b.Delete(c.s, c.p, c.k)
		} else {
			b.Set(c.s, c.p, c.k, c.v)
		}
	}
	if extra != nil {
		extra(b)
	}
	t.Discard()
	return b.Commit()
}

// Discard forgets t's changes: its Kafka transaction was aborted.
func (t *Txn) Discard() { clear(t.changes) }
