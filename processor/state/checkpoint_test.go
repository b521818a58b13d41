package state

import (
	"errors"
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
	}{
		{"valid, records after it", ChangelogPartition{topicA, 0, 150, day}, true},
		{"valid, nothing after it", ChangelogPartition{topicA, 0, 100, day}, true},
		{"valid, start at the checkpoint", ChangelogPartition{topicA, 100, 120, day}, true},
		{"start offset past it (records deleted)", ChangelogPartition{topicA, 101, 150, day}, false},
		{"recreated changelog topic", ChangelogPartition{topicB, 0, 150, day}, false},
		{"changelog ends before it", ChangelogPartition{topicA, 0, 99, day}, false},
		{"delete.retention.ms unknown", ChangelogPartition{topicA, 0, 150, 0}, false},
		{"older than delete.retention.ms", ChangelogPartition{topicA, 0, 150, 30 * time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cp.Check(tc.cl, now)
			if tc.ok != (err == nil) {
				t.Fatalf("Check = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("Check = %v, want ErrCheckpoint", err)
			}
		})
	}
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
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened: the checkpoint matches the changelog's end, so the
	// restore reads nothing and e1 is still known.
	db, err = Open(dir, "stage=s", nil)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Another stage's directory: emptied, no checkpoint.
	db, err = Open(dir, "stage=other", nil)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
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
