//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
)

// BenchmarkStage measures one stage instance on the real broker: 1 KiB JSON
// records, keyed by event ID, 100 ms commit interval, 3 partitions. The
// input is written before the timer starts; the timer stops when the stage
// has committed every output. Run it with a fixed count, e.g.
//
//	go test -tags integration -run '^$' -bench BenchmarkStage -benchtime 200000x ./integration/
//
// It runs exactly-once and, as the baseline, at-least-once.
func BenchmarkStage(b *testing.B) {
	for _, g := range []string{processor.ExactlyOnce, processor.AtLeastOnce} {
		b.Run(g, func(b *testing.B) { benchStage(b, g) })
	}
}

func benchStage(b *testing.B, guarantee string) {
	ctx := context.Background()
	seeds := []string{brokers(b)}
	in, out, dlq := uniqueName("bench_in"), uniqueName("bench_out"), uniqueName("bench_dlq")
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(in), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range []string{in, out, dlq} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, t); err != nil {
			b.Fatal(err)
		}
	}
	pad := strings.Repeat("x", 1024-60)
	for i := range b.N {
		v := fmt.Sprintf(`{"event_id":"e-%09d","amount":%d,"pad":"%s"}`, i, i%1000, pad)
		cl.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}

	s, err := processor.New(processor.Config{
		Stage: uniqueName("bench"), InstanceID: "b1", Brokers: seeds,
		Input: in, Output: out, DeadLetter: dlq, KeyField: "event_id", Guarantee: guarantee,
		CommitInterval: 100 * time.Millisecond, MaxRecords: 10000,
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() { done <- s.Run(runCtx) }()
	for s.Stats().Produced < int64(b.N) {
		select {
		case err := <-done:
			b.Fatalf("stage stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	st := s.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(b.N)*1024/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(float64(st.Committed), "txns")
}
