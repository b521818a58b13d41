package state

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"
)

// restoredKV returns a KV with partitions ps restored from nothing.
func restoredKV(t *testing.T, db *DB, ps ...int32) *KV {
	t.Helper()
	k := NewKV(db)
	restoreEmpty(t, k.Restore, ps...)
	return k
}

// kvOp is one call on a KVTxn: get, put, del, keep (the record is
// written) or drop (it became a dead letter).
type kvOp struct {
	op    string
	p     int32
	key   string
	value string // put: the value; get: the value wanted ("" with !ok)
	ok    bool   // get: whether the key is wanted present
}

// apply runs ops on tx, failing the test where a get differs.
func apply(t *testing.T, tx *KVTxn, ops []kvOp) {
	t.Helper()
	for i, o := range ops {
		var err error
		switch o.op {
		case "get":
			var v []byte
			var ok bool
			v, ok, err = tx.Get(o.p, []byte(o.key))
			if err == nil && (ok != o.ok || string(v) != o.value) {
				t.Fatalf("op %d: get %d/%s = %q, %v; want %q, %v", i, o.p, o.key, v, ok, o.value, o.ok)
			}
		case "put":
			err = tx.Put(o.p, []byte(o.key), []byte(o.value))
		case "del":
			err = tx.Delete(o.p, []byte(o.key))
		case "keep":
			err = tx.Keep()
		case "drop":
			tx.Drop()
		}
		if err != nil {
			t.Fatalf("op %d %+v: %v", i, o, err)
		}
	}
}

// TestKVReadYourWrites: reads see the record's own changes, then the
// kept changes of earlier records in the transaction, then the committed
// state; a dropped record's changes are gone at once.
func TestKVReadYourWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []kvOp
		want map[string]string // partition 0 after the commit
	}{
		{name: "own write, then the next record's", ops: []kvOp{
			{op: "get", key: "a"},
			{op: "put", key: "a", value: "1"},
			{op: "get", key: "a", value: "1", ok: true},
			{op: "keep"},
			{op: "get", key: "a", value: "1", ok: true},
			{op: "put", key: "a", value: "2"},
			{op: "keep"},
		}, want: map[string]string{"a": "2"}},
		{name: "a dropped record changes nothing", ops: []kvOp{
			{op: "put", key: "a", value: "1"},
			{op: "keep"},
			{op: "put", key: "a", value: "99"},
			{op: "put", key: "b", value: "99"},
			{op: "del", key: "a"},
			{op: "get", key: "a"},
			{op: "drop"},
			{op: "get", key: "a", value: "1", ok: true},
			{op: "get", key: "b"},
		}, want: map[string]string{"a": "1"}},
		{name: "a delete, and an empty value", ops: []kvOp{
			{op: "put", key: "a", value: "1"},
			{op: "put", key: "b", value: "1"},
			{op: "keep"},
			{op: "del", key: "a"},
			{op: "keep"},
			{op: "get", key: "a"},
			{op: "put", key: "b", value: ""},
			{op: "keep"},
			{op: "get", key: "b", value: "", ok: true},
		}, want: map[string]string{"b": ""}},
		{name: "partitions are apart", ops: []kvOp{
			{op: "put", p: 1, key: "a", value: "p1"},
			{op: "keep"},
			{op: "get", key: "a"},
			{op: "get", p: 1, key: "a", value: "p1", ok: true},
		}, want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := restoredKV(t, openDB(t), 0, 1)
			var cl changelog
			tx := k.Begin(cl.emit)
			apply(t, tx, tc.ops)
			if err := tx.Finish(); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(nil); err != nil {
				t.Fatal(err)
			}
			if got := kvContents(t, k, 0); !maps.Equal(got, tc.want) {
				t.Fatalf("committed %v, want %v", got, tc.want)
			}
			if n := k.Size()[0]; n != int64(len(tc.want)) {
				t.Fatalf("entries = %d, want %d", n, len(tc.want))
			}
			// The changelog, applied in order, gives the same state.
			fromLog := map[string]string{}
			for _, r := range cl.recs {
				if r.p != 0 {
					continue
				}
				if r.value == nil {
					delete(fromLog, string(r.key))
				} else {
					fromLog[string(r.key)] = string(r.value)
				}
			}
			if !maps.Equal(fromLog, tc.want) {
				t.Fatalf("changelog gives %v, want %v", fromLog, tc.want)
			}
		})
	}
}

