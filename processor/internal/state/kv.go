package state

import (
	"bytes"
	"time"
)

// KV is the state of a stateful Go transform (a stateful step): per input
// partition, a key-value store of bytes that the function reads and
// writes.
//
// The changelog of partition p holds, as record key and value, each key
// the function set and its value, or a tombstone once it deleted it. A key
// goes to the changelog once per transaction that changed it, with the
// value the transaction left it. Keys are never empty.
//
// A record's changes are buffered apart (see KVTxn.Keep) until the record
// is known to be written or filtered: a record that becomes a dead letter
// changes nothing, so that exactly redrive may send it back.
type KV struct {
	db    *DB
	store *Store
	// partSet: the restored partitions; entries are the keys stored.
	*partSet
}

// NewKV returns the state of a stateful step, in store "stateful" of db.
func NewKV(db *DB) *KV {
	s := db.Store("stateful")
	return &KV{db: db, store: s, partSet: newPartSet(s)}
}

// KVTxn is the changes of one Kafka transaction to a KV. It is used by one
// goroutine.
type KVTxn struct {
	k    *KV
	txn  *Txn
	emit Emit
	txnParts
	touched touched
	rec     *Txn // the changes of the record being processed, over txn
}

// Begin returns a KVTxn whose changelog records go to emit.
func (k *KV) Begin(emit Emit) *KVTxn {
	txn := k.db.Begin()
	return &KVTxn{k: k, txn: txn, emit: emit, txnParts: newTxnParts(k.partSet, txn), touched: touched{}, rec: txn.Nest()}
}

// Get returns a copy of the value of key in partition p as the
// transaction sees it, the record's own changes included, or
// ErrNotRestored.
func (t *KVTxn) Get(p int32, key []byte) ([]byte, bool, error) {
	if _, err := t.get(p); err != nil {
		return nil, false, err
	}
	v, ok, err := t.rec.Get(t.k.store, p, key)
	if err != nil || !ok {
		return nil, false, err
	}
	if v = bytes.Clone(v); v == nil {
		v = []byte{}
	}
	return v, true, nil
}

// Put sets key to a copy of value (nil is empty) in partition p, among the
// record's changes; ErrNotRestored if p is not restored.
func (t *KVTxn) Put(p int32, key, value []byte) error {
	if _, err := t.get(p); err != nil {
		return err
	}
	t.rec.Set(t.k.store, p, bytes.Clone(key), append([]byte{}, value...))
	return nil
}

// Delete deletes key from partition p, among the record's changes;
// ErrNotRestored if p is not restored.
func (t *KVTxn) Delete(p int32, key []byte) error {
	if _, err := t.get(p); err != nil {
		return err
	}
	t.rec.Delete(t.k.store, p, bytes.Clone(key))
	return nil
}

// Keep makes the changes of the record being processed changes of the
// transaction: the record is written or filtered.
func (t *KVTxn) Keep() error {
	for _, c := range t.rec.changes {
		tp, err := t.get(c.p)
		if err != nil {
			return err
		}
		_, existed, err := t.txn.Get(c.s, c.p, c.k)
		if err != nil {
			return err
		}
		if c.del {
			t.txn.Delete(c.s, c.p, c.k)
		} else {
			t.txn.Set(c.s, c.p, c.k, c.v)
		}
		switch {
		case existed && c.del:
			tp.added--
		case !existed && !c.del:
			tp.added++
		}
		t.touched.add(c.p, c.k)
	}
	t.rec.Discard()
	return nil
}

// Drop forgets the changes of the record being processed: it became a
// dead letter, or its transaction will abort.
func (t *KVTxn) Drop() { t.rec.Discard() }

// Finish ends the transaction's changes before its commit: each key it
// changed is written to the changelog, with its last value or as a
// tombstone. Changes of a record neither kept nor dropped are dropped.
func (t *KVTxn) Finish() error {
	t.rec.Discard()
	err := t.touched.emit(t.txn, t.k.store, t.emit)
	clear(t.touched)
	return err
}

// Commit applies the transaction's changes and moves the checkpoints to
// ends (see txnParts.commit).
func (t *KVTxn) Commit(ends map[int32]int64) error {
	t.rec.Discard()
	clear(t.touched)
	return t.commit(ends)
}

// Discard forgets the transaction's changes: it was aborted.
func (t *KVTxn) Discard() {
	t.rec.Discard()
	clear(t.touched)
	t.discard()
}

// Restore starts the restore of partition p (see Dedupe.Restore). Done
// counts the partition's keys.
func (k *KV) Restore(p int32, cl ChangelogPartition, now time.Time) (Restorer, error) {
	return restoreStore(k.db, k.partSet, k.store, nil, p, cl, now)
}
