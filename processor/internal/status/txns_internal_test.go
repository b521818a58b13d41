package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestHanging checks which open transactions are reported, with which
// start, timeout and reason, from what the leaders and the coordinators
// said.
func TestHanging(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ms := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	open := func(pid int64, lastWrite time.Duration) kadm.DescribedProducer {
		return kadm.DescribedProducer{Topic: "out", Partition: 1, ProducerID: pid, ProducerEpoch: 3, LastTimestamp: ms(lastWrite), CurrentTxnStartOffset: 40}
	}
	listed := kadm.ListedTransactions{
		"exactly-a-1": {TxnID: "exactly-a-1", ProducerID: 7, State: "Ongoing"},
		"exactly-b-1": {TxnID: "exactly-b-1", ProducerID: 8, State: "Ongoing"},
	}
	described := func(pid int64, started, timeout time.Duration) kadm.DescribedTransactions {
		return kadm.DescribedTransactions{"exactly-a-1": {TxnID: "exactly-a-1", ProducerID: pid, State: "Ongoing",
			StartTimestamp: ms(started), TimeoutMillis: int32(timeout.Milliseconds())}}
	}
	tests := []struct {
		name      string
		open      []kadm.DescribedProducer
		txns      kadm.DescribedTransactions
		after     time.Duration
		wantID    string // "" with wantN 1: unknown
		wantN     int
		wantOpen  time.Duration
		wantTO    int64
		wantWhy   string
		wantState string
	}{
		{name: "younger than its timeout", open: []kadm.DescribedProducer{open(7, time.Second)},
			txns: described(7, 20*time.Second, time.Minute)},
		{name: "older than its timeout", open: []kadm.DescribedProducer{open(7, time.Second)},
			txns: described(7, 90*time.Second, time.Minute), wantN: 1, wantID: "exactly-a-1", wantOpen: 90 * time.Second,
			wantTO: 60000, wantWhy: "open longer than its timeout", wantState: "Ongoing"},
		{name: "older than --hanging-after, within its timeout", open: []kadm.DescribedProducer{open(7, time.Second)},
			txns: described(7, 20*time.Second, time.Hour), after: 10 * time.Second, wantN: 1, wantID: "exactly-a-1",
			wantOpen: 20 * time.Second, wantTO: 3600000, wantWhy: "open longer than 10s", wantState: "Ongoing"},
		{name: "younger than --hanging-after", open: []kadm.DescribedProducer{open(7, time.Second)},
			txns: described(7, 5*time.Second, time.Hour), after: 10 * time.Second},
		{name: "--hanging-after beyond its timeout", open: []kadm.DescribedProducer{open(7, time.Second)},
			txns: described(7, 2*time.Minute, time.Minute), after: 10 * time.Second, wantN: 1, wantID: "exactly-a-1",
			wantOpen: 2 * time.Minute, wantTO: 60000, wantWhy: "open longer than its timeout", wantState: "Ongoing"},
		{name: "unknown to every coordinator, recent", open: []kadm.DescribedProducer{open(99, time.Minute)}},
		{name: "unknown to every coordinator, older than the longest timeout", open: []kadm.DescribedProducer{open(99, 20*time.Minute)},
			wantN: 1, wantOpen: 20 * time.Minute, wantWhy: "no coordinator knows"},
		{name: "its ID now has another producer ID", open: []kadm.DescribedProducer{open(7, 3*time.Second)},
			txns: described(70, time.Second, time.Minute), after: time.Second, wantN: 1, wantOpen: 3 * time.Second, wantWhy: "now has producer ID 70"},
		{name: "describe failed for its ID", open: []kadm.DescribedProducer{open(7, 3*time.Second)},
			txns:  kadm.DescribedTransactions{"exactly-a-1": {TxnID: "exactly-a-1", Err: kerr.CoordinatorNotAvailable}},
			after: time.Second, wantN: 1, wantOpen: 3 * time.Second, wantWhy: "did not describe it: COORDINATOR_NOT_AVAILABLE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hanging(tt.open, listed, tt.txns, now, tt.after)
			if len(got) != tt.wantN {
				t.Fatalf("got %d transactions, want %d: %+v", len(got), tt.wantN, got)
			}
			if tt.wantN == 0 {
				return
			}
			g := got[0]
			if g.Topic != "out" || g.Partition != 1 || g.StartOffset != 40 || g.ProducerEpoch != 3 {
				t.Errorf("partition or offset wrong: %+v", g)
			}
			wantID := tt.wantID
			if wantID == "" && g.ProducerID == 7 {
				wantID = "exactly-a-1" // listed, but its description does not match
			}
			if g.TransactionalID != wantID || g.Open() != tt.wantOpen || g.TimeoutMs != tt.wantTO || g.State != tt.wantState {
				t.Errorf("got id %q open %s timeout %d state %q, want %q %s %d %q", g.TransactionalID, g.Open(), g.TimeoutMs, g.State,
					wantID, tt.wantOpen, tt.wantTO, tt.wantState)
			}
			if !strings.Contains(g.Reason, tt.wantWhy) {
				t.Errorf("reason %q does not say %q", g.Reason, tt.wantWhy)
			}
		})
	}
}

func TestWriteHangingTable(t *testing.T) {
	txns := []OpenTxn{
		{Topic: "out", Partition: 2, TransactionalID: "exactly-clean-it-1", ProducerID: 1234, ProducerEpoch: 5, StartOffset: 900,
			OpenMs: 95_400, TimeoutMs: 60_000, State: "Ongoing", Reason: "open longer than its timeout"},
		{Topic: "in", Partition: 0, ProducerID: 77, StartOffset: 3, OpenMs: 1_000_000, Reason: "no coordinator knows this transaction"},
	}
	tests := []struct {
		name  string
		txns  []OpenTxn
		after time.Duration
		want  []string
	}{
		{name: "none", want: []string{"TRANSACTIONS open longer than their timeout: none"}},
		{name: "none past a threshold", after: 30 * time.Second, want: []string{"TRANSACTIONS open longer than 30s: none"}},
		{name: "two", txns: txns, want: []string{
			"TRANSACTIONS open longer than their timeout: 2",
			"TOPIC/PARTITION", "TRANSACTIONAL ID", "PRODUCER ID",
			"out/2", "exactly-clean-it-1", "1234", "900", "1m35s", "1m0s", "Ongoing",
			"in/0", "16m40s", "-",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteHangingTable(&b, tt.txns, tt.after); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("table lacks %q:\n%s", w, b.String())
				}
			}
			if got, want := strings.Count(b.String(), "\n"), len(tt.txns)+min(len(tt.txns), 1)+1; got != want {
				t.Errorf("got %d lines, want %d:\n%s", got, want, b.String())
			}
		})
	}
}