// kvContents returns the committed keys of partition p.
func kvContents(t *testing.T, k *KV, p int32) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := k.store.Scan(p, nil, nil, func(key, v []byte) (bool, error) {
		got[string(key)] = string(v)
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestKVChangelogOncePerTransaction: a key changed by many records of a
// transaction goes to the changelog once, with its last value; a key
// deleted is a tombstone; an empty value is no tombstone.
func TestKVChangelogOncePerTransaction(t *testing.T) {
	k := restoredKV(t, openDB(t), 0)
	var cl changelog
	tx := k.Begin(cl.emit)
	for i := range 100 {
		apply(t, tx, []kvOp{{op: "put", key: "sum", value: fmt.Sprint(i)}, {op: "put", key: "gone", value: "x"}, {op: "keep"}})
	}
	apply(t, tx, []kvOp{{op: "del", key: "gone"}, {op: "put", key: "empty"}, {op: "keep"}, {op: "put", key: "dropped", value: "x"}, {op: "drop"}})
	if len(cl.recs) != 0 {
		t.Fatalf("changelog records before Finish: %v", cl.recs)
	}
	if err := tx.Finish(); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range cl.recs {
		v := "<tombstone>"
		if r.value != nil {
			v = string(r.value)
		}
		if _, dup := got[string(r.key)]; dup {
			t.Fatalf("key %q written twice", r.key)
		}
		got[string(r.key)] = v
	}
	want := map[string]string{"sum": "99", "gone": "<tombstone>", "empty": ""}
	if !maps.Equal(got, want) {
		t.Fatalf("changelog %v, want %v", got, want)
	}
}

// TestKVAbortDiscards: an aborted transaction's changes never reach the
// store, however many records kept them; the next transaction reads the
// committed state.
func TestKVAbortDiscards(t *testing.T) {
	k := restoredKV(t, openDB(t), 0)
	var cl changelog
	tx := k.Begin(cl.emit)
	apply(t, tx, []kvOp{{op: "put", key: "a", value: "1"}, {op: "keep"}})
	if err := tx.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(map[int32]int64{0: 1}); err != nil {
		t.Fatal(err)
	}

	apply(t, tx, []kvOp{{op: "put", key: "a", value: "2"}, {op: "put", key: "b", value: "2"}, {op: "keep"}, {op: "put", key: "c", value: "3"}})
	if err := tx.Finish(); err != nil {
		t.Fatal(err)
	}
	tx.Discard()
	apply(t, tx, []kvOp{{op: "get", key: "a", value: "1", ok: true}, {op: "get", key: "b"}, {op: "get", key: "c"}})
	if got := kvContents(t, k, 0); !maps.Equal(got, map[string]string{"a": "1"}) {
		t.Fatalf("store after the abort: %v, want a=1", got)
	}
	if n := k.Size()[0]; n != 1 {
		t.Fatalf("entries = %d, want 1", n)
	}
	cp, ok, err := k.Checkpoint(0)
	if err != nil || !ok || cp.Offset != 1 {
		t.Fatalf("checkpoint %+v, %v, %v; want offset 1 (the commit's, not the abort's)", cp, ok, err)
	}
}

// TestKVCopies: a value read can be changed by the caller, and a buffer
// put can be reused, without changing the state.
func TestKVCopies(t *testing.T) {
	k := restoredKV(t, openDB(t), 0)
	var cl changelog
	tx := k.Begin(cl.emit)
	key, val := []byte("a"), []byte("1")
	if err := tx.Put(0, key, val); err != nil {
		t.Fatal(err)
	}
	key[0], val[0] = 'b', '2'
	v, ok, err := tx.Get(0, []byte("a"))
	if err != nil || !ok || string(v) != "1" {
		t.Fatalf("Get = %q, %v, %v; want 1", v, ok, err)
	}
	v[0] = '3'
	if v, _, _ := tx.Get(0, []byte("a")); string(v) != "1" {
		t.Fatalf("Get after changing a read value = %q, want 1", v)
	}
}

func TestKVNotRestored(t *testing.T) {
	k := restoredKV(t, openDB(t), 0)
	var cl changelog
	tx := k.Begin(cl.emit)
	if _, _, err := tx.Get(1, []byte("a")); !errors.Is(err, ErrNotRestored) {
		t.Fatalf("Get on an unrestored partition: %v, want ErrNotRestored", err)
	}
	if err := tx.Put(1, []byte("a"), nil); !errors.Is(err, ErrNotRestored) {
		t.Fatalf("Put on an unrestored partition: %v, want ErrNotRestored", err)
	}
	if err := tx.Delete(1, []byte("a")); !errors.Is(err, ErrNotRestored) {
		t.Fatalf("Delete on an unrestored partition: %v, want ErrNotRestored", err)
	}
}

// TestKVRestore: a store rebuilt from the changelog of many transactions
// (a key set, overwritten, deleted and set again) holds what the committed
// transactions left; a restore from its checkpoint that reads nothing
// keeps its count.
func TestKVRestore(t *testing.T) {
	src := restoredKV(t, openDB(t), 0, 1)
	var cl changelog
	tx := src.Begin(cl.emit)
	for i := range 30 {
		p := int32(i % 2)
		apply(t, tx, []kvOp{
			{op: "put", p: p, key: fmt.Sprint("k", i%7), value: fmt.Sprint(i)},
			{op: "keep"},
		})
		if i%5 == 4 {
			apply(t, tx, []kvOp{{op: "del", p: p, key: fmt.Sprint("k", i%7)}, {op: "keep"}})
		}
		if err := tx.Finish(); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	db := openDB(t)
	dst := NewKV(db)
	for _, p := range []int32{0, 1} {
		r, err := dst.Restore(p, ChangelogPartition{DeleteRetention: time.Hour}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if r.Rebuild() == "" {
			t.Fatal("a store without a checkpoint resumed")
		}
		var off int64
		for _, rec := range cl.recs {
			if rec.p == p {
				if err := r.Apply(off, rec.key, rec.value); err != nil {
					t.Fatal(err)
				}
				off++
			}
		}
		if _, err := r.Done(off); err != nil {
			t.Fatal(err)
		}
		want := kvContents(t, src, p)
		if got := kvContents(t, dst, p); !maps.Equal(got, want) {
			t.Fatalf("partition %d restored %v, want %v", p, got, want)
		}
		if n := dst.Size()[p]; n != int64(len(want)) {
			t.Fatalf("partition %d: entries = %d, want %d", p, n, len(want))
		}

		// Again from the checkpoint: nothing to read, same count.
		cp, _, _ := dst.Checkpoint(p)
		r, err = dst.Restore(p, ChangelogPartition{Start: 0, End: off, DeleteRetention: time.Hour}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if why := r.Rebuild(); why != "" || r.From() != cp.Offset {
			t.Fatalf("restore from checkpoint %+v: rebuild %q, from %d", cp, why, r.From())
		}
		if _, err := r.Done(off); err != nil {
			t.Fatal(err)
		}
		if n := dst.Size()[p]; n != int64(len(want)) {
			t.Fatalf("partition %d: entries after resuming = %d, want %d", p, n, len(want))
		}
	}
}
