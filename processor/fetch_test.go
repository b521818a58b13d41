package processor_test

import (
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/processor"
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

// The stage's consumer asks for fetches of the configured sizes, 1 MiB
// and 256 KiB of one partition by default, in both guarantees: these bound
// the memory its input takes (franz-go's own default is 50 MiB).
func TestStageFetchSizes(t *testing.T) {
	tests := []struct {
		name                string
		guarantee           string
		maxBytes, partBytes int32
		wantMax, wantPart   int32
	}{
		{"defaults, exactly-once", processor.ExactlyOnce, 0, 0, 1 << 20, 256 << 10},
		{"defaults, at-least-once", processor.AtLeastOnce, 0, 0, 1 << 20, 256 << 10},
		{"set", processor.ExactlyOnce, 64 << 10, 16 << 10, 64 << 10, 16 << 10},
		{"fetch max below the partition default", processor.ExactlyOnce, 64 << 10, 0, 64 << 10, 64 << 10},
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
			s, err := processor.New(processor.Config{
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
