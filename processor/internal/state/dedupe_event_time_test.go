package state

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Behind a re-keying stage, three upstream partitions' records reach one
// input partition live (in time order) or from a backlog (one upstream
// partition's run after another's): dedupe passes and drops the same
// records either way. The copy of a at 3m is 3m after the first sighting,
// beyond the retention of 2m, so it passes, whether the stream time is then
// 2m30s (live) or held back by upstream partitions not yet heard from
// (backlog); the copy at 1m30s is within it, so it is dropped, whether it
// comes before the copy at 3m or after it.
func TestDedupeSameLiveAndFromBacklog(t *testing.T) {
	const s, m = time.Second, time.Minute
	type ev struct {
		src string
		id  string
		at  time.Duration
	}
	runs := [][]ev{
		{{"orders/0", "a", 0}, {"orders/0", "b", 1 * m}, {"orders/0", "a", 3 * m}, {"orders/0", "c", 5 * m}},
		{{"orders/1", "d", 1 * m}, {"orders/1", "e", 2*m + 30*s}, {"orders/1", "b", 2*m + 50*s}, {"orders/1", "f", 5 * m}},
		{{"orders/2", "a", 1*m + 30*s}, {"orders/2", "g", 2*m + 40*s}, {"orders/2", "d", 4 * m}, {"orders/2", "h", 5 * m}},
	}
	var backlog, live []ev
	for _, r := range runs {
		backlog = append(backlog, r...)
	}
	live = slices.Clone(backlog)
	slices.SortStableFunc(live, func(x, y ev) int { return int(x.at - y.at) })

	run := func(events []ev, per int) (passed, dropped []string) {
		d := NewDedupe(openDB(t), 2*time.Minute)
		d.SetWatermark(Watermark{Upstream: map[string]int32{"orders": 3}, Idle: time.Hour})
		restoreEmpty(t, d.Restore, 0)
		var cl changelog
		for i := 0; i < len(events); i += per {
			tx := d.Begin(cl.emit)
			for _, e := range events[i:min(i+per, len(events))] {
				dup, err := tx.CheckFrom(0, e.src, []byte(e.id), t0.Add(e.at))
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%s@%v", e.id, e.at)
				if dup {
					dropped = append(dropped, name)
					continue
				}
				tx.Remember()
				passed = append(passed, name)
			}
			if _, err := tx.Finish(1000); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(nil); err != nil {
				t.Fatal(err)
			}
		}
		slices.Sort(passed)
		slices.Sort(dropped)
		return passed, dropped
	}

	wantDropped := []string{"a@1m30s", "b@2m50s"}
	for _, tc := range []struct {
		name   string
		events []ev
		per    int // records per transaction
	}{
		{"live", live, 1}, {"live, batched", live, 5}, {"backlog", backlog, 1}, {"backlog, one transaction", backlog, len(backlog)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			passed, dropped := run(tc.events, tc.per)
			if !slices.Equal(dropped, wantDropped) {
				t.Errorf("dropped %v, want %v", dropped, wantDropped)
			}
			if len(passed)+len(dropped) != len(tc.events) {
				t.Errorf("passed %v", passed)
			}
		})
	}
}

// A changelog value of one number, as written before sightings had their
// own event time, restores as a sighting at that time, kept from it.
func TestDedupeRestoresPlainSighting(t *testing.T) {
	ms := func(d time.Duration) []byte { return fmt.Append(nil, t0.Add(d).UnixMilli()) }
	cl := &changelog{recs: []rec{
		{0, []byte("old"), ms(0)}, // seen and kept at t0
		{0, []byte("late"), append(append(ms(-time.Hour), ','), ms(0)...)}, // seen at t0-1h, kept from t0
		{0, nil, ms(-time.Millisecond)},                                    // stream time
	}}
	d := NewDedupe(openDB(t), time.Hour)
	replay(t, d.Restore, cl)
	for _, e := range []struct {
		id  string
		at  time.Duration // after t0
		dup bool
	}{
		{"old", time.Hour, true}, {"old", -time.Hour, true}, {"old", time.Hour + time.Millisecond, false},
		{"late", -time.Hour, true}, {"late", 0, true}, {"late", -2*time.Hour - time.Millisecond, false},
	} {
		tx := d.Begin((&changelog{}).emit)
		dup, err := tx.Check(0, []byte(e.id), t0.Add(e.at))
		if err != nil {
			t.Fatal(err)
		}
		tx.Discard()
		if dup != e.dup {
			t.Errorf("Check(%s at %v) = %v, want %v", e.id, e.at, dup, e.dup)
		}
	}
}
