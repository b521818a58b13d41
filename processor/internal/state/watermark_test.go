package state

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

type srcEvent struct {
	src string
	key string
	ts  int64
}

// runAggFrom adds events from their sources to partition 0, committing
// every per events, and returns the closed windows' values and the late
// events' indexes.
func runAggFrom(t *testing.T, a *Aggregate, cl *changelog, events []srcEvent, per int) (results []string, late []int) {
	t.Helper()
	for i := 0; i < len(events); i += per {
		tx := a.Begin(cl.emit)
		for j := i; j < min(i+per, len(events)); j++ {
			e := events[j]
			_, isLate, err := tx.AddFrom(0, e.src, []byte(e.key), e.ts, nil)
			if err != nil {
				t.Fatalf("event %d: %v", j, err)
			}
			if isLate {
				late = append(late, j)
			}
		}
		closed, err := tx.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(nil); err != nil {
			t.Fatal(err)
		}
		for _, r := range closed {
			results = append(results, fmt.Sprintf("%s n=%d", values(r), r.Count))
		}
	}
	return results, late
}

// The runs of three upstream partitions reach one input partition one
// after another (a backlog), or interleaved (live): the same windows close
// with the same records, none late, when grace covers each run's own
// disorder.
func TestAggregateWatermarkOverSources(t *testing.T) {
	const m = 60_000
	runs := map[string][]srcEvent{
		"orders/0": {{"orders/0", "c1", 0 * m}, {"orders/0", "c1", 2*m + 5_000}},
		"orders/1": {{"orders/1", "c1", 30_000}, {"orders/1", "c1", 1*m + 1_000}},
		"orders/2": {{"orders/2", "c1", 1*m + 30_000}, {"orders/2", "c1", 2*m + 50_000}},
	}
	// A later batch from every upstream partition closes the windows.
	flush := []srcEvent{{"orders/0", "c1", 10 * m}, {"orders/1", "c1", 10 * m}, {"orders/2", "c1", 10 * m}}
	sequential := append(append(append([]srcEvent{}, runs["orders/0"]...), runs["orders/1"]...), runs["orders/2"]...)
	var interleaved []srcEvent
	for i := range 2 {
		for _, s := range []string{"orders/2", "orders/0", "orders/1"} {
			interleaved = append(interleaved, runs[s][i])
		}
	}
	want := []string{`c1 0-60000 [] n=2`, `c1 60000-120000 [] n=2`, `c1 120000-180000 [] n=2`}
	for _, tc := range []struct {
		name   string
		events []srcEvent
		per    int
	}{
		{"sequential runs, one transaction each", sequential, 1},
		{"sequential runs, one transaction", sequential, 100},
		{"interleaved", interleaved, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openDB(t)
			a := NewAggregate(db, AggregateConfig{Size: time.Minute, Advance: time.Minute, Grace: 10 * time.Second, Kinds: []string{}})
			a.SetWatermark(Watermark{Upstream: map[string]int32{"orders": 3}, Idle: time.Hour})
			restoreEmpty(t, a.Restore, 0)
			cl := &changelog{}
			got, late := runAggFrom(t, a, cl, append(slices.Clone(tc.events), flush...), tc.per)
			if len(late) > 0 {
				t.Fatalf("late events %v, want none", late)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("closed %q, want %q", got, want)
			}
		})
	}
}

// Without the upstream sources known at start, the first run alone
// closes windows that the next run's records then find closed.
func TestAggregateWatermarkUnknownSourceLate(t *testing.T) {
	db := openDB(t)
	a := NewAggregate(db, AggregateConfig{Size: time.Minute, Advance: time.Minute, Grace: 10 * time.Second, Kinds: []string{}})
	a.SetWatermark(Watermark{Idle: time.Hour})
	restoreEmpty(t, a.Restore, 0)
	_, late := runAggFrom(t, a, &changelog{}, []srcEvent{
		{"orders/0", "c1", 0}, {"orders/0", "c1", 180_000}, {"orders/1", "c1", 30_000}, // first heard of behind the stream time
	}, 1)
	if !slices.Equal(late, []int{2}) {
		t.Fatalf("late %v, want [2]", late)
	}
}

