package verify

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

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
	addr := topologytest.Cluster(t, 2)
	// 2 transactions of 5 records on each input partition: 2*(5+1) = 12
	// offsets each, 24 in all; out and dlq stay empty.
	topologytest.CommitInput(ctx, t, addr, 2, 2, 5)
	// The stage's group at offset 0, nothing processed: kfake, unlike
	// Kafka, answers an unknown group's offset fetch with an error.
	var offs kadm.Offsets
	offs.AddOffset("in", 0, 0, -1)
	if _, err := topologytest.Admin(t, addr).CommitOffsets(ctx, "exactly-s", offs); err != nil {
		t.Fatal(err)
	}
	f := topologytest.Load(t, topologytest.Stage(addr, "s", 2, ""))
	rec := &recordedProgress{}
	if _, err := Run(ctx, Config{Topology: f, EventID: "event_id", OpenTxnWait: time.Millisecond, Progress: rec}); err != nil {
		t.Fatal(err)
	}
	if rec.totals != 1 || rec.total != 24 || rec.done != 24 {
		t.Errorf("SetTotal called %d times, total %d, done %d; want once, 24, 24", rec.totals, rec.total, rec.done)
	}
}
