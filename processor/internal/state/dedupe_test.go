package state

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// changelog collects emitted changelog records, as a compacted topic
// would hold them once committed.
type changelog struct {
	recs []rec // in emit order
}

type rec struct {
	p          int32
	key, value []byte
}

func (c *changelog) emit(p int32, key, value []byte) {
	c.recs = append(c.recs, rec{p, append([]byte(nil), key...), value})
}

// tombstones counts the records of recs with no value.
func tombstones(recs []rec) int {
	n := 0
	for _, r := range recs {
		if r.value == nil {
			n++
		}
	}
	return n
}

// checkOne checks and remembers id at t0+at in d's partition 0, emitting
// into cl, and commits; with checkpoint, the commit moves the partition's
// checkpoint to cl's end. It returns whether id was a duplicate.
func checkOne(t *testing.T, d *Dedupe, cl *changelog, id string, at time.Duration, checkpoint bool) bool {
	t.Helper()
	tx := d.Begin(cl.emit)
	dup, err := tx.Check(0, []byte(id), t0.Add(at))
	if err != nil {
		t.Fatal(err)
	}
	tx.Remember()
	if _, err := tx.Finish(1000); err != nil {
		t.Fatal(err)
	}
	var positions map[int32]int64
	if checkpoint {
		positions = map[int32]int64{0: int64(len(cl.recs))}
	}
	if err := tx.Commit(positions); err != nil {
		t.Fatal(err)
	}
	return dup
}

