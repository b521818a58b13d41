package state

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// first and last pick the same of the records with equal event times
// however the runs of their upstream partitions interleave: of one
// upstream partition, in its order; between them, by the partition's name.
func TestAggregateFirstLastTiesAcrossSources(t *testing.T) {
	type ev struct {
		src string
		v   string
		ts  int64
	}
	// Equal times at 10s (first) and 50s (last) from three sources.
	runs := [][]ev{
		{{"orders/1", "p1-a", 10_000}, {"orders/1", "p1-b", 10_000}, {"orders/1", "p1-c", 50_000}, {"orders/1", "p1-d", 50_000}},
		{{"orders/0", "p0-a", 10_000}, {"orders/0", "p0-b", 10_000}, {"orders/0", "p0-c", 50_000}, {"orders/0", "p0-d", 50_000}},
		{{"orders/2", "p2-a", 10_000}, {"orders/2", "p2-b", 50_000}, {"orders/2", "p2-c", 50_000}},
	}
	flush := []ev{{"orders/0", "z", 120_000}, {"orders/1", "z", 120_000}, {"orders/2", "z", 120_000}}
	interleavings := map[string][]ev{}
	for _, order := range [][]int{{0, 1, 2}, {2, 1, 0}, {1, 2, 0}} {
		var evs []ev
		for _, i := range order {
			evs = append(evs, runs[i]...)
		}
		interleavings[fmt.Sprint("runs ", order)] = append(evs, flush...)
	}
	var live []ev
	for i := range 4 {
		for _, r := range runs {
			if i < len(r) {
				live = append(live, r[i])
			}
		}
	}
	interleavings["round robin"] = append(live, flush...)

	const want = `k 0-60000 ["p0-a","p2-c"]`
	for name, evs := range interleavings {
		t.Run(name, func(t *testing.T) {
			a := restoredAgg(t, openDB(t), AggregateConfig{Size: time.Minute, Advance: time.Minute, Kinds: []string{"first", "last"}}, 0)
			a.SetWatermark(Watermark{Upstream: map[string]int32{"orders": 3}})
			var got []string
			tx := a.Begin((&changelog{}).emit)
			for _, e := range evs {
				if _, late, err := tx.AddFrom(0, e.src, []byte("k"), e.ts, []any{e.v, e.v}); err != nil || late {
					t.Fatalf("AddFrom(%+v) = late %v, %v", e, late, err)
				}
			}
			closed, err := tx.Finish()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range closed {
				got = append(got, values(r))
			}
			if !slices.Contains(got, want) {
				t.Fatalf("closed %v, want %s", got, want)
			}
		})
	}
}
