package state

import "testing"

// TestHoppingWindowCount holds the rule stateful.md states ("Windows and
// event time"): a record at event time t is in the windows [s, s+size)
// whose start s is a multiple of advance, which are the multiples in
// (t-size, t]; they number floor(size/advance), plus one when
// t mod advance < size mod advance. size/advance rounded up is wrong when
// advance does not divide size: 5m/3m puts a record at 2m in one window.
func TestHoppingWindowCount(t *testing.T) {
	const minute = 60_000
	pairs := [][2]int64{{5 * minute, 3 * minute}, {5 * minute, 1 * minute}, {5 * minute, 5 * minute}, {minute, 7}}
	for size := int64(1); size <= 24; size++ {
		for advance := int64(1); advance <= size; advance++ {
			pairs = append(pairs, [2]int64{size, advance})
		}
	}
	for _, p := range pairs {
		size, advance := p[0], p[1]
		a := &Aggregate{size: size, advance: advance}
		for _, ts := range eventTimes(size, advance) {
			got := a.Windows(ts)
			want := size / advance
			if ts%advance < size%advance {
				want++
			}
			if int64(len(got)) != want {
				t.Fatalf("size %d, advance %d, t %d: %d windows, the documented rule says %d", size, advance, ts, len(got), want)
			}
			for i, w := range got {
				if w.Start%advance != 0 || w.End != w.Start+size || ts < w.Start || ts >= w.End {
					t.Fatalf("size %d, advance %d, t %d: window %v does not start at a multiple of advance or hold t", size, advance, ts, w)
				}
				if i > 0 && w.Start != got[i-1].Start+advance {
					t.Fatalf("size %d, advance %d, t %d: windows %v skip a start", size, advance, ts, got)
				}
			}
		}
	}
	// The example the page gives: 5m/3m, two windows at 0m to 1m59.999s
	// past a multiple of 3m, one from 2m.
	a := &Aggregate{size: 5 * minute, advance: 3 * minute}
	for ts, want := range map[int64]int{0: 2, 2*minute - 1: 2, 2 * minute: 1, 3*minute - 1: 1, 3 * minute: 2} {
		if got := len(a.Windows(ts)); got != want {
			t.Errorf("5m/3m at %dms: %d windows, want %d", ts, got, want)
		}
	}
}

// eventTimes are times around several multiples of advance and of size,
// every time of the first few windows when they are small.
func eventTimes(size, advance int64) []int64 {
	var out []int64
	if size <= 64 {
		for ts := int64(0); ts < 3*size+2*advance; ts++ {
			out = append(out, ts)
		}
		return out
	}
	for _, base := range []int64{0, advance, 7 * advance, size, 3 * size, 1_767_225_600_000} {
		for _, d := range []int64{0, 1, advance - 1, size % advance, size%advance - 1, size%advance + 1, advance / 2} {
			if ts := base + d; ts >= 0 {
				out = append(out, ts)
			}
		}
	}
	return out
}
