package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

func restoredAgg(t testing.TB, db *DB, cfg AggregateConfig, ps ...int32) *Aggregate {
	t.Helper()
	a := NewAggregate(db, cfg)
	restoreEmpty(t, a.Restore, ps...)
	return a
}

func TestAggregateWindows(t *testing.T) {
	for _, tc := range []struct {
		name          string
		size, advance time.Duration
		ts            int64
		want          []Window
	}{
		{"tumbling", time.Minute, time.Minute, 90_000, []Window{{60_000, 120_000}}},
		{"tumbling, at a start", time.Minute, time.Minute, 60_000, []Window{{60_000, 120_000}}},
		{"tumbling, last ms", time.Minute, time.Minute, 59_999, []Window{{0, 60_000}}},
		{"tumbling, before the epoch", time.Minute, time.Minute, -1, []Window{{-60_000, 0}}},
		{"hopping", 5 * time.Minute, time.Minute, 150_000, []Window{{-120_000, 180_000}, {-60_000, 240_000}, {0, 300_000}, {60_000, 360_000}, {120_000, 420_000}}},
		{"hopping, at a start", 3 * time.Minute, time.Minute, 180_000, []Window{{60_000, 240_000}, {120_000, 300_000}, {180_000, 360_000}}},
		{"hopping, size not a multiple", 90 * time.Second, time.Minute, 100_000, []Window{{60_000, 150_000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAggregate(openDB(t), AggregateConfig{Size: tc.size, Advance: tc.advance})
			if got := a.Windows(tc.ts); !slices.Equal(got, tc.want) {
				t.Fatalf("Windows(%d) = %v, want %v", tc.ts, got, tc.want)
			}
		})
	}
}

type aggEvent struct {
	key    string
	ts     int64
	values []any
}

// run adds events, each in its own committed transaction, and returns
// the results emitted (updates and closes) in order, and the late ones.
func runAgg(t *testing.T, a *Aggregate, cl *changelog, events []aggEvent) (results []Result, late []int) {
	t.Helper()
	for i, e := range events {
		tx := a.Begin(cl.emit)
		up, isLate, err := tx.Add(0, []byte(e.key), e.ts, e.values)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if isLate {
			late = append(late, i)
		}
		closed, err := tx.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(nil); err != nil {
			t.Fatal(err)
		}
		results = append(append(results, up...), closed...)
	}
	return results, late
}

func values(r Result) string {
	b, _ := json.Marshal(r.Values)
	return fmt.Sprintf("%s %d-%d %s", r.Key, r.Window.Start, r.Window.End, b)
}

func TestAggregateGraceAndClose(t *testing.T) {
	cfg := AggregateConfig{Size: time.Minute, Advance: time.Minute, Grace: 10 * time.Second, Kinds: []string{"count"}}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	got, late := runAgg(t, a, &cl, []aggEvent{
		{"a", 1_000, nil},
		{"b", 59_999, nil},
		{"a", 65_000, nil},  // window 1; stream time 65s: window 0 still open (grace to 70s)
		{"a", 30_000, nil},  // in grace: counted in window 0
		{"a", 70_000, nil},  // stream time 70s: window 0 closes
		{"a", 50_000, nil},  // late
		{"c", 200_000, nil}, // closes window 1
	})
	want := []string{`a 0-60000 [2]`, `b 0-60000 [1]`, `a 60000-120000 [2]`}
	var gotS []string
	for _, r := range got {
		gotS = append(gotS, values(r))
	}
	if !slices.Equal(gotS, want) || !slices.Equal(late, []int{5}) {
		t.Fatalf("results %q late %v; want %q late [5]", gotS, late, want)
	}
	if n := a.Size()[0]; n != 1 {
		t.Fatalf("entries = %d, want 1 (c's window)", n)
	}
	// Closed windows are tombstoned.
	if n := tombstones(cl.recs); n != 3 {
		t.Fatalf("tombstones = %d, want 3", n)
	}
}

func TestAggregateUpdateMode(t *testing.T) {
	cfg := AggregateConfig{Size: 2 * time.Minute, Advance: time.Minute, Kinds: []string{"count"}, Update: true}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	got, _ := runAgg(t, a, &cl, []aggEvent{{"k", 90_000, nil}, {"k", 100_000, nil}, {"k", 500_000, nil}})
	var gotS []string
	for _, r := range got {
		gotS = append(gotS, values(r))
	}
	want := []string{`k 0-120000 [1]`, `k 60000-180000 [1]`, `k 0-120000 [2]`, `k 60000-180000 [2]`, `k 420000-540000 [1]`, `k 480000-600000 [1]`}
	if !slices.Equal(gotS, want) {
		t.Fatalf("results %q, want %q", gotS, want)
	}
	if n := a.Size()[0]; n != 2 {
		t.Fatalf("entries = %d, want 2 (the closed windows are deleted without output)", n)
	}
}

func TestAggregateResults(t *testing.T) {
	kinds := []string{"count", "sum", "min", "max", "avg", "first", "last"}
	for _, tc := range []struct {
		name   string
		events []aggEvent // every event's value is used for every aggregation but count
		want   string
		errIs  error
		errAt  int
	}{
		{name: "integers", events: []aggEvent{{ts: 3, values: []any{int64(5)}}, {ts: 1, values: []any{int64(-2)}}, {ts: 2, values: []any{int64(4)}}},
			want: `[3,7,-2,5,2.33333333333333333333,-2,5]`},
		{name: "exact decimal sum", events: []aggEvent{{ts: 1, values: []any{0.1}}, {ts: 2, values: []any{0.2}}, {ts: 3, values: []any{0.7}}},
			want: `[3,1.0,0.1,0.7,0.33333333333333333333,0.1,0.7]`},
		{name: "mixed and exact avg", events: []aggEvent{{ts: 1, values: []any{int64(1)}}, {ts: 1, values: []any{2.5}}, {ts: 1, values: []any{uint64(3)}}, {ts: 1, values: []any{0.001}}},
			want: `[4,6.501,0.001,3,1.62525,1,0.001]`},
		{name: "nulls skipped", events: []aggEvent{{ts: 1, values: []any{nil}}, {ts: 2, values: []any{int64(7)}}},
			want: `[2,7,7,7,7.0,null,7]`},
		{name: "only nulls", events: []aggEvent{{ts: 1, values: []any{nil}}},
			want: `[1,null,null,null,null,null,null]`},
		{name: "big decimals keep every digit", events: []aggEvent{{ts: 1, values: []any{1e21}}, {ts: 1, values: []any{0.000001}}},
			want: `[2,1000000000000000000000.000001,0.000001,1e+21,500000000000000000000.0000005,1e+21,0.000001]`},
		// min and max write the extreme value as it came, as first and
		// last do (they rewrote -0.0 as 0.0 and 1e21 as
		// 1000000000000000000000.0); the first of equal values stays.
		{name: "min and max keep the value's text", events: []aggEvent{{ts: 1, values: []any{math.Copysign(0, -1)}}, {ts: 2, values: []any{0.0}}, {ts: 3, values: []any{int64(0)}}},
			want: `[3,0.0,-0.0,-0.0,0.0,-0.0,0]`},
		{name: "min and max of mixed ints and doubles", events: []aggEvent{{ts: 1, values: []any{int64(2)}}, {ts: 2, values: []any{1.5}}, {ts: 3, values: []any{2.0}}, {ts: 4, values: []any{1e21}}},
			want: `[4,1000000000000000000005.5,1.5,1e+21,250000000000000000001.375,2,1e+21]`},
		{name: "int overflow is an error, not a wrap", events: []aggEvent{{ts: 1, values: []any{int64(math.MaxInt64)}}, {ts: 2, values: []any{int64(1)}}},
			errIs: ErrOverflow, errAt: 1, want: `[1,9223372036854775807,9223372036854775807,9223372036854775807,9223372036854775807.0,9223372036854775807,9223372036854775807]`},
		{name: "uint beyond int64", events: []aggEvent{{ts: 1, values: []any{uint64(math.MaxUint64)}}}, errIs: ErrOverflow},
		{name: "not a number", events: []aggEvent{{ts: 1, values: []any{"12"}}}, errIs: ErrNotNumber},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := restoredAgg(t, openDB(t), AggregateConfig{Size: time.Minute, Advance: time.Minute, Kinds: kinds, Update: true}, 0)
			var cl changelog
			var last *Result
			for i, e := range tc.events {
				vals := make([]any, len(kinds))
				for j := range vals {
					vals[j] = e.values[0]
				}
				tx := a.Begin(cl.emit)
				up, _, err := tx.Add(0, []byte("k"), e.ts, vals)
				if tc.errIs != nil && i == tc.errAt {
					if !errors.Is(err, tc.errIs) {
						t.Fatalf("event %d: err %v, want %v", i, err, tc.errIs)
					}
					tx.Discard()
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Finish(); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(nil); err != nil {
					t.Fatal(err)
				}
				last = &up[0]
			}
			if tc.want == "" {
				return
			}
			if b, _ := json.Marshal(last.Values); string(b) != tc.want {
				t.Fatalf("results %s, want %s", b, tc.want)
			}
		})
	}
}