// A source silent for the idle timeout stops holding the stream time
// back; heard from again, it holds it again, and its records behind the
// stream time are late.
func TestAggregateWatermarkIdle(t *testing.T) {
	now := t0
	db := openDB(t)
	a := NewAggregate(db, AggregateConfig{Size: time.Minute, Advance: time.Minute, Kinds: []string{}})
	a.SetWatermark(Watermark{Upstream: map[string]int32{"orders": 2}, Idle: 30 * time.Second, Now: func() time.Time { return now }})
	restoreEmpty(t, a.Restore, 0)
	cl := &changelog{}
	step := func(src string, ts int64, wantLate bool, wantClosed int) {
		t.Helper()
		got, late := runAggFrom(t, a, cl, []srcEvent{{src, "k", ts}}, 1)
		if (len(late) > 0) != wantLate || len(got) != wantClosed {
			t.Fatalf("%s at %d: late %v, closed %q; want late %v, %d closed", src, ts, late, got, wantLate, wantClosed)
		}
	}
	step("orders/0", 0, false, 0)
	step("orders/0", 120_000, false, 0) // orders/1 never heard of: holds
	now = now.Add(31 * time.Second)
	step("orders/0", 121_000, false, 1) // orders/1 idle: [0,60s) closes
	step("orders/1", 130_000, false, 0) // back: holds at its clock
	step("orders/0", 300_000, false, 0)
	step("orders/1", 30_000, true, 0) // behind the stream time: late
	if st, _ := a.StreamTime(0); st.UnixMilli() != 130_000 {
		t.Fatalf("stream time %d, want 130000", st.UnixMilli())
	}
}

// The source clocks are state: a partition restored from its changelog,
// or from its checkpoint, holds the same stream time and clocks.
func TestWatermarkRestored(t *testing.T) {
	db := openDB(t)
	cfg := AggregateConfig{Size: time.Minute, Advance: time.Minute, Kinds: []string{}}
	wm := Watermark{Upstream: map[string]int32{"orders": 2}, Idle: time.Hour}
	a := NewAggregate(db, cfg)
	a.SetWatermark(wm)
	restoreEmpty(t, a.Restore, 0)
	cl := &changelog{}
	runAggFrom(t, a, cl, []srcEvent{{"orders/0", "k", 100_000}, {"orders/1", "k", 70_000}, {"", "k", 90_000}}, 1)
	want := map[string]int64{"orders/0": 100_000, "orders/1": 70_000, "": 90_000}

	b := NewAggregate(openDB(t), cfg)
	b.SetWatermark(wm)
	replay(t, b.Restore, cl)
	if got := b.get(0); got.streamTime != 70_000 || !maps.Equal(got.clocks, want) {
		t.Fatalf("restored from the changelog: stream time %d, clocks %v; want 70000, %v", got.streamTime, got.clocks, want)
	}
	// orders/1 still holds the stream time after the restore.
	_, late := runAggFrom(t, b, &changelog{}, []srcEvent{{"orders/1", "k", 75_000}}, 1)
	if len(late) > 0 {
		t.Fatal("orders/1's next record is late after the restore")
	}

	cp := Checkpoint{Offset: 3, Since: 1, StreamTime: 70_000, Entries: 2, Clocks: want}
	got, err := decodeCheckpoint(cp.encode())
	if err != nil || got.StreamTime != cp.StreamTime || got.Offset != 3 || !maps.Equal(got.Clocks, want) {
		t.Fatalf("checkpoint %+v decodes as %+v, %v", cp, got, err)
	}
	old := Checkpoint{Offset: 3, StreamTime: 5}
	if got, err := decodeCheckpoint(old.encode()); err != nil || got.Clocks != nil || got.StreamTime != 5 {
		t.Fatalf("checkpoint without clocks decodes as %+v, %v", got, err)
	}
	// Records without lineage alone: the stream time alone, as before
	// there were sources.
	if st, clocks, err := decodeStreamTime([]byte("123")); err != nil || st != 123 || !maps.Equal(clocks, map[string]int64{"": 123}) {
		t.Fatalf("a plain stream time decodes as %d %v %v", st, clocks, err)
	}
	if got := string(encodeStreamTime(123, map[string]int64{"": 123})); got != "123" {
		t.Fatalf("the stream time of records without lineage encodes as %q, want 123", got)
	}
}

