package state

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func sessionResults(rs []Result) []string {
	var out []string
	for _, r := range rs {
		if r.Retract {
			out = append(out, fmt.Sprintf("%s %d-%d retract", r.Key, r.Window.Start, r.Window.End))
			continue
		}
		out = append(out, values(r))
	}
	return out
}

func TestSessionWindows(t *testing.T) {
	const gap = 10_000
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		events []aggEvent
		want   []string // final results, in the order closed (by end, then key)
		late   []int
	}{
		{name: "gap splits sessions, a far record closes them",
			events: []aggEvent{{"k", 0, nil}, {"k", 5_000, nil}, {"k", 16_000, nil}, {"k", 100_000, nil}},
			want:   []string{`k 0-5000 [2]`, `k 16000-16000 [1]`}},
		{name: "exactly gap apart joins, one more ms does not",
			events: []aggEvent{{"k", 0, nil}, {"k", 10_000, nil}, {"k", 20_001, nil}, {"k", 100_000, nil}},
			want:   []string{`k 0-10000 [2]`, `k 20001-20001 [1]`}},
		{name: "exactly gap before the start joins", grace: time.Minute,
			events: []aggEvent{{"k", 20_000, nil}, {"k", 10_000, nil}, {"k", 200_000, nil}},
			want:   []string{`k 10000-20000 [2]`}},
		{name: "one bridging record merges three sessions", grace: time.Minute,
			events: []aggEvent{{"k", 0, nil}, {"k", 30_000, nil}, {"k", 15_000, nil}, {"k", 22_000, nil}, {"k", 7_000, nil}, {"k", 300_000, nil}},
			want:   []string{`k 0-30000 [5]`}},
		{name: "out of order within grace, several keys", grace: 30 * time.Second,
			events: []aggEvent{{"a", 50_000, nil}, {"b", 55_000, nil}, {"a", 30_000, nil}, {"b", 41_000, nil}, {"a", 40_000, nil}, {"z", 500_000, nil}},
			want:   []string{`b 41000-41000 [1]`, `a 30000-50000 [3]`, `b 55000-55000 [1]`}}, // closed together: by end
		{name: "session closes when stream time passes end+gap+grace", grace: 5 * time.Second,
			// At stream time 15s (end+gap+grace) k's session is open: the
			// record at 15s from j does not close it, 15.001s does.
			events: []aggEvent{{"k", 0, nil}, {"j", 15_000, nil}, {"k", 10_000, nil}, {"j", 25_002, nil}},
			want:   []string{`k 0-10000 [2]`}},
		{name: "late: before stream time minus grace and in no open session", grace: 5 * time.Second,
			events: []aggEvent{{"k", 0, nil}, {"k", 9_000, nil}, {"j", 40_000, nil}, {"k", 5_000, nil}, {"k", 34_000, nil}, {"k", 35_000, nil}, {"z", 200_000, nil}},
			// k's 0-9000 closed at 40s: 5_000 is late; 34_000 is before
			// 40s-5s and in no session: late; 35_000 is in grace.
			want: []string{`k 0-9000 [2]`, `k 35000-35000 [1]`, `j 40000-40000 [1]`}, late: []int{3, 4}},
		{name: "inside an open session is never late",
			events: []aggEvent{{"k", 0, nil}, {"k", 9_000, nil}, {"j", 15_000, nil}, {"k", 3_000, nil}, {"j", 100_000, nil}},
			want:   []string{`k 0-9000 [3]`, `j 15000-15000 [1]`}}, // closed together: by end
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := AggregateConfig{Gap: gap * time.Millisecond, Grace: tc.grace, Kinds: []string{"count"}}
			a := restoredAgg(t, openDB(t), cfg, 0)
			var cl changelog
			got, late := runAgg(t, a, &cl, tc.events)
			if gs := sessionResults(got); !slices.Equal(gs, tc.want) || !slices.Equal(late, tc.late) {
				t.Fatalf("results %q late %v\nwant    %q late %v", gs, late, tc.want, tc.late)
			}
		})
	}
}

// TestSessionMergeAggregations: every aggregation merges as if one
// session had seen all the records.
func TestSessionMergeAggregations(t *testing.T) {
	kinds := []string{"count", "sum", "min", "max", "avg", "first", "last"}
	v := func(x any) []any { return []any{nil, x, x, x, x, x, x} }
	cfg := AggregateConfig{Gap: 10 * time.Second, Grace: time.Minute, Kinds: kinds}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	got, _ := runAgg(t, a, &cl, []aggEvent{
		{"k", 0, v(int64(5))}, {"k", 40_000, v(2.5)}, {"k", 20_000, v(int64(-1))}, {"k", 30_000, v(nil)}, {"k", 10_000, v(int64(7))}, {"k", 500_000, v(int64(0))},
	})
	if gs, want := sessionResults(got), []string{`k 0-40000 [5,13.5,-1,7,3.375,5,2.5]`}; !slices.Equal(gs, want) {
		t.Fatalf("results %q, want %q", gs, want)
	}
}

