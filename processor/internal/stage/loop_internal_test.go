package stage

import (
	"context"
	"testing"
	"time"
)

// The commit interval bounds how long a record waits; it is no fixed
// wait: a transaction ends as soon as it has read all the broker had.
func TestEndNow(t *testing.T) {
	const interval = 100 * time.Millisecond
	tests := []struct {
		name     string
		txn      txnState
		isolate  int
		polled   int
		at       time.Duration // since Begin
		want     string
		wantPoll time.Duration // how long the next poll may wait at most, when it stays open
	}{
		{name: "no transaction", txn: txnState{}, want: ""},
		{
			name: "caught up on a fetch, more already buffered",
			txn:  txnState{open: true, records: 10, caughtUp: true},
			// A poll that returned records fetched just now: what is
			// buffered behind them arrived later and goes in the next
			// transaction.
			polled: 10, at: time.Millisecond, want: endCaughtUp,
		},
		{
			name: "caught up, nothing more to read",
			txn:  txnState{open: true, records: 10, caughtUp: true},
			at:   time.Millisecond, want: endCaughtUp,
		},
		{
			name:   "caught up on records buffered while the last transaction ended",
			txn:    txnState{open: true, records: 10, caughtUp: true, buffered: true, lastEnd: 20 * time.Millisecond},
			polled: 10, at: time.Millisecond, want: "", wantPoll: 20 * time.Millisecond,
		},
		{
			name: "buffered records, then nothing behind them",
			txn:  txnState{open: true, records: 10, caughtUp: true, buffered: true},
			at:   20 * time.Millisecond, want: endCaughtUp,
		},
		{
			name: "buffered records, the End that buffered them outlasting the interval",
			txn:  txnState{open: true, records: 10, caughtUp: true, buffered: true, lastEnd: time.Second},
			// The interval still bounds the wait.
			polled: 10, at: time.Millisecond, want: "", wantPoll: interval - time.Millisecond,
		},
		{
			name:   "behind, within the interval",
			txn:    txnState{open: true, records: 10},
			polled: 10, at: 30 * time.Millisecond, want: "", wantPoll: interval - 30*time.Millisecond,
		},
		{
			name:   "behind, interval reached",
			txn:    txnState{open: true, records: 10},
			polled: 10, at: interval, want: endInterval,
		},
		{
			name:   "behind, record cap reached",
			txn:    txnState{open: true, records: 1000},
			polled: 10, at: time.Millisecond, want: endMax,
		},
		{
			name:    "isolating a refused record",
			txn:     txnState{open: true, records: 1},
			isolate: 2, polled: 1, at: time.Millisecond, want: endIsolate,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Stage{cfg: Config{CommitInterval: interval, MaxRecords: 1000}, isolate: tt.isolate}
			// Begin was tt.at ago: pollContext reads the clock.
			now := time.Now()
			tx := &txn{open: tt.txn.open, started: now.Add(-tt.at), records: tt.txn.records, caughtUp: tt.txn.caughtUp,
				buffered: tt.txn.buffered, lastEnd: tt.txn.lastEnd}
			if got := s.endNow(tx, tt.polled, now); got != tt.want {
				t.Fatalf("endNow = %q, want %q", got, tt.want)
			}
			if tt.want != "" || !tx.open {
				return
			}
			ctx, cancel := s.pollContext(context.Background(), tx)
			defer cancel()
			dl, ok := ctx.Deadline()
			if !ok {
				t.Fatal("the next poll has no deadline")
			}
			if wait := time.Until(dl); wait <= 0 || wait > tt.wantPoll {
				t.Errorf("the next poll may wait %s, want up to %s", wait, tt.wantPoll)
			}
		})
	}
}

// txnState is the part of a txn that endNow and pollContext read.
type txnState struct {
	open, caughtUp, buffered bool
	records                  int
	lastEnd                  time.Duration
}
