package stage_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/stage"
)

// limitOutput makes the output topic refuse batches over 4000 bytes.
func limitOutput(t *testing.T, adm *kadm.Client) {
	t.Helper()
	v := "4000"
	rs, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: &v}}, outTopic)
	if err == nil {
		_, err = rs.On(outTopic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// producePartitions writes the events of each partition (keyed by event
// ID) in order; an event ID starting "big" gets a 6 KB value.
func producePartitions(t *testing.T, seeds []string, parts map[int32][]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for p, ids := range parts {
		for _, id := range ids {
			pad := ""
			if strings.HasPrefix(id, "big") {
				// Incompressible: the broker limits the compressed batch.
				b := make([]byte, 6000)
				for i := range b {
					b[i] = "abcdefghijklmnopqrstuvwxyz0123456789"[rand.IntN(36)]
				}
				pad = string(b)
			}
			recs = append(recs, &kgo.Record{Topic: inTopic, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"event_id":%q,"pad":%q}`, id, pad)})
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func events(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func stageWith(t *testing.T, seeds []string, guarantee string, opts ...stage.Option) *stage.Stage {
	t.Helper()
	return stageOf(t, seeds, guarantee, 50*time.Millisecond, 10000, opts...)
}

// checkOutputs requires each wanted key in the output once (even with
// at-least-once: nothing here crashes), and the dead letters to be
// exactly the keys of wantDL, with reason produce.
func checkOutputs(t *testing.T, seeds []string, want, wantDL []string) {
	t.Helper()
	outs := drain(t, seeds, outTopic)
	got := keyCounts(outs)
	for _, k := range want {
		if got[k] != 1 {
			t.Errorf("key %s is in the output %d times, want 1", k, got[k])
		}
	}
	if len(outs) != len(want) {
		t.Errorf("%d outputs, want %d", len(outs), len(want))
	}
	dls := drain(t, seeds, dlqTopic)
	gotDL := map[string]string{}
	for _, r := range dls {
		gotDL[string(r.Key)] = header(r, deadletter.HeaderReason)
	}
	for _, k := range wantDL {
		if gotDL[k] != deadletter.ReasonProduce {
			t.Errorf("dead letter of %s: reason %q, want %q; all %v", k, gotDL[k], deadletter.ReasonProduce, gotDL)
		}
	}
	if len(dls) != len(wantDL) {
		t.Errorf("%d dead letters, want %d: %v", len(dls), len(wantDL), gotDL)
	}
}

// committedOffsets returns the group's committed offsets of the input.
func committedOffsets(t *testing.T, adm *kadm.Client) map[int32]kadm.OffsetResponse {
	t.Helper()
	offs, err := adm.FetchOffsets(context.Background(), "exactly-clean")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]kadm.OffsetResponse{}
	for p, o := range offs[inTopic] {
		out[p] = o
	}
	return out
}

// A record whose output the broker refuses is found and dead-lettered,
// and no other record is skipped or written twice, in both guarantees,
// whatever the group committed before: nothing, or only some
// partitions.
func TestStageRewindAfterRefusedRecord(t *testing.T) {
	tests := []struct {
		name      string
		committed map[int32]int64 // set before the run, with records before it
	}{
		{"never committed", nil},
		{"partition 0 committed", map[int32]int64{0: 5}},
		{"partitions 0 and 2 committed", map[int32]int64{0: 3, 2: 4}},
	}
	for _, g := range guarantees {
		for _, tc := range tests {
			t.Run(g+"/"+tc.name, func(t *testing.T) {
				seeds := newCluster(t)
				adm := adminFor(t, seeds)
				limitOutput(t, adm)
				if len(tc.committed) > 0 {
					done := map[int32][]string{}
					for p, n := range tc.committed {
						done[p] = events(fmt.Sprintf("done%d", p), int(n))
					}
					producePartitions(t, seeds, done)
					offs := kadm.Offsets{}
					for p, n := range tc.committed {
						offs.Add(kadm.Offset{Topic: inTopic, Partition: p, At: n, LeaderEpoch: -1})
					}
					if err := adm.CommitAllOffsets(context.Background(), "exactly-clean", offs); err != nil {
						t.Fatal(err)
					}
				}
				parts := map[int32][]string{
					0: append(append(events("p0a", 25), "big0"), events("p0b", 25)...),
					1: append([]string{"big1"}, events("p1", 10)...),
					2: events("p2", 7),
				}
				producePartitions(t, seeds, parts)
				var want []string
				for _, ids := range parts {
					for _, id := range ids {
						if !strings.HasPrefix(id, "big") {
							want = append(want, id)
						}
					}
				}
				s := stageWith(t, seeds, g)
				if err := runUntil(t, s, int64(len(want)+2)); err != nil {
					t.Fatal(err)
				}
				checkOutputs(t, seeds, want, []string{"big0", "big1"})
				got := committedOffsets(t, adm)
				for p, ids := range parts {
					if end := tc.committed[p] + int64(len(ids)); got[p].At != end {
						t.Errorf("partition %d: committed %d, want %d", p, got[p].At, end)
					}
				}
			})
		}
	}
}
