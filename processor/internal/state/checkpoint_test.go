package state

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

var (
	topicA = [16]byte{1}
	topicB = [16]byte{2}
)

// TestCheckpointCheck: the rules that let a restore resume from a
// checkpoint instead of rebuilding.
func TestCheckpointCheck(t *testing.T) {
	now := time.UnixMilli(10 * 86400_000)
	day := 24 * time.Hour
	cp := Checkpoint{TopicID: topicA, Offset: 100, Since: now.Add(-time.Hour).UnixMilli()}
	for _, tc := range []struct {
		name string
		cl   ChangelogPartition
		ok   bool
		lost bool // the changelog no longer holds the checkpoint's state
	}{
		{"valid, records after it", ChangelogPartition{topicA, 0, 150, day}, true, false},
		{"valid, nothing after it", ChangelogPartition{topicA, 0, 100, day}, true, false},
		{"valid, start at the checkpoint", ChangelogPartition{topicA, 100, 120, day}, true, false},
		{"start offset past it (records deleted)", ChangelogPartition{topicA, 101, 150, day}, false, true},
		{"recreated changelog topic", ChangelogPartition{topicB, 0, 150, day}, false, true},
		{"changelog ends before it", ChangelogPartition{topicA, 0, 99, day}, false, true},
		{"delete.retention.ms unknown", ChangelogPartition{topicA, 0, 150, 0}, false, false},
		{"older than delete.retention.ms", ChangelogPartition{topicA, 0, 150, 30 * time.Minute}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cp.Check(tc.cl, now)
			if tc.ok != (err == nil) {
				t.Fatalf("Check = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("Check = %v, want ErrCheckpoint", err)
			}
			if errors.Is(err, ErrStateLost) != tc.lost {
				t.Fatalf("Check = %v, want ErrStateLost %v", err, tc.lost)
			}
		})
	}
}

