//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
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
	in, out, dlq := uniqueName("bench_in"), uniqueName("bench_out"), uniqueName("bench_dlq")
	pad := strings.Repeat("x", 1024-60)
	benchInput(b, map[string]int32{in: 3, out: 3, dlq: 3}, in, func(i int) *kgo.Record {
		return &kgo.Record{Value: fmt.Appendf(nil, `{"event_id":"e-%09d","amount":%d,"pad":"%s"}`, i, i%1000, pad)}
	})
	name := uniqueName("bench")
	top := stagesTopology{stages: []stageYAML{{name: name, in: in, out: out, dlq: dlq, format: "json", key: "event_id", interval: "100ms", maxRecords: 10000}}}
	f, err := topology.Parse("bench.yaml", []byte(top.yaml(brokers(b))), noEnv)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	eng, err := processor.New(f, processor.InstanceID("b1"), processor.Guarantee(guarantee), processor.WithRegistry(reg))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	_, elapsed := benchRun(b, 5*time.Millisecond, eng.Run, func() bool {
		return gathered(b, reg, "exactly_stage_records_produced_total", name) >= float64(b.N)
	})
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(b.N)*1024/elapsed.Seconds()/1e6, "MB/s")
	b.ReportMetric(gathered(b, reg, "exactly_stage_transactions_committed_total", name), "txns")
}

// noEnv resolves no ${VAR}: the benchmarks' files name their brokers.
func noEnv(string) (string, bool) { return "", false }

// gathered returns the sum of metric family name over the series of stage
// in reg.
func gathered(b *testing.B, reg *prometheus.Registry, name, stage string) float64 {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" && l.GetValue() == stage {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// benchInput creates topics (name: partitions) and writes b.N records to
// in, record i from rec(i), all before the timer starts.
func benchInput(b *testing.B, topics map[string]int32, in string, rec func(i int) *kgo.Record) {
	b.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers(b)), kgo.DefaultProduceTopic(in), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for topic, parts := range topics {
		if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
			b.Fatal(err)
		}
	}
	for i := range b.N {
		cl.Produce(ctx, rec(i), func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchRun resets the timer and runs run (a stage's or a sink's Run) until
// finished reports true, asked every poll; then it stops the timer and run,
// and fails b if run stopped early or with an error. It returns when run
// started and how long it took to finish.
func benchRun(b *testing.B, poll time.Duration, run func(context.Context) error, finished func() bool) (started time.Time, elapsed time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	started = time.Now()
	go func() { done <- run(ctx) }()
	for !finished() {
		select {
		case err := <-done:
			b.Fatalf("stopped before it finished: %v", err)
		case <-time.After(poll):
		}
	}
	elapsed = time.Since(started)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return started, elapsed
}
