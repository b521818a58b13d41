package stage_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
	"github.com/exactly-io/exactly/processor/internal/stage"
)

func inputTopicID(t *testing.T, adm *kadm.Client) [16]byte {
	t.Helper()
	md, err := adm.Metadata(context.Background(), inTopic)
	if err != nil {
		t.Fatal(err)
	}
	return md.Topics[inTopic].ID
}

// Committed offsets are checked against the topic the broker has before
// anything is fetched (operating.md, "Topic identity and start positions"): an
// offset committed under another topic ID, or without an ID above the
// high watermark, belongs to an old incarnation and the partition starts
// at its first offset; one above the high watermark under the same ID
// resumes at the high watermark; any other resumes where it is. Each
// partition holds 5 records; partition 1 has no commit.
func TestStageStartPositions(t *testing.T) {
	other := [16]byte{0xee}
	tests := []struct {
		name       string
		offset     int64
		meta       func(id [16]byte) string
		wantFrom   int64 // first offset of partition 0 processed
		wantReason string
	}{
		{"same topic id", 3, partpos.CommitMetadata, 3, ""},
		{"other topic id", 3, func([16]byte) string { return partpos.CommitMetadata(other) }, 0, partpos.RecreatedNewID},
		{"other topic id above the end", 50, func([16]byte) string { return partpos.CommitMetadata(other) }, 0, partpos.RecreatedNewID},
		{"no id above the end", 50, func([16]byte) string { return "" }, 0, partpos.RecreatedAboveEnd},
		{"another tool's metadata above the end", 50, func([16]byte) string { return "consumer-1" }, 0, partpos.RecreatedAboveEnd},
		{"no id inside the log", 2, func([16]byte) string { return "" }, 2, ""},
		{"same topic id above the end", 50, partpos.CommitMetadata, 5, partpos.LogTruncated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seeds := newCluster(t)
			adm := adminFor(t, seeds)
			id := inputTopicID(t, adm)
			parts := map[int32][]string{0: events("p0", 5), 1: events("p1", 5), 2: events("p2", 5)}
			producePartitions(t, seeds, parts)
			offs := kadm.Offsets{}
			offs.Add(kadm.Offset{Topic: inTopic, Partition: 0, At: tc.offset, LeaderEpoch: -1, Metadata: tc.meta(id)})
			offs.Add(kadm.Offset{Topic: inTopic, Partition: 2, At: 5, LeaderEpoch: -1, Metadata: partpos.CommitMetadata(id)})
			if err := adm.CommitAllOffsets(context.Background(), "exactly-clean", offs); err != nil {
				t.Fatal(err)
			}
			reg, m := promtest.Registered(t, stage.NewMetrics)
			s := stageWith(t, seeds, stage.ExactlyOnce, stage.WithMetrics(m))
			want := append([]string{}, parts[0][min(tc.wantFrom, 5):]...)
			want = append(want, parts[1]...)
			if tc.wantReason == partpos.LogTruncated {
				// Resumed at the high watermark: only records written
				// after the check are read. Wait for it, then write.
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- s.Run(ctx) }()
				waitFor(t, func() bool { return recreations(reg, partpos.LogTruncated) == 1 })
				more := events("p0new", 2)
				producePartitions(t, seeds, map[int32][]string{0: more})
				want = append(want, more...)
				waitFor(t, func() bool { return s.Stats().Produced >= int64(len(want)) })
				cancel()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			} else if err := runUntil(t, s, int64(len(want))); err != nil {
				t.Fatal(err)
			}
			checkOutputs(t, seeds, want, nil)
			if tc.wantReason != "" {
				if n := recreations(reg, tc.wantReason); n != 1 {
					t.Errorf("exactly_stage_topic_recreations_total{reason=%q} = %v, want 1", tc.wantReason, n)
				}
			}
			for p, o := range committedOffsets(t, adm) {
				if o.Metadata != partpos.CommitMetadata(id) {
					t.Errorf("partition %d: commit metadata %q, want %q", p, o.Metadata, partpos.CommitMetadata(id))
				}
			}
		})
	}
}

// recreations reads exactly_stage_topic_recreations_total of stage clean,
// input in, for reason.
func recreations(reg *prometheus.Registry, reason string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != "exactly_stage_topic_recreations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stage"] == "clean" && labels["topic"] == inTopic && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(fmt.Errorf("condition not met in 30s"))
		}
		time.Sleep(5 * time.Millisecond) // polling a condition of another goroutine
	}
}

// countingHandler counts log records by message.
type countingHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.n[r.Message]++
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}

// The input topic of a running stage is deleted, then created again under
// the same name: while it is gone the stage is not ready and says why;
// then it reads the new topic from its first offset. It never spins: the
// fetch errors are logged a few times, not on every poll.
func TestStageInputTopicRecreatedWhileRunning(t *testing.T) {
	for _, g := range guarantees {
		t.Run(g, func(t *testing.T) {
			seeds := newCluster(t)
			adm := adminFor(t, seeds)
			logs := &countingHandler{n: map[string]int{}}
			s := stageWith(t, seeds, g, stage.WithLogger(slog.New(logs)))
			stop, _ := runInBackground(t, s)
			defer stop()
			old := map[int32][]string{0: events("old0", 3), 1: events("old1", 2)}
			producePartitions(t, seeds, old)
			waitFor(t, func() bool { return s.Stats().Produced == 5 })
			oldID := inputTopicID(t, adm)

			if _, err := adm.DeleteTopics(context.Background(), inTopic); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { err := s.Ready(); return err != nil && strings.Contains(err.Error(), inTopic) })
			t.Logf("%s while the topic is gone: %v", time.Now().Format("05.000"), s.Ready())
			if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, inTopic); err != nil {
				t.Fatal(err)
			}
			if inputTopicID(t, adm) == oldID {
				t.Fatal("the recreated topic kept its ID")
			}
			fresh := map[int32][]string{0: events("new0", 4), 1: events("new1", 1)}
			producePartitions(t, seeds, fresh)
			waitFor(t, func() bool { return s.Stats().Produced == 10 && s.Ready() == nil })
			t.Logf("%s new records processed", time.Now().Format("05.000"))
			checkOutputs(t, seeds, append(append(append(old[0], old[1]...), fresh[0]...), fresh[1]...), nil)
			if n := logs.count("fetch error"); n > 20 {
				t.Errorf("%d fetch error lines; want a few, not one per poll", n)
			}
		})
	}
}
