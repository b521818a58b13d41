package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

type recordedProgress struct {
	mu          sync.Mutex
	total, done int64
	totals      int
}

func (r *recordedProgress) SetTotal(n int64) {
	r.mu.Lock()
	r.total, r.totals = n, r.totals+1
	r.mu.Unlock()
}
func (r *recordedProgress) Add(n int64) { r.mu.Lock(); r.done += n; r.mu.Unlock() }

// Run tells its Progress the offsets to read (to each partition's last
// stable offset, transaction markers included) and reaches that total.
func TestRunReportsProgress(t *testing.T) {
	// The file names the kfake broker; EXACTLY_BROKERS (set by the local
	// test harness) would replace it with the real one.
	t.Setenv(topology.BrokersEnv, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"), kfake.SeedTopics(1, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]
	// 2 transactions of 5 records on each input partition: 2*(5+1) = 12
	// offsets each, 24 in all; out and dlq stay empty.
	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("progress-test"), kgo.DefaultProduceTopic("in"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 2 {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for part := range int32(2) {
			for i := range 5 {
				v := fmt.Appendf(nil, `{"event_id":"e-%d-%d"}`, part, i)
				if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: v}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	// The stage's group at offset 0, nothing processed: kfake, unlike
	// Kafka, answers an unknown group's offset fetch with an error.
	var offs kadm.Offsets
	offs.AddOffset("in", 0, 0, -1)
	if _, err := kadm.NewClient(p).CommitOffsets(ctx, "exactly-s", offs); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "t.yaml")
	src := topologytest.Stage(addr, "s", 2, "")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := topology.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordedProgress{}
	if _, err := Run(ctx, Config{Topology: f, EventID: "event_id", OpenTxnWait: time.Millisecond, Progress: rec}); err != nil {
		t.Fatal(err)
	}
	if rec.totals != 1 || rec.total != 24 || rec.done != 24 {
		t.Errorf("SetTotal called %d times, total %d, done %d; want once, 24, 24", rec.totals, rec.total, rec.done)
	}
}
