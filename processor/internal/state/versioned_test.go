package state

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tableRec is one record of a table partition: key, value (nil: a
// tombstone) and timestamp in ms.
type tableRec struct {
	key   string
	value []byte
	ts    int64
}

// restoreTable restores partition p of v from recs, as Replay would, and
// returns the offset after the last.
func restoreTable(t *testing.T, v *Versioned, p int32, recs []tableRec) int64 {
	t.Helper()
	r, err := v.Restore(p, ChangelogPartition{DeleteRetention: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ra := r.(recordApplier)
	for i, rec := range recs {
		if err := ra.ApplyRecord(&kgo.Record{Key: []byte(rec.key), Value: rec.value, Timestamp: time.UnixMilli(rec.ts), Partition: p, Offset: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Done(int64(len(recs))); err != nil {
		t.Fatal(err)
	}
	return int64(len(recs))
}

// TestVersionedLookupAsOf: a lookup reads the version current at its
// time; a tombstone deletes the key from its time on; records come in any
// timestamp order.
func TestVersionedLookupAsOf(t *testing.T) {
	v := NewVersioned(openDB(t), time.Hour)
	restoreTable(t, v, 0, []tableRec{
		{"c1", []byte(`{"tier":"bronze"}`), 1000},
		{"c1", []byte(`{"tier":"gold"}`), 3000},
		{"c1", []byte(`{"tier":"silver"}`), 2000}, // late: between the two
		{"c2", []byte(`{"tier":"x"}`), 1000},
		{"c2", nil, 5000},
		{"", []byte(`{"no":"key"}`), 1000},
	})
	for _, tc := range []struct {
		key  string
		ts   int64
		want string // "" : missing
	}{
		{"c1", 999, ""},
		{"c1", 1000, `{"tier":"bronze"}`},
		{"c1", 1999, `{"tier":"bronze"}`},
		{"c1", 2000, `{"tier":"silver"}`},
		{"c1", 3000, `{"tier":"gold"}`},
		{"c1", 1 << 50, `{"tier":"gold"}`},
		{"c2", 4999, `{"tier":"x"}`},
		{"c2", 5000, ""},
		{"c3", 5000, ""},
		{"c", 5000, ""}, // a prefix of another key is another key
	} {
		got, ok, err := v.Lookup(0, []byte(tc.key), tc.ts)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (tc.want != "") || string(got) != tc.want {
			t.Errorf("Lookup(%s, %d) = %q, %v; want %q", tc.key, tc.ts, got, ok, tc.want)
		}
	}
	if _, _, err := v.Lookup(1, []byte("c1"), 1000); !errors.Is(err, ErrNotRestored) {
		t.Fatalf("Lookup in a partition not restored: %v, want ErrNotRestored", err)
	}
}

// TestVersionedRetention: versions older than the newest one at or
// before newest timestamp - retention are purged; that one still answers.
func TestVersionedRetention(t *testing.T) {
	v := NewVersioned(openDB(t), 10*time.Second)
	restoreTable(t, v, 0, []tableRec{
		{"k", []byte("1"), 1_000},
		{"k", []byte("2"), 2_000},
		{"k", []byte("3"), 3_000},
		{"other", []byte("x"), 20_000}, // newest: the cutoff becomes 10_000
	})
	// The purge runs as k is updated, against what the database holds.
	b := v.db.NewBatch()
	if err := v.apply(b, 0, []byte("k"), 25_000, []byte("4"), 25_000); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ts   int64
		want string
	}{{1_500, ""}, {2_500, ""}, {3_000, "3"}, {12_000, "3"}, {25_000, "4"}} {
		got, ok, err := v.Lookup(0, []byte("k"), tc.ts)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (tc.want != "") || string(got) != tc.want {
			t.Errorf("Lookup(k, %d) = %q, %v; want %q", tc.ts, got, ok, tc.want)
		}
	}
}

// TestVersionedRetentionWhateverTheBatches: the versions a table keeps
// depend on its records, not on how reads cut them into batches: a
// restore that applies every record in one batch purges what records
// applied and committed one at a time purge.
func TestVersionedRetentionWhateverTheBatches(t *testing.T) {
	recs := []tableRec{
		{"a", []byte("0"), 0}, {"a", []byte("60"), 60_000}, {"a", []byte("120"), 120_000},
		{"b", []byte("x"), 130_000}, {"a", []byte("180"), 180_000},
	}
	whole := NewVersioned(openDB(t), time.Minute)
	restoreTable(t, whole, 0, recs)
	oneByOne := NewVersioned(openDB(t), time.Minute)
	restoreTable(t, oneByOne, 0, nil)
	newest := int64(noTime)
	for _, r := range recs {
		newest = max(newest, r.ts)
		b := oneByOne.db.NewBatch()
		if err := oneByOne.apply(b, 0, []byte(r.key), r.ts, r.value, newest); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// At 180 s the cutoff is 120 s: 120 answers from then on, 0 and 60
	// are purged.
	for _, tc := range []struct {
		ts   int64
		want string
	}{{30_000, ""}, {90_000, ""}, {125_000, "120"}, {200_000, "180"}} {
		for name, v := range map[string]*Versioned{"one batch": whole, "one at a time": oneByOne} {
			got, ok, err := v.Lookup(0, []byte("a"), tc.ts)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tc.want != "") || string(got) != tc.want {
				t.Errorf("%s: Lookup(a, %d) = %q, %v; want %q", name, tc.ts, got, ok, tc.want)
			}
		}
	}
}

// TestVersionedRestoreAgain: a restore that reads records it had already
// applied (from an older checkpoint) leaves the same table, and of a
// tombstone and a value at one timestamp, the later offset wins.
func TestVersionedRestoreAgain(t *testing.T) {
	db := openDB(t)
	recs := []tableRec{{"a", []byte("1"), 100}, {"a", []byte("2"), 200}, {"a", nil, 300}, {"a", []byte("3"), 300}}
	v := NewVersioned(db, time.Hour)
	restoreTable(t, v, 0, recs)
	v2 := NewVersioned(db, time.Hour)
	restoreTable(t, v2, 0, recs) // the same records applied again over the store
	for _, tc := range []struct {
		ts   int64
		want string
	}{{150, "1"}, {250, "2"}, {300, "3"}} {
		got, ok, err := v2.Lookup(0, []byte("a"), tc.ts)
		if err != nil || !ok || string(got) != tc.want {
			t.Errorf("Lookup(a, %d) = %q, %v, %v; want %q", tc.ts, got, ok, err, tc.want)
		}
	}
}

// TestVersionedLookupAll: a global table's lookup reads every restored
// partition; the later version wins across them.
func TestVersionedLookupAll(t *testing.T) {
	v := NewVersioned(openDB(t), time.Hour)
	if _, _, err := v.LookupAll([]byte("a"), 1); !errors.Is(err, ErrNotRestored) {
		t.Fatalf("LookupAll with nothing restored: %v, want ErrNotRestored", err)
	}
	restoreTable(t, v, 0, []tableRec{{"a", []byte("a0"), 100}, {"b", []byte("b0"), 100}})
	restoreTable(t, v, 1, []tableRec{{"a", []byte("a1"), 200}, {"c", []byte("c1"), 100}, {"b", nil, 300}})
	for _, tc := range []struct {
		key  string
		ts   int64
		want string
	}{{"a", 150, "a0"}, {"a", 250, "a1"}, {"b", 200, "b0"}, {"b", 300, ""}, {"c", 100, "c1"}, {"d", 100, ""}} {
		got, ok, err := v.LookupAll([]byte(tc.key), tc.ts)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (tc.want != "") || string(got) != tc.want {
			t.Errorf("LookupAll(%s, %d) = %q, %v; want %q", tc.key, tc.ts, got, ok, tc.want)
		}
	}
}