// TestSessionUpdateSequence: with emit update, each record writes the
// merged session, after a retraction of each session whose bounds it
// replaced; a closed session is deleted without output.
func TestSessionUpdateSequence(t *testing.T) {
	cfg := AggregateConfig{Gap: 10 * time.Second, Grace: time.Minute, Kinds: []string{"count"}, Update: true}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	got, _ := runAgg(t, a, &cl, []aggEvent{{"k", 0, nil}, {"k", 5_000, nil}, {"k", 3_000, nil}, {"k", 25_000, nil}, {"k", 15_000, nil}, {"k", 500_000, nil}})
	want := []string{
		`k 0-0 [1]`,
		`k 0-0 retract`, `k 0-5000 [2]`,
		`k 0-5000 [3]`, // inside: the bounds stay
		`k 25000-25000 [1]`,
		`k 0-5000 retract`, `k 25000-25000 retract`, `k 0-25000 [5]`, // 15000 bridges
		`k 500000-500000 [1]`,
	}
	if gs := sessionResults(got); !slices.Equal(gs, want) {
		t.Fatalf("results %q\nwant    %q", gs, want)
	}
	if n := a.Size()[0]; n != 1 {
		t.Fatalf("entries = %d, want 1", n)
	}
}

// TestSessionRestore: the merges go to the changelog in the transaction,
// so a store rebuilt from it holds the same sessions.
func TestSessionRestore(t *testing.T) {
	cfg := AggregateConfig{Gap: 10 * time.Second, Grace: time.Minute, Kinds: []string{"count", "sum"}}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	runAgg(t, a, &cl, []aggEvent{{"k", 0, []any{nil, int64(1)}}, {"k", 20_000, []any{nil, int64(2)}}, {"j", 5_000, []any{nil, int64(4)}}, {"k", 10_000, []any{nil, int64(3)}}})
	if n := a.Size()[0]; n != 2 {
		t.Fatalf("entries = %d, want 2", n)
	}
	a2 := NewAggregate(openDB(t), cfg)
	replay(t, a2.Restore, &cl)
	if n := a2.Size()[0]; n != 2 {
		t.Fatalf("restored entries = %d, want 2", n)
	}
	for _, st := range []*Aggregate{a, a2} {
		var cl2 changelog
		got, _ := runAgg(t, st, &cl2, []aggEvent{{"k", 25_000, []any{nil, int64(10)}}, {"z", 500_000, []any{nil, int64(0)}}})
		if gs, want := sessionResults(got), []string{`j 5000-5000 [1,4]`, `k 0-25000 [4,16]`}; !slices.Equal(gs, want) {
			t.Fatalf("results %q, want %q", gs, want)
		}
	}
}

// TestSessionRandom compares the sessions closed with the ones computed
// from all records sorted by time, for records out of order within
// grace, one transaction per few records. One transaction in four is
// first aborted, then run again, as after a rebalance.
func TestSessionRandom(t *testing.T) {
	const gap, grace = 1_000, 3_000
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"a", "b", "c", "d"}
	var events []aggEvent
	var clock int64
	for range 3_000 {
		clock += rng.Int64N(400)
		ts := clock - rng.Int64N(grace)
		events = append(events, aggEvent{keys[rng.IntN(len(keys))], max(ts, 0), nil})
	}
	cfg := AggregateConfig{Gap: gap * time.Millisecond, Grace: grace * time.Millisecond, Kinds: []string{"count"}}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	var got []string
	for i := 0; i < len(events); i += 7 {
		for abort := rng.IntN(4) == 0; ; abort = false {
			var aborted changelog
			tx := a.Begin(aborted.emit)
			for _, e := range events[i:min(i+7, len(events))] {
				if _, late, err := tx.Add(0, []byte(e.key), e.ts, nil); err != nil || late {
					t.Fatalf("event %+v: late %v, %v", e, late, err)
				}
			}
			closed, err := tx.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if abort {
				tx.Discard()
				continue
			}
			if err := tx.Commit(nil); err != nil {
				t.Fatal(err)
			}
			cl.recs = append(cl.recs, aborted.recs...)
			got = append(got, sessionResults(closed)...)
			break
		}
	}
	tx := a.Begin(cl.emit)
	if _, _, err := tx.Add(0, []byte("zz"), clock+1_000_000, nil); err != nil {
		t.Fatal(err)
	}
	closed, err := tx.Finish()
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, sessionResults(closed)...)

	var want []string
	for _, k := range keys {
		var ts []int64
		for _, e := range events {
			if e.key == k {
				ts = append(ts, e.ts)
			}
		}
		slices.Sort(ts)
		start, n := ts[0], 1
		for i := 1; i <= len(ts); i++ {
			if i == len(ts) || ts[i]-ts[i-1] > gap {
				want = append(want, fmt.Sprintf("%s %d-%d [%d]", k, start, ts[i-1], n))
				if i < len(ts) {
					start, n = ts[i], 0
				}
			}
			n++
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%d sessions, want %d:\n got %q\nwant %q", len(got), len(want), got, want)
	}
	t.Logf("%d records, %d sessions", len(events), len(want))
}

// TestSessionAbortedClose: a session an aborted transaction closed is
// still stored, and closes in the next transaction whose stream time
// passes its end + gap.
func TestSessionAbortedClose(t *testing.T) {
	cfg := AggregateConfig{Gap: 10 * time.Second, Kinds: []string{"count"}}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	runAgg(t, a, &cl, []aggEvent{{"a", 0, nil}})
	tx := a.Begin(cl.emit)
	if _, _, err := tx.Add(0, []byte("b"), 100_000, nil); err != nil {
		t.Fatal(err)
	}
	if closed, err := tx.Finish(); err != nil || len(closed) != 1 {
		t.Fatalf("Finish = %q, %v; want a closed", sessionResults(closed), err)
	}
	tx.Discard()
	got, _ := runAgg(t, a, &cl, []aggEvent{{"c", 50_000, nil}})
	if gs, want := sessionResults(got), []string{`a 0-0 [1]`}; !slices.Equal(gs, want) {
		t.Fatalf("results %q, want %q", gs, want)
	}
}
