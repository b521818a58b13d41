package stage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// The hot path of a stage, on the record processor/internal/bench uses: 1 KiB of
// JSON with a unique event_id. Each piece alone first (decode, normalize,
// the 3-step CEL transform, encode), then the whole stage in process on
// kfake (build the output record, the per-record dead-letter checks,
// produce, commit), per record.
//
//	go test -run '^$' -bench . -benchmem ./processor/

func benchValue(i int) []byte {
	head := fmt.Sprintf(`{"event_id":"e-%09d","amount":%d,"customer_id":"c-%d","region":"eu","internal":"n-%d","pad":"`, i, i%1000, i%977, i)
	return []byte(head + strings.Repeat("x", 1024-len(head)-2) + `"}`)
}

// celSteps is processor/internal/bench's 3-step transform.
const celSteps = `    transform:
      - filter: 'value.amount >= 0'
      - set: { tier: 'value.amount > 500 ? "gold" : "std"', total_cents: 'value.amount * 100' }
      - drop: [internal]
`

func benchPipeline(b *testing.B) *transform.Pipeline {
	b.Helper()
	yaml := topologytest.Stage("127.0.0.1:9092", "s", 3, "    key: event_id\n"+celSteps)
	f, err := topology.Parse("bench.yaml", []byte(yaml), nil)
	if err != nil {
		b.Fatal(err)
	}
	ps, err := transform.Compile(f, transform.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	return ps["s"]
}

func perRecord(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkHotPath measures each piece the stage calls for one record.
func BenchmarkHotPath(b *testing.B) {
	raw := benchValue(42)
	js, err := serde.New(serde.JSON)
	if err != nil {
		b.Fatal(err)
	}
	p := benchPipeline(b)
	ctx := context.Background()
	decoded, err := transform.FromJSON(raw)
	if err != nil {
		b.Fatal(err)
	}
	outs, err := p.Apply(ctx, transform.Record{Value: decoded, Raw: raw})
	if err != nil || len(outs) != 1 {
		b.Fatalf("apply: %v, %d outputs", err, len(outs))
	}
	transformed := outs[0].Value

	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		measure(b, func() error { _, err := js.Decode(raw); return err })
	})
	b.Run("fromjson", func(b *testing.B) {
		// What the transform path reads a JSON record with: a check and
		// no decoding (fields are read as the steps need them).
		measure(b, func() error { _, err := transform.FromJSON(raw); return err })
	})
	b.Run("cel3", func(b *testing.B) {
		// Apply edits its input's value (set, drop): each round starts
		// from FromJSON, whose cost BenchmarkHotPath/fromjson shows.
		measure(b, func() error {
			v, _ := transform.FromJSON(raw)
			_, err := p.Apply(ctx, transform.Record{Value: v, Raw: raw})
			return err
		})
	})
	b.Run("encode", func(b *testing.B) {
		measure(b, func() error { _, err := js.Encode(transformed); return err })
	})
}

// measure runs one piece of BenchmarkHotPath: step once a round, with
// allocations and records/s reported; an error fails b.
func measure(b *testing.B, step func() error) {
	b.ReportAllocs()
	for b.Loop() {
		if err := step(); err != nil {
			b.Fatal(err)
		}
	}
	perRecord(b)
}

// BenchmarkStageKfake runs the whole stage in process against kfake, one
// transaction per 100 ms or 10,000 records as in production, and reports
// per input record. kfake runs in the same process, so the figures are a
// bound for the stage, not the stage alone: "copy" is the same loop on a
// raw GroupTransactSession with no decode, no transform and no checks, so
// the difference to "pass" is what the stage adds per record.
func BenchmarkStageKfake(b *testing.B) {
	for _, c := range []struct {
		name string
		cel  bool
		bad  bool // every record is dead-lettered (not JSON)
	}{
		{"pass", false, false},
		{"cel3", true, false},
		{"deadletter", false, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			seeds, n := kfakeInput(b, c.bad)
			var opts []stage.Option
			if c.cel {
				opts = append(opts, stage.WithTransform(benchPipeline(b)))
			}
			s, err := stage.New(stage.Config{
				Stage: "bench", InstanceID: "b1", Brokers: seeds,
				Input: "in", Output: "out", DeadLetter: "dlq", KeyField: "event_id",
				CommitInterval: 100 * time.Millisecond, MaxRecords: 10000,
			}, opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			go func() { done <- s.Run(ctx) }()
			for {
				st := s.Stats()
				if st.Produced+st.DeadLettered+st.Filtered >= int64(n) {
					break
				}
				select {
				case err := <-done:
					b.Fatalf("stage stopped: %v", err)
				case <-time.After(time.Millisecond):
				}
			}
			b.StopTimer()
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
		})
	}
	b.Run("copy", func(b *testing.B) {
		seeds, n := kfakeInput(b, false)
		sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics("in"),
			kgo.ConsumerGroup("copy"), kgo.TransactionalID("copy-1"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			b.Fatal(err)
		}
		defer sess.Close()
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for copied := 0; copied < n; {
			if err := sess.Begin(); err != nil {
				b.Fatal(err)
			}
			inTxn, started := 0, time.Now()
			for inTxn < 10000 && time.Since(started) < 100*time.Millisecond && copied+inTxn < n {
				fs := sess.PollRecords(ctx, 10000)
				fs.EachRecord(func(r *kgo.Record) {
					sess.Produce(ctx, &kgo.Record{Topic: "out", Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, nil)
					inTxn++
				})
			}
			committed, err := sess.End(ctx, kgo.TryCommit)
			if err != nil {
				b.Fatal(err)
			}
			if committed {
				copied += inTxn
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	})
}

// kfakeInput starts a kfake cluster with max(b.N, 1000) input records in
// 3 partitions and returns its address and the record count.
func kfakeInput(b *testing.B, bad bool) ([]string, int) {
	b.Helper()
	seeds := []string{topologytest.Cluster(b, 3)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	n := max(b.N, 1000)
	for i := range n {
		v := benchValue(i)
		if bad {
			v = v[:len(v)-1] // truncated JSON: a decode dead letter
		}
		cl.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "e-%09d", i), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	return seeds, n
}
