package stage_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/topology"
)

// fetchSizes records the sizes the Fetch requests to a kfake cluster ask
// for: the request's MaxBytes and each partition's PartitionMaxBytes, by
// value.
type fetchSizes struct {
	mu              sync.Mutex
	requests        int
	maxBytes, parts map[int32]int
}

func watchFetchSizes(t *testing.T, c *kfake.Cluster) *fetchSizes {
	t.Helper()
	fs := &fetchSizes{maxBytes: map[int32]int{}, parts: map[int32]int{}}
	c.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.FetchRequest)
		if req.SessionEpoch == -1 {
			return nil, nil, false // closes the fetch session (KIP-227) as the client closes: no fetch
		}
		fs.mu.Lock()
		defer fs.mu.Unlock()
		fs.requests++
		fs.maxBytes[req.MaxBytes]++
		for _, tp := range req.Topics {
			for _, p := range tp.Partitions {
				fs.parts[p.PartitionMaxBytes]++
			}
		}
		return nil, nil, false // the cluster answers as usual
	})
	return fs
}

// The stage's consumer asks for fetches of the configured sizes, 2 MiB
// and 1 MiB of one partition by default, in both guarantees: these bound
// the memory its input takes (franz-go's own default is 50 MiB).
func TestStageFetchSizes(t *testing.T) {
	tests := []struct {
		name                string
		guarantee           string
		maxBytes, partBytes int32
		wantMax, wantPart   int32
	}{
		{"defaults, exactly-once", stage.ExactlyOnce, 0, 0, 2 << 20, 1 << 20},
		{"defaults, at-least-once", stage.AtLeastOnce, 0, 0, 2 << 20, 1 << 20},
		{"set", stage.ExactlyOnce, 64 << 10, 16 << 10, 64 << 10, 16 << 10},
		{"fetch max below the partition default", stage.ExactlyOnce, 512 << 10, 0, 512 << 10, 512 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, inTopic, outTopic), kfake.SeedTopics(1, dlqTopic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			seeds := c.ListenAddrs()
			bad := produceInput(t, seeds, 300)
			fs := watchFetchSizes(t, c)
			s, err := stage.New(stage.Config{
				Stage: "clean", InstanceID: "i1", Brokers: seeds, Guarantee: tt.guarantee,
				Input: inTopic, Output: outTopic, DeadLetter: dlqTopic, KeyField: "event_id",
				CommitInterval: 20 * time.Millisecond, FetchMaxBytes: tt.maxBytes, MaxPartitionFetchBytes: tt.partBytes,
			})
			if err != nil {
				t.Fatal(err)
			}
			if cfg := s.Config(); cfg.FetchMaxBytes != tt.wantMax || cfg.MaxPartitionFetchBytes != tt.wantPart {
				t.Errorf("Config: fetch max bytes %d, max partition fetch bytes %d; want %d, %d", cfg.FetchMaxBytes, cfg.MaxPartitionFetchBytes, tt.wantMax, tt.wantPart)
			}
			if err := runUntil(t, s, int64(300+bad)); err != nil {
				t.Fatal(err)
			}
			fs.mu.Lock()
			defer fs.mu.Unlock()
			if fs.requests == 0 {
				t.Fatal("no fetch request was seen")
			}
			if len(fs.maxBytes) != 1 || fs.maxBytes[tt.wantMax] == 0 {
				t.Errorf("fetch requests' MaxBytes: %v (count by value), want all %d", fs.maxBytes, tt.wantMax)
			}
			if len(fs.parts) != 1 || fs.parts[tt.wantPart] == 0 {
				t.Errorf("fetch partitions' PartitionMaxBytes: %v (count by value), want all %d", fs.parts, tt.wantPart)
			}
		})
	}
}

// bufferedBytes tracks the bytes a producer holds unacknowledged, as
// franz-go counts them for MaxBufferedBytes (key, value and headers).
type bufferedBytes struct {
	mu        sync.Mutex
	now, peak int64
}