func openDB(t testing.TB) *DB {
	t.Helper()
	db, err := Open(t.TempDir()+"/state", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// restored returns a Dedupe with partitions ps restored from nothing.
func restored(t *testing.T, db *DB, retention time.Duration, ps ...int32) *Dedupe {
	t.Helper()
	d := NewDedupe(db, retention)
	restoreEmpty(t, d.Restore, ps...)
	return d
}

// restoreEmpty restores partitions ps of a step, with restore, from an
// empty changelog.
func restoreEmpty(t testing.TB, restore func(int32, ChangelogPartition, time.Time) (Restorer, error), ps ...int32) {
	t.Helper()
	for _, p := range ps {
		r, err := restore(p, ChangelogPartition{}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Done(0); err != nil {
			t.Fatal(err)
		}
	}
}

// replay restores partition 0 of a step, with restore, from every record
// of cl, and returns the count Done gives.
func replay(t *testing.T, restore func(int32, ChangelogPartition, time.Time) (Restorer, error), cl *changelog) int64 {
	t.Helper()
	r, err := restore(0, ChangelogPartition{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cl.recs {
		if err := r.Apply(int64(i), c.key, c.value); err != nil {
			t.Fatal(err)
		}
	}
	n, err := r.Done(0)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type event struct {
	p   int32
	id  string
	at  time.Duration // after t0
	dup bool          // want
}

func TestDedupeRetention(t *testing.T) {
	for _, tc := range []struct {
		name   string
		events []event
	}{
		{name: "duplicate within retention", events: []event{
			{0, "a", 0, false}, {0, "a", time.Minute, true}, {0, "a", time.Hour, true},
		}},
		{name: "retention boundary is inclusive", events: []event{
			{0, "a", 0, false}, {0, "b", time.Hour, false}, {0, "a", time.Hour, true},
			{0, "c", time.Hour + time.Millisecond, false}, {0, "a", 0, false},
		}},
		{name: "stream time, not the record's time, expires", events: []event{
			{0, "a", 0, false}, {0, "x", 3 * time.Hour, false},
			// A late record of a: its own time is within the hour of
			// a's, but stream time is past a's retention.
			{0, "a", 30 * time.Minute, false},
			// Seen again at 30m: copies are judged by their own times.
			{0, "a", 80 * time.Minute, true}, {0, "a", 3 * time.Hour, false},
		}},
		{name: "a copy stamped before the first sighting", events: []event{
			{0, "a", time.Hour, false}, {0, "a", 0, true}, {0, "a", -time.Millisecond, false},
			{0, "b", 2 * time.Hour, false}, {0, "b", time.Hour, true}, {0, "b", 3 * time.Hour, true},
		}},
		{name: "retention counts from the first sighting", events: []event{
			{0, "a", 0, false}, {0, "a", 50 * time.Minute, true}, {0, "b", 61 * time.Minute, false}, {0, "a", 61 * time.Minute, false},
		}},
		{name: "partitions are apart", events: []event{
			{0, "a", 0, false}, {1, "a", 0, false}, {1, "b", 2 * time.Hour, false}, {0, "a", 0, true}, {1, "a", 0, false},
		}},
		{name: "a late record's ID is kept for the retention after it was seen", events: []event{
			{0, "x", 10 * time.Hour, false}, {0, "late", 0, false}, {0, "y", 10*time.Hour + 59*time.Minute, false},
			{0, "late", 30 * time.Minute, true}, {0, "late", 10 * time.Hour, false},
			{0, "z", 11*time.Hour + time.Millisecond, false}, {0, "late", 0, false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := restored(t, openDB(t), time.Hour, 0, 1)
			var cl changelog
			for i, e := range tc.events {
				tx := d.Begin(cl.emit)
				dup, err := tx.Check(e.p, []byte(e.id), t0.Add(e.at))
				if err != nil {
					t.Fatal(err)
				}
				tx.Remember()
				if dup != e.dup {
					t.Fatalf("event %d %+v: duplicate = %v", i, e, dup)
				}
				if _, err := tx.Finish(100); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(nil); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestDedupeNotRemembered: a record that was checked but not remembered (a
// dead letter) leaves no trace.
func TestDedupeNotRemembered(t *testing.T) {
	d := restored(t, openDB(t), time.Hour, 0)
	var cl changelog
	tx := d.Begin(cl.emit)
	for i := range 2 {
		if dup, err := tx.Check(0, []byte("dl"), t0); err != nil || dup {
			t.Fatalf("Check %d = %v, %v; want no duplicate", i, dup, err)
		}
	}
	if err := tx.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if len(cl.recs) != 0 || d.Size()[0] != 0 {
		t.Fatalf("changelog %v, size %d; want nothing", cl.recs, d.Size()[0])
	}
}

func TestDedupeNotRestored(t *testing.T) {
	d := restored(t, openDB(t), time.Hour, 0)
	var cl changelog
	tx := d.Begin(cl.emit)
	if _, err := tx.Check(1, []byte("a"), t0); !errors.Is(err, ErrNotRestored) {
		t.Fatalf("Check on an unrestored partition: %v, want ErrNotRestored", err)
	}
}

// TestDedupeAbortRollsBack: an aborted transaction's IDs are not seen by
// the next one, and its stream time does not stick.
func TestDedupeAbortRollsBack(t *testing.T) {
	d := restored(t, openDB(t), time.Hour, 0)
	var cl changelog
	tx := d.Begin(cl.emit)
	for _, id := range []string{"a", "b"} {
		if dup, err := tx.Check(0, []byte(id), t0); err != nil || dup {
			t.Fatalf("Check(%s) = %v, %v", id, dup, err)
		}
		tx.Remember()
	}
	// Seen again in the same transaction: read through the buffer.
	if dup, err := tx.Check(0, []byte("a"), t0); err != nil || !dup {
		t.Fatalf("Check(a) again in the transaction = %v, %v; want a duplicate", dup, err)
	}
	if _, err := tx.Check(0, []byte("far"), t0.Add(5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	tx.Discard()
	if st, ok := d.StreamTime(0); ok {
		t.Fatalf("stream time after an abort = %v, want none", st)
	}
	tx = d.Begin(cl.emit)
	for _, id := range []string{"a", "b"} {
		if dup, err := tx.Check(0, []byte(id), t0); err != nil || dup {
			t.Fatalf("after the abort, Check(%s) = %v, %v; want not a duplicate", id, dup, err)
		}
		tx.Remember()
	}
	if err := tx.Commit(nil); err != nil {
		t.Fatal(err)
	}
	tx = d.Begin(cl.emit)
	if dup, err := tx.Check(0, []byte("a"), t0); err != nil || !dup {
		t.Fatalf("after the commit, Check(a) = %v, %v; want a duplicate", dup, err)
	}
}

// TestDedupeRevokedNotApplied: a transaction that read a partition which
// was dropped and restored meanwhile does not write into the new state.
func TestDedupeRevokedNotApplied(t *testing.T) {
	d := restored(t, openDB(t), time.Hour, 0)
	var cl changelog
	tx := d.Begin(cl.emit)
	if _, err := tx.Check(0, []byte("a"), t0); err != nil {
		t.Fatal(err)
	}
	tx.Remember()
	if err := d.Drop(0); err != nil {
		t.Fatal(err)
	}
	r, _ := d.Restore(0, ChangelogPartition{}, time.Now())
	if _, err := r.Done(0); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(nil); err != nil {
		t.Fatal(err)
	}
	tx = d.Begin(cl.emit)
	if dup, err := tx.Check(0, []byte("a"), t0); err != nil || dup {
		t.Fatalf("Check(a) = %v, %v: the stale transaction wrote into the restored partition", dup, err)
	}
}

// TestDedupeExpiryAndRestore: expired IDs are purged and tombstoned, and a
// store rebuilt from the changelog decides every later record as the
// original does.
func TestDedupeExpiryAndRestore(t *testing.T) {
	d := restored(t, openDB(t), time.Hour, 0)
	var cl changelog
	for i := range 50 {
		checkOne(t, d, &cl, fmt.Sprintf("id-%d", i), time.Duration(i)*time.Minute, false)
	}
	// Stream time 49m: nothing expired yet. At 2h, ids 0..59m are.
	if got := d.Size()[0]; got != 50 {
		t.Fatalf("size = %d, want 50", got)
	}
	checkOne(t, d, &cl, "late", 2*time.Hour, false)
	if got := d.Size()[0]; got != 1 {
		t.Fatalf("size after expiry = %d, want 1", got)
	}
	if n := tombstones(cl.recs); n != 50 {
		t.Fatalf("tombstones = %d, want 50", n)
	}

	// Rebuild in another database from the changelog.
	d2 := NewDedupe(openDB(t), time.Hour)
	if n := replay(t, d2.Restore, &cl); n != int64(len(cl.recs)) {
		t.Fatalf("Done() = %d; want %d", n, len(cl.recs))
	}
	if st, _ := d2.StreamTime(0); !st.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("restored stream time = %v, want %v", st, t0.Add(2*time.Hour))
	}
	for _, e := range []struct {
		id  string
		at  time.Duration
		dup bool
	}{{"late", time.Hour, true}, {"id-3", 2 * time.Hour, false}, {"id-49", 0, false}, {"new", 0, false}} {
		if dup := checkOne(t, d2, &cl, e.id, e.at, false); dup != e.dup {
			t.Errorf("restored: Check(%s) = %v, want %v", e.id, dup, e.dup)
		}
	}
}

func TestParseIndexKey(t *testing.T) {
	for _, seen := range []int64{-5, 0, 1, 1 << 40} {
		s, id := parseIndexKey(indexKey(seen, []byte("x")))
		if s != seen || string(id) != "x" {
			t.Fatalf("round trip of %d: %d %q", seen, s, id)
		}
	}
	if string(indexKey(-1, nil)) >= string(indexKey(0, nil)) {
		t.Fatal("index keys do not order negative times first")
	}
}