// TestAggregateAvgPastInt64: an average of ints whose running sum leaves
// the int64 range is still exact (a sum's own result could not be
// written, an average is written as a decimal anyway), and survives a
// restore from the changelog.
func TestAggregateAvgPastInt64(t *testing.T) {
	cfg := AggregateConfig{Size: time.Minute, Advance: time.Minute, Kinds: []string{"avg", "count"}, Update: true}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	got, _ := runAgg(t, a, &cl, []aggEvent{
		{"k", 1, []any{int64(math.MaxInt64), nil}},
		{"k", 2, []any{int64(math.MaxInt64), nil}},
		{"k", 3, []any{int64(1), nil}},
	})
	if v := values(got[len(got)-1]); v != `k 0-60000 [6148914691236517205.0,3]` {
		t.Fatalf("avg = %s, want (2*MaxInt64+1)/3 = 6148914691236517205.0", v)
	}
	b := NewAggregate(openDB(t), cfg)
	replay(t, b.Restore, &cl)
	got, _ = runAgg(t, b, &cl, []aggEvent{{"k", 4, []any{int64(-9223372036854775807), nil}}})
	if v := values(got[len(got)-1]); v != `k 0-60000 [2305843009213693952.0,4]` {
		t.Fatalf("avg after restore = %s, want (MaxInt64+1)/4", v)
	}
}

