package redrive

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

type recordedProgress struct {
	mu           sync.Mutex
	totals       int
	total, added int64
}

func (p *recordedProgress) SetTotal(n int64) { p.mu.Lock(); p.totals++; p.total = n; p.mu.Unlock() }
func (p *recordedProgress) Add(n int64)      { p.mu.Lock(); p.added += n; p.mu.Unlock() }

// Run on an embedded cluster: every dead letter is redriven once to the
// input, and the progress it reports adds up to the offsets it had to
// handle.
func TestRunRedrivesAndReportsProgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 5
	for i := range n {
		in := &kgo.Record{Topic: "in", Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i), Value: []byte(`{"n":1}`), Timestamp: time.Now()}
		dl := deadLetter("s", in)
		dl.Topic, dl.Partition = "dlq", 0
		if err := cl.ProduceSync(ctx, dl).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	prog := &recordedProgress{}
	rep, err := Run(ctx, Config{Stage: "s", DeadLetter: "dlq", Input: "in", Brokers: seeds, MaxRedrives: DefaultMaxRedrives, Progress: prog})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Incomplete != "" {
		t.Fatalf("incomplete: %s", rep.Incomplete)
	}
	if prog.totals != 1 || prog.total != n || prog.added != n {
		t.Errorf("progress: SetTotal %d times, total %d, added %d; want once, %d, %d", prog.totals, prog.total, prog.added, n, n)
	}
	// The input gained each record once, with its redrive count.
	rc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("in"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	keys := map[string]int{}
	for len(keys) < n && ctx.Err() == nil {
		rc.PollFetches(ctx).EachRecord(func(r *kgo.Record) { keys[string(r.Key)]++ })
	}
	for i := range n {
		if k := fmt.Sprintf("k%d", i); keys[k] != 1 {
			t.Errorf("input holds %s %d times, want once (all: %v)", k, keys[k], keys)
		}
	}
}
