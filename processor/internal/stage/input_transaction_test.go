package stage

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
)

// An input partition held by another producer's open transaction reads a
// lag of 0 (the lag stops at the last stable offset), but its open
// transaction series grows from when the stage first saw the last stable
// offset stuck below the high watermark, and falls to 0 once the
// transaction commits. A partition with nothing open reads 0 throughout.
func TestInputTransactionOpenSeries(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID("upstream"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ctx := context.Background()

	reg, m := promtest.Registered(t, NewMetrics)
	sm := stageMetrics{m: m}
	sm.bind("s")
	l := newLagTracker(sm, "in")
	l.assigned([]int32{0, 1})
	open := func() map[string]float64 {
		t.Helper()
		got := map[string]float64{}
		for _, s := range promtest.Family(t, reg, "exactly_stage_input_transaction_open_seconds") {
			for _, lb := range s.GetLabel() {
				if lb.GetName() == "partition" {
					got[lb.GetValue()] = s.GetGauge().GetValue()
				}
			}
		}
		return got
	}
	if got := open(); len(got) != 2 || got["0"] != 0 || got["1"] != 0 {
		t.Fatalf("at the assignment: %v, want 0 on both partitions", got)
	}

	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := txn.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	l.refresh(ctx, adm, "exactly-s")
	time.Sleep(100 * time.Millisecond) // the transaction stays open this long
	l.refresh(ctx, adm, "exactly-s")
	if got := open(); got["0"] < 0.1 || got["1"] != 0 {
		t.Fatalf("transaction open on partition 0: %v, want at least 0.1 s on 0 and 0 on 1", got)
	}
	if lag, _ := lagSeries(t, reg); lag["0"] != 0 {
		t.Fatalf("lag behind an open transaction: %v, want 0", lag["0"])
	}

	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	l.refresh(ctx, adm, "exactly-s")
	if got := open(); got["0"] != 0 {
		t.Fatalf("after the commit: %v, want 0 on partition 0", got)
	}

	l.stop()
	if got := open(); len(got) != 0 {
		t.Fatalf("after stop: %v, want no series", got)
	}
}
