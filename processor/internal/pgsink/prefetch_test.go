package pgsink

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// landed decides what becomes of the batch polled beside a write: kept,
// with the positions that write stored as its start, only when it
// committed; its lost partitions' records dropped; dropped whole, with
// the last poll's fetches, when the write did not commit.
func TestLanded(t *testing.T) {
	rec := func(p int32, off int64) *kgo.Record { return &kgo.Record{Topic: "in", Partition: p, Offset: off} }
	beside := func(s *Sink) *batch {
		b := newBatch()
		b.beside = true
		s.mu.Lock()
		s.pos = map[int32]position{0: {stored: true, next: 5, from: 5}, 1: {stored: true, next: 7, from: 7}}
		s.mu.Unlock()
		for _, r := range []*kgo.Record{rec(0, 10), rec(1, 20), rec(0, 11)} {
			s.add(b, r)
		}
		return b
	}
	written := func(committed bool, err error) *inflight {
		w := &inflight{b: newBatch(), done: make(chan struct{}), err: err}
		w.b.committed = committed
		close(w.done)
		return w
	}
	fetches := kgo.Fetches{{}}

	t.Run("committed", func(t *testing.T) {
		s := newTestSink(t, nil)
		b := beside(s)
		if b.start[0].next != 5 {
			t.Fatalf("start before landing %+v", b.start[0])
		}
		// The write stored partition 0 at 10; partition 1 was lost.
		s.mu.Lock()
		s.pos[0] = position{stored: true, next: 10, from: 10}
		delete(s.pos, 1)
		s.mu.Unlock()
		got, f, err := s.landed(written(true, nil), b, fetches)
		if err != nil || got != b || len(f) != 1 {
			t.Fatalf("landed: %v, same batch %v, %d fetches", err, got == b, len(f))
		}
		if b.beside || b.start[0] != (position{stored: true, next: 10, from: 10}) {
			t.Errorf("start %+v beside %v", b.start[0], b.beside)
		}
		if len(b.recs) != 2 || b.recs[0].Offset != 10 || b.recs[1].Offset != 11 || len(b.order) != 1 || b.order[0] != 0 {
			t.Errorf("records %d, order %v: want partition 0's two", len(b.recs), b.order)
		}
		if _, ok := b.next[1]; ok {
			t.Errorf("lost partition 1 still has a next offset")
		}
	})
	t.Run("every partition lost", func(t *testing.T) {
		s := newTestSink(t, nil)
		b := beside(s)
		s.mu.Lock()
		s.pos = map[int32]position{}
		s.mu.Unlock()
		got, _, err := s.landed(written(true, nil), b, fetches)
		if err != nil || got.open || len(got.recs) != 0 || len(got.order) != 0 {
			t.Fatalf("landed: %v, %+v", err, got)
		}
	})
	t.Run("not committed", func(t *testing.T) {
		s := newTestSink(t, nil)
		b := beside(s)
		got, f, err := s.landed(written(false, nil), b, fetches)
		if err != nil || got == b || got.open || len(got.recs) != 0 || f != nil {
			t.Fatalf("landed: %v, same batch %v, %d records, fetches %v", err, got == b, len(got.recs), f)
		}
	})
	t.Run("failed", func(t *testing.T) {
		s := newTestSink(t, nil)
		boom := errors.New("boom")
		if _, _, err := s.landed(written(false, boom), beside(s), fetches); !errors.Is(err, boom) {
			t.Fatalf("landed: %v, want the write's error", err)
		}
	})
}

func TestPrefetchSpan(t *testing.T) {
	for _, tc := range []struct {
		interval, session, want time.Duration
	}{
		{100 * time.Millisecond, 45 * time.Second, time.Second},
		{time.Second, 45 * time.Second, 4500 * time.Millisecond},
		{200 * time.Millisecond, 6 * time.Second, 600 * time.Millisecond},
	} {
		if got := prefetchSpan(Config{CommitInterval: tc.interval, SessionTimeout: tc.session}); got != tc.want {
			t.Errorf("interval %s, session %s: %s, want %s", tc.interval, tc.session, got, tc.want)
		}
	}
}