// reopen closes db and opens dir again as identity, as a restarted
// instance does.
func reopen(t *testing.T, db *DB, dir, identity string) *DB {
	t.Helper()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := Open(dir, identity, nil)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestCheckpointCommit: a committed transaction moves the checkpoint, an
// aborted one never does nor reaches the store; a reopened database
// resumes from the checkpoint and restores nothing; a changed changelog
// makes it rebuild.
func TestCheckpointCommit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s-1")
	day := 24 * time.Hour
	db, err := Open(dir, "stage=s", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDedupe(db, time.Hour)
	r, err := d.Restore(0, ChangelogPartition{topicA, 0, 0, day}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Rebuild() == "" || r.From() != 0 {
		t.Fatalf("first restore: rebuild %q from %d, want a rebuild from 0", r.Rebuild(), r.From())
	}
	if _, err := r.Done(0); err != nil {
		t.Fatal(err)
	}
	cl := &changelog{}
	tx := d.Begin(cl.emit)
	seen := func(id string) bool {
		t.Helper()
		dup, err := tx.Check(0, []byte(id), t0)
		if err != nil {
			t.Fatal(err)
		}
		tx.Remember()
		return dup
	}
	seen("e1")
	if _, err := tx.Finish(10); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(map[int32]int64{0: 3}); err != nil {
		t.Fatal(err)
	}
	checkpointIs := func(want int64) {
		t.Helper()
		cp, ok, err := d.Checkpoint(0)
		if err != nil || !ok || cp.Offset != want || cp.TopicID != topicA {
			t.Fatalf("checkpoint = %+v, %v, %v; want offset %d of topic A", cp, ok, err, want)
		}
	}
	checkpointIs(3)

	// An aborted transaction: neither its ID nor a checkpoint move.
	seen("e2")
	if _, err := tx.Finish(10); err != nil {
		t.Fatal(err)
	}
	tx.Discard()
	checkpointIs(3)
	if _, ok, _ := d.ids.Get(0, []byte("e2")); ok {
		t.Fatal("the aborted transaction's ID reached the store")
	}

	// Reopened: the checkpoint matches the changelog's end, so the
	// restore reads nothing and e1 is still known.
	db = reopen(t, db, dir, "stage=s")
	d = NewDedupe(db, time.Hour)
	r, err = d.Restore(0, ChangelogPartition{topicA, 0, 4, day}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Rebuild() != "" || r.From() != 3 {
		t.Fatalf("restart: rebuild %q from %d, want a resume from 3", r.Rebuild(), r.From())
	}
	if n, err := r.Done(4); err != nil || n != 0 {
		t.Fatalf("Done = %d, %v; want 0 records", n, err)
	}
	checkpointIs(4)
	tx = d.Begin(cl.emit)
	if !seen("e1") {
		t.Fatal("e1 is no duplicate after a restart from the checkpoint")
	}
	tx.Discard()

	// The changelog was recreated: the store is rebuilt, and empty.
	d.Drop(0)
	r, err = d.Restore(0, ChangelogPartition{topicB, 0, 0, day}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Rebuild() == "" {
		t.Fatal("recreated changelog: no rebuild")
	}
	if _, err := r.Done(0); err != nil {
		t.Fatal(err)
	}
	tx = d.Begin(cl.emit)
	if seen("e1") {
		t.Fatal("e1 survived the rebuild for a recreated changelog")
	}
	tx.Discard()

	// Another stage's directory: emptied, no checkpoint.
	db = reopen(t, db, dir, "stage=other")
	defer db.Close()
	if _, ok, err := NewDedupe(db, time.Hour).Checkpoint(0); ok || err != nil {
		t.Fatalf("another identity's checkpoint survived: %v %v", ok, err)
	}
}

// TestCheckpointRestoreCut: a restore cut short (a crash) leaves a
// checkpoint where its last batch stopped, and one resumed from there
// ends with the same store as a full one.
func TestCheckpointRestoreCut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s-1")
	day := 24 * time.Hour
	const total = 3 * restoreBatch / 2
	cl := ChangelogPartition{topicA, 0, total, day}
	db, err := Open(dir, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := NewDedupe(db, time.Hour)
	r, err := d.Restore(0, cl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	apply := func(r Restorer, from, to int64) {
		t.Helper()
		for off := from; off < to; off++ {
			if err := r.Apply(off, []byte("id-"+strconv.FormatInt(off, 10)), []byte("1000")); err != nil {
				t.Fatal(err)
			}
		}
	}
	apply(r, 0, total-10) // no Done: cut short
	db = reopen(t, db, dir, "s")
	defer db.Close()
	d = NewDedupe(db, time.Hour)
	r, err = d.Restore(0, cl, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Rebuild() != "" || r.From() <= 0 || r.From() >= total-10 {
		t.Fatalf("resume: rebuild %q from %d, want a resume inside (0, %d)", r.Rebuild(), r.From(), total-10)
	}
	apply(r, r.From(), total)
	if _, err := r.Done(total); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := d.ids.Scan(0, nil, nil, func(_, _ []byte) (bool, error) { n++; return true, nil }); err != nil {
		t.Fatal(err)
	}
	if n != total || d.Size()[0] != total {
		t.Fatalf("store holds %d IDs (size %d), want %d", n, d.Size()[0], total)
	}
}

// TestOpenLocked: a state directory held by one DB cannot be opened by
// another.
func TestOpenLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s-1")
	db, err := Open(dir, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, "s", nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, "s", nil)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	_ = db.Close()
}

// TestCheckpointStaleReturn: a partition comes back to an instance that
// held it before, whose checkpoint the changelog has moved past: the next
// owner remembered new IDs, expired the old ones (tombstones) and saw one
// of them again. The restore resumes from the stale checkpoint, reads only
// what came after it, and the store then judges every ID as a store
// rebuilt from the whole changelog does: none of the newer IDs is missed,
// and none of the IDs the stale store holds is judged by its stale view.
func TestCheckpointStaleReturn(t *testing.T) {
	day := 24 * time.Hour
	cl := &changelog{}
	end := func() int64 { return int64(len(cl.recs)) }
	// step checks id at t0+at in d's partition 0 and commits, moving the
	// checkpoint to the changelog's end.
	step := func(d *Dedupe, id string, at time.Duration) bool {
		t.Helper()
		return checkOne(t, d, cl, id, at, true)
	}
	// restore restores d's partition 0 from the changelog as it stands.
	restore := func(d *Dedupe) Restorer {
		t.Helper()
		r, err := d.Restore(0, ChangelogPartition{topicA, 0, end(), day}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		for off := r.From(); off < end(); off++ {
			if err := r.Apply(off, cl.recs[off].key, cl.recs[off].value); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.Done(end()); err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Instance A holds the partition: x0..x9 seen at t0..t0+9m.
	a := NewDedupe(openDB(t), time.Hour)
	restore(a)
	for i := range 10 {
		step(a, fmt.Sprintf("x%d", i), time.Duration(i)*time.Minute)
	}
	checkpoint, ok, err := a.Checkpoint(0)
	if err != nil || !ok || checkpoint.Offset != end() {
		t.Fatalf("A's checkpoint %+v, %v, %v; want offset %d", checkpoint, ok, err, end())
	}
	if err := a.Drop(0); err != nil { // revoked
		t.Fatal(err)
	}

	// Instance B takes it over: stream time jumps to t0+2h, expiring
	// every x; x3 comes again (new, remembered at t0+2h), m0 is new.
	b := NewDedupe(openDB(t), time.Hour)
	restore(b)
	for _, e := range []struct {
		id  string
		at  time.Duration
		dup bool
	}{{"x1", 30 * time.Minute, true}, {"tick", 2 * time.Hour, false}, {"x3", 2 * time.Hour, false}, {"m0", 2 * time.Hour, false}} {
		if dup := step(b, e.id, e.at); dup != e.dup {
			t.Fatalf("B: Check(%s) = %v, want %v", e.id, dup, e.dup)
		}
	}
	if n := tombstones(cl.recs[checkpoint.Offset:]); n != 10 {
		t.Fatalf("B wrote %d tombstones past A's checkpoint, want 10 (every x expired)", n)
	}

	// A gets it back: it resumes from its checkpoint, not from the start.
	r := restore(a)
	if r.Rebuild() != "" || r.From() != checkpoint.Offset {
		t.Fatalf("A's restore: rebuild %q from %d, want a resume from its checkpoint %d", r.Rebuild(), r.From(), checkpoint.Offset)
	}
	if st, _ := a.StreamTime(0); !st.Equal(t0.Add(2 * time.Hour)) {
		t.Fatalf("A's stream time %v, want B's %v", st, t0.Add(2*time.Hour))
	}
	// A store rebuilt from the whole changelog, to compare with.
	rebuilt := NewDedupe(openDB(t), time.Hour)
	restore(rebuilt)

	for _, e := range []struct {
		id  string
		at  time.Duration // a record time below the stream time does not move it
		dup bool
		why string
	}{
		{"m0", 90 * time.Minute, true, "only B saw it: a missed ID"},
		{"x3", 90 * time.Minute, true, "B saw it again after it expired"},
		{"x5", 90 * time.Minute, false, "expired and tombstoned: A's stale copy (seen t0+5m) must not count"},
		{"x9", 90 * time.Minute, false, "expired and tombstoned"},
		{"new", 90 * time.Minute, false, "never seen"},
	} {
		for _, d := range []struct {
			name string
			d    *Dedupe
		}{{"A, resumed", a}, {"rebuilt", rebuilt}} {
			tx := d.d.Begin(cl.emit)
			dup, err := tx.Check(0, []byte(e.id), t0.Add(e.at))
			if err != nil {
				t.Fatal(err)
			}
			tx.Discard()
			if dup != e.dup {
				t.Errorf("%s: Check(%s) = %v, want %v (%s)", d.name, e.id, dup, e.dup, e.why)
			}
		}
	}

	// A commits a transaction at the stream time: its purge of expired IDs
	// meets the stale index entries of x3 and x5 and must leave x3, seen
	// again at t0+2h, alone.
	if step(a, "y", 2*time.Hour) {
		t.Fatal("A: y is no duplicate")
	}
	if !step(a, "x3", 2*time.Hour) {
		t.Fatal("A: x3 is no longer a duplicate after A's purge")
	}
}

// TestRestoreNoCheckpointLogStart: a store without a checkpoint is
// rebuilt from the changelog's start, and a start above 0 means records
// were deleted: the rebuild is lost state, not a plain rebuild.
func TestRestoreNoCheckpointLogStart(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name  string
		start int64
		lost  bool
	}{
		{"new changelog", 0, false},
		{"changelog starts past 0", 500, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(filepath.Join(t.TempDir(), "s-1"), "s", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			r, err := NewDedupe(db, time.Hour).Restore(0, ChangelogPartition{topicA, tc.start, 1000, day}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if r.Rebuild() == "" || r.From() != tc.start || r.Lost() != tc.lost {
				t.Fatalf("rebuild %q from %d lost %v, want a rebuild from %d lost %v", r.Rebuild(), r.From(), r.Lost(), tc.start, tc.lost)
			}
		})
	}
}