// TestAggregateAbortAndRestore: an aborted transaction leaves nothing; a
// store rebuilt from the changelog gives the same final results.
func TestAggregateAbortAndRestore(t *testing.T) {
	cfg := AggregateConfig{Size: time.Minute, Advance: time.Minute, Kinds: []string{"count", "sum"}}
	a := restoredAgg(t, openDB(t), cfg, 0)
	var cl changelog
	if _, _, err := a.Begin(cl.emit).Add(1, []byte("k"), 0, []any{nil, int64(1)}); !errors.Is(err, ErrNotRestored) {
		t.Fatalf("Add on an unrestored partition: %v", err)
	}
	runAgg(t, a, &cl, []aggEvent{{"k", 1_000, []any{nil, int64(10)}}, {"j", 2_000, []any{nil, int64(1)}}})

	// Aborted: a record and a jump in stream time that would close the window.
	var aborted changelog
	tx := a.Begin(aborted.emit)
	for _, ts := range []int64{3_000, 500_000} {
		if _, _, err := tx.Add(0, []byte("k"), ts, []any{nil, int64(100)}); err != nil {
			t.Fatal(err)
		}
	}
	closed, err := tx.Finish()
	if err != nil || len(closed) != 2 {
		t.Fatalf("Finish in the aborted transaction = %d results, %v; want 2", len(closed), err)
	}
	tx.Discard()
	if st, _ := a.StreamTime(0); st.UnixMilli() != 2_000 {
		t.Fatalf("stream time after the abort = %v", st.UnixMilli())
	}

	// Rebuild in another database from the committed changelog.
	a2 := NewAggregate(openDB(t), cfg)
	replay(t, a2.Restore, &cl)
	if n := a2.Size()[0]; n != 2 {
		t.Fatalf("restored entries = %d, want 2", n)
	}
	for _, st := range []*Aggregate{a, a2} {
		var cl2 changelog
		got, _ := runAgg(t, st, &cl2, []aggEvent{{"k", 4_000, []any{nil, int64(5)}}, {"z", 200_000, []any{nil, int64(0)}}})
		var gotS []string
		for _, r := range got {
			gotS = append(gotS, values(r))
		}
		if want := []string{`j 0-60000 [1,1]`, `k 0-60000 [2,15]`}; !slices.Equal(gotS, want) {
			t.Fatalf("results %q, want %q", gotS, want)
		}
	}
}
