package pgsink

import (
	"context"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
)

// A sink's lag series outlive a lost membership and a client closed for a
// new one, counted from the last position, until an assignment takes the
// partition back or leaves it out; a rebalance's revocation drops them.
func TestLagSeriesHeldUntilTheNextAssignment(t *testing.T) {
	reg, m := promtest.Registered(t, NewMetrics)
	s, err := New(testConfig(), WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	lag := func() (map[string]float64, int) {
		out := map[string]float64{}
		for _, ms := range promtest.Family(t, reg, "exactly_sink_consumer_lag_records") {
			for _, l := range ms.GetLabel() {
				if l.GetName() == "partition" {
					out[l.GetValue()] = ms.GetGauge().GetValue()
				}
			}
		}
		return out, len(promtest.Family(t, reg, "exactly_sink_consumer_lag_age_seconds"))
	}
	own := func(parts ...int32) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, p := range parts {
			s.lag.assigned(p)
			s.pos[p] = position{stored: true, next: 10}
			s.ends[p] = ends{lastStable: 15, at: time.Now()}
			s.publishLag(p)
		}
		s.lag.dropHeld(s)
	}
	in := func(parts ...int32) map[string][]int32 { return map[string][]int32{"in": parts} }
	ctx := context.Background()

	own(0, 1)
	if got, ages := lag(); len(got) != 2 || got["0"] != 5 || ages != 2 {
		t.Fatalf("owned: lag %v, %d age series; want 5 on 0 and 1", got, ages)
	}
	// Lost: the series stay, and follow the input.
	s.lose(ctx, nil, in(0, 1))
	s.mu.Lock()
	s.lag.refresh(s, topicState{start: map[int32]int64{0: 0, 1: 0}, lastStb: map[int32]int64{0: 40, 1: 15}})
	s.mu.Unlock()
	if got, ages := lag(); len(got) != 2 || got["0"] != 30 || ages != 2 {
		t.Fatalf("lost: lag %v, %d age series; want 30 on 0, 5 on 1", got, ages)
	}
	// The next assignment takes 0 back and leaves 1 out.
	own(0)
	if got, ages := lag(); len(got) != 1 || ages != 1 {
		t.Fatalf("assigned 0 again: lag %v, %d age series; want partition 0 alone", got, ages)
	}
	// A client closed for a new one holds too; an empty assignment drops.
	s.holdLag()
	s.drop(ctx, nil, in(0))
	if got, _ := lag(); len(got) != 1 {
		t.Fatalf("client closed: lag %v; want partition 0 held", got)
	}
	s.assignedNone(ctx, nil, in())
	if got, ages := lag(); len(got) != 0 || ages != 0 {
		t.Fatalf("assigned none: lag %v, %d age series; want none", got, ages)
	}
	// A rebalance's revocation drops at once.
	own(2)
	s.drop(ctx, nil, in(2))
	if got, ages := lag(); len(got) != 0 || ages != 0 {
		t.Fatalf("revoked: lag %v, %d age series; want none", got, ages)
	}
}