// A duplicate stays a duplicate however the runs of its upstream
// partitions interleave.
func TestDedupeWatermarkOverSources(t *testing.T) {
	for _, order := range [][]string{{"orders/0", "orders/1"}, {"orders/1", "orders/0"}} {
		d := NewDedupe(openDB(t), time.Minute)
		d.SetWatermark(Watermark{Upstream: map[string]int32{"orders": 2}, Idle: time.Hour})
		restoreEmpty(t, d.Restore, 0)
		runs := map[string][]struct {
			id string
			at time.Duration
		}{
			"orders/0": {{"a", 0}, {"x", 10 * time.Minute}},
			"orders/1": {{"a", 30 * time.Second}, {"y", 10 * time.Minute}},
		}
		var dups []string
		for _, src := range order {
			for _, e := range runs[src] {
				tx := d.Begin((&changelog{}).emit)
				dup, err := tx.CheckFrom(0, src, []byte(e.id), t0.Add(e.at))
				if err != nil {
					t.Fatal(err)
				}
				if dup {
					dups = append(dups, e.id)
				} else {
					tx.Remember()
				}
				if _, err := tx.Finish(1000); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		if !slices.Equal(dups, []string{"a"}) {
			t.Fatalf("order %v: duplicates %v, want [a]", order, dups)
		}
	}
}

// BenchmarkWatermark judges and records one record's event time against
// the clocks of n upstream partitions, the work AddFrom and CheckFrom add
// per record.
func BenchmarkWatermark(b *testing.B) {
	for _, n := range []int32{1, 3, 100} {
		b.Run(fmt.Sprintf("%d upstream partitions", n), func(b *testing.B) {
			set := newPartSet()
			set.SetWatermark(Watermark{Upstream: map[string]int32{"orders": n}, Idle: time.Minute})
			pt := &part{streamTime: noTime, restored: time.Now().UnixMilli()}
			t := txnParts{set: set, m: map[int32]*txnPart{}}
			tp := &txnPart{part: pt, streamTime: noTime}
			srcs := make([]string, n)
			for i := range srcs {
				srcs[i] = Source("orders", int32(i))
			}
			now := time.Now().UnixMilli()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				src, ts := srcs[i%len(srcs)], int64(i)
				t.observe(tp, src, ts, now, t.peek(tp, src, ts, now))
			}
		})
	}
}

// A committed transaction's source clocks reach the checkpoint, an aborted
// one's do not, and a reopened database resumes with them.
func TestWatermarkCheckpointed(t *testing.T) {
	dir := t.TempDir() + "/s-1"
	day := 24 * time.Hour
	db, err := Open(dir, "stage=s", nil)
	if err != nil {
		t.Fatal(err)
	}
	wm := Watermark{Upstream: map[string]int32{"orders": 2}, Idle: time.Hour}
	open := func(db *DB) *Dedupe {
		d := NewDedupe(db, time.Hour)
		d.SetWatermark(wm)
		return d
	}
	d := open(db)
	r, err := d.Restore(0, ChangelogPartition{topicA, 0, 0, day}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Done(0); err != nil {
		t.Fatal(err)
	}
	check := func(src, id string, at time.Duration, commit bool) {
		t.Helper()
		tx := d.Begin((&changelog{}).emit)
		if _, err := tx.CheckFrom(0, src, []byte(id), t0.Add(at)); err != nil {
			t.Fatal(err)
		}
		tx.Remember()
		if _, err := tx.Finish(10); err != nil {
			t.Fatal(err)
		}
		if !commit {
			tx.Discard()
			return
		}
		if err := tx.Commit(map[int32]int64{0: 3}); err != nil {
			t.Fatal(err)
		}
	}
	check("orders/0", "a", time.Minute, true)
	check("orders/1", "b", 2*time.Minute, true)
	check("orders/0", "c", 5*time.Minute, false) // aborted
	want := map[string]int64{"orders/0": t0.Add(time.Minute).UnixMilli(), "orders/1": t0.Add(2 * time.Minute).UnixMilli()}
	cp, ok, err := d.Checkpoint(0)
	if err != nil || !ok || !maps.Equal(cp.Clocks, want) || cp.StreamTime != want["orders/0"] {
		t.Fatalf("checkpoint %+v, %v, %v; want stream time %d, clocks %v", cp, ok, err, want["orders/0"], want)
	}
	d = open(reopen(t, db, dir, "stage=s"))
	r, err = d.Restore(0, ChangelogPartition{topicA, 0, 3, day}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r.Rebuild() != "" {
		t.Fatalf("restore rebuilds (%s), want a resume from the checkpoint", r.Rebuild())
	}
	if _, err := r.Done(3); err != nil {
		t.Fatal(err)
	}
	if got := d.get(0); !maps.Equal(got.clocks, want) || got.streamTime != want["orders/0"] {
		t.Fatalf("resumed: stream time %d, clocks %v; want %d, %v", got.streamTime, got.clocks, want["orders/0"], want)
	}
}
