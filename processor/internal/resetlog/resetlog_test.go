package resetlog

import (
	"reflect"
	"testing"
)

// A fetch whose log start is past the offset the reader expected skipped
// the offsets in between; a gap of aborted records or compaction (log
// start not past the expected offset) is none, and a partition never
// expected is not judged.
func TestWatchPolled(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		expect                int64 // -1: none; -2: no stored position (ExpectFirst)
		logStart, first, last int64
		want                  Partition
		ok                    bool
	}{
		{name: "contiguous", expect: 5, logStart: 0, first: 5, last: 9},
		{name: "aborted records skipped", expect: 5, logStart: 2, first: 9, last: 12},
		{name: "below the log start", expect: 5, logStart: 12, first: 12, last: 20, want: Partition{Partition: 0, From: 5, To: 12}, ok: true},
		{name: "no position and a log start past 0", expect: 0, logStart: 7, first: 7, last: 8, want: Partition{Partition: 0, From: 0, To: 7}, ok: true},
		{name: "log start passed after the fetch", expect: 5, logStart: 30, first: 20, last: 25, want: Partition{Partition: 0, From: 5, To: 20}, ok: true},
		{name: "not expected", expect: -1, logStart: 12, first: 12, last: 20},
		{name: "first start", expect: -2, logStart: 7, first: 7, last: 8, want: Partition{Partition: 0, From: 0, To: 7, NoPosition: true}, ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w Watch
			switch {
			case tc.expect >= 0:
				w.Expect(0, tc.expect)
			case tc.expect == -2:
				w.ExpectFirst(0)
			}
			got, ok := w.Polled(0, tc.logStart, tc.first, tc.last)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("Polled = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
			// The next fetch goes on from there: nothing more is found.
			if _, again := w.Polled(0, tc.logStart, tc.last+1, tc.last+3); again {
				t.Fatal("the range was found twice")
			}
		})
	}
}

func TestRanges(t *testing.T) {
	e := func(cause, name string, ps ...Partition) Entry {
		return Entry{Kind: "stage", Name: name, Topic: "in", TopicID: "id", Cause: cause, Partitions: ps}
	}
	got := Ranges([]Entry{
		e(CauseDeletedUnread, "clean", Partition{Partition: 0, From: 5, To: 12}),
		e(CauseDeletedUnread, "clean", Partition{Partition: 0, From: 10, To: 15}, Partition{Partition: 1, From: 0, To: 3}),
		e(CauseDeletedUnread, "clean", Partition{Partition: 0, From: 20, To: 22}),
		e("", "clean", Partition{Partition: 0, From: 30, To: 40}),                 // a reset
		e(CauseDeletedUnread, "other", Partition{Partition: 0, From: 30, To: 40}), // another stage
		e(CausePastRetention, "clean", Partition{Partition: 0, From: 50, To: 60}), // another cause
		{Kind: "stage", Name: "clean", Topic: "in", TopicID: "old", Cause: CauseDeletedUnread, Partitions: []Partition{{Partition: 0, From: 70, To: 80}}},
	}, CauseDeletedUnread, Entry{Kind: "stage", Name: "clean", Topic: "in", TopicID: "id"})
	want := map[int32][]Partition{0: {{Partition: 0, From: 5, To: 15}, {Partition: 0, From: 20, To: 22}}, 1: {{Partition: 1, From: 0, To: 3}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Ranges = %v, want %v", got, want)
	}
}

// A range below a first start is not merged with a range below a
// position: verify may drop the one and must keep the other.
func TestRangesKeepFirstStartsApart(t *testing.T) {
	e := Entry{Kind: "sink", Name: "s", Topic: "in", TopicID: "id", Cause: CauseDeletedUnread, Partitions: []Partition{
		{Partition: 0, From: 0, To: 6, NoPosition: true}, {Partition: 0, From: 5, To: 12},
	}}
	got := Ranges([]Entry{e}, CauseDeletedUnread, Entry{Kind: "sink", Name: "s", Topic: "in", TopicID: "id"})
	want := map[int32][]Partition{0: {{Partition: 0, From: 0, To: 6, NoPosition: true}, {Partition: 0, From: 5, To: 12}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Ranges = %v, want %v", got, want)
	}
}