func recordBytes(r *kgo.Record) int64 {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

func (b *bufferedBytes) OnProduceRecordBuffered(r *kgo.Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now += recordBytes(r)
	b.peak = max(b.peak, b.now)
}

func (b *bufferedBytes) OnProduceRecordUnbuffered(r *kgo.Record, _ error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.now -= recordBytes(r)
}

// A transaction whose outputs are several times the producer's buffer
// (here 3000 outputs of about 1 KiB, in one transaction, against 1 MiB),
// on a broker slower than the stage, waits for room instead of holding
// them all, and still commits every output once.
func TestStageMaxBufferedBytes(t *testing.T) {
	const n = 3000
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, inTopic, outTopic), kfake.SeedTopics(1, dlqTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	cl := newClient(t, seeds)
	var recs []*kgo.Record
	pad := strings.Repeat("x", 1000)
	for i := range n {
		v := fmt.Sprintf(`{"event_id":"e-%d","pad":%q}`, i, pad)
		recs = append(recs, &kgo.Record{Topic: inTopic, Key: []byte(strconv.Itoa(i)), Value: []byte(v)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A slow broker: each produce is answered 20 ms late, so that the
	// outputs come faster than they are acknowledged.
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(20 * time.Millisecond) })
		return nil, nil, false
	})
	hook := &bufferedBytes{}
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds, Input: inTopic, Output: outTopic, DeadLetter: dlqTopic, KeyField: "event_id",
		CommitInterval: 5 * time.Second, MaxRecords: 10000, MaxBufferedBytes: 1 << 20,
	}, stage.WithKafkaOptions(kgo.WithHooks(hook)))
	if err != nil {
		t.Fatal(err)
	}
	if err := runUntil(t, s, n); err != nil {
		t.Fatal(err)
	}
	seen := keyCounts(drain(t, seeds, outTopic))
	for i := range n {
		if k := "e-" + strconv.Itoa(i); seen[k] != 1 {
			t.Fatalf("event %s is in the output %d times, want 1", k, seen[k])
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	// The hooks of two records can run out of the order franz-go counted
	// them in: one record of slack.
	if hook.peak > 1<<20+2048 {
		t.Errorf("the producer held %d bytes unacknowledged, more than its 1 MiB bound", hook.peak)
	}
	if hook.peak < 1<<19 {
		t.Errorf("the producer held at most %d bytes: the test did not fill its buffer", hook.peak)
	}
}

// StageConfig carries a stage's fetch sizes and producer buffer from its
// topology file, written or defaulted.
func TestStageConfigMemorySettings(t *testing.T) {
	const head = `version: 1
kafka: { brokers: ["k:9092"] }
topics: [ { name: in, partitions: 3 }, { name: out, partitions: 3 }, { name: dlq, partitions: 1 } ]
stages:
  - name: s
    input: { topic: in }
    output: { topic: out }
    dead_letter: { topic: dlq }
`
	tests := []struct {
		name                string
		fields              string
		maxBytes, partBytes int32
		bufferedBytes       int
	}{
		{"defaults", "", 2 << 20, 1 << 20, 4 << 20},
		{"written", "    fetch_max_bytes: 8388608\n    max_partition_fetch_bytes: 1048576\n    max_buffered_bytes: 16777216\n", 8 << 20, 1 << 20, 16 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := topology.Parse("t.yaml", []byte(head+tt.fields), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			st, _ := f.Stage("s")
			cfg := stage.StageConfig(f, st, "i1")
			if cfg.FetchMaxBytes != tt.maxBytes || cfg.MaxPartitionFetchBytes != tt.partBytes || cfg.MaxBufferedBytes != tt.bufferedBytes {
				t.Errorf("StageConfig: fetch max bytes %d, max partition fetch bytes %d, max buffered bytes %d; want %d, %d, %d",
					cfg.FetchMaxBytes, cfg.MaxPartitionFetchBytes, cfg.MaxBufferedBytes, tt.maxBytes, tt.partBytes, tt.bufferedBytes)
			}
			s, err := stage.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Config(); got.FetchMaxBytes != tt.maxBytes || got.MaxBufferedBytes != tt.bufferedBytes {
				t.Errorf("New changed the settings: %+v", got)
			}
		})
	}
}

// A record whose output is larger than the producer's buffer is refused by
// franz-go before it is buffered, and its promise answers after Flush
// returns. The transaction must not commit on that record's input offset:
// the record ends as a dead letter (here a size-bounded envelope, since
// its full dead letter is as large), the small one in the output, in both
// guarantees.
func TestStageRecordLargerThanProducerBuffer(t *testing.T) {
	for _, guarantee := range guarantees {
		t.Run(guarantee, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, inTopic, outTopic, dlqTopic),
				kfake.BrokerConfigs(map[string]string{"message.max.bytes": "8000000"}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			seeds := c.ListenAddrs()
			big := fmt.Sprintf(`{"event_id":"big","s":%q}`, strings.Repeat("x", 1_500_000))
			cl := newClient(t, seeds, kgo.ProducerBatchMaxBytes(4_000_000))
			if err := cl.ProduceSync(context.Background(),
				&kgo.Record{Topic: inTopic, Key: []byte("big"), Value: []byte(big)},
				&kgo.Record{Topic: inTopic, Key: []byte("small"), Value: []byte(`{"event_id":"small"}`)},
			).FirstErr(); err != nil {
				t.Fatal(err)
			}
			s, err := stage.New(stage.Config{
				Stage: "clean", InstanceID: "i1", Brokers: seeds, Guarantee: guarantee,
				Input: inTopic, Output: outTopic, DeadLetter: dlqTopic, KeyField: "event_id",
				CommitInterval: 50 * time.Millisecond, MaxBufferedBytes: 1 << 20,
				FetchMaxBytes: 4 << 20, MaxPartitionFetchBytes: 4 << 20,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := runUntilStats(t, s, func(st stage.Stats) bool { return st.Produced+st.DeadLettered >= 2 }); err != nil {
				t.Fatal(err)
			}
			if outs := keyCounts(drain(t, seeds, outTopic)); len(outs) != 1 || outs["small"] != 1 {
				t.Errorf("output keys %v, want only small, once", outs)
			}
			dls := drain(t, seeds, dlqTopic)
			if len(dls) != 1 {
				t.Fatalf("%d dead letters, want 1 (the big record's)", len(dls))
			}
			var offset, omitted string
			for _, h := range dls[0].Headers {
				switch h.Key {
				case deadletter.HeaderSourceOffset:
					offset = string(h.Value)
				case deadletter.HeaderValueOmitted:
					omitted = string(h.Value)
				}
			}
			if offset != "0" || omitted == "" {
				t.Errorf("dead letter source offset %q, value omitted %q; want offset 0 and the value left out of the envelope", offset, omitted)
			}
		})
	}
}
