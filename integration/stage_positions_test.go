//go:build integration

package integration

// The stage's start positions and rewinds (README, "Rewinds" and "Topic
// identity and start positions"), against the real broker, read back with
// kcat: a committed offset of an old topic incarnation is not resumed, one
// above the high watermark of the same topic resumes at the high
// watermark, and a stage stopped in the middle of the one-record retry
// that finds a refused record loses nothing when it starts again.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// commitWithMeta commits offset at of topic/partition for group with
// commit metadata meta, as a late commit of another instance would; kadm
// is used only because Kafka's tools cannot write commit metadata.
func commitWithMeta(t *testing.T, group, topic string, partition int32, at int64, meta string) {
	t.Helper()
	adm, done := readAdmin(t)
	defer done()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: partition, At: at, LeaderEpoch: -1, Metadata: meta})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := adm.CommitAllOffsets(ctx, group, offs); err != nil {
		t.Fatalf("commit %s/%d@%d for %s: %v", topic, partition, at, group, err)
	}
}

// commitMeta reads the commit metadata of group for topic, by partition.
func commitMeta(t *testing.T, group, topic string) map[int32]string {
	t.Helper()
	adm, done := readAdmin(t)
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]string{}
	for p, o := range offs[topic] {
		out[p] = o.Metadata
	}
	return out
}

// metaFor returns the commit metadata a stage writes for topic now.
func metaFor(t *testing.T, topic string) string {
	t.Helper()
	adm, done := readAdmin(t)
	defer done()
	md, err := adm.Metadata(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	id := md.Topics[topic].ID
	const hexd = "0123456789abcdef"
	var b strings.Builder
	b.WriteString("exactly/v1 topic_id=")
	for _, c := range id {
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// A stage's commits carry its input topic's ID. The topic is recreated
// while the stage is stopped, and a late commit of the old incarnation
// (offset 2, old ID) lands in the group after the broker dropped the old
// offsets: the stage starts the new topic at its first offset, not at 2.
func TestStageOldIncarnationCommitNotResumed(t *testing.T) {
	s := recreateStage(t, "sfold")
	p := runOld(t, s, "sf-1")
	p.stop()
	oldMeta := metaFor(t, s.in)
	for part, m := range commitMeta(t, s.group(), s.in) {
		if m != oldMeta {
			t.Errorf("partition %d: commit metadata %q, want %q", part, m, oldMeta)
		}
	}
	recreateTopic(t, s.in, 2)
	commitWithMeta(t, s.group(), s.in, 0, 2, oldMeta)
	produceGen(t, s.in, genNew)
	p = s.run(t, "exactly-once", "sf-1")
	s.waitCommitted(t, map[int32]int64{0: 4, 1: 1}, 45*time.Second)
	p.alive()
	s.checkOutputs(t, "exactly-once", append(genKeys(genOld), genKeys(genNew)...))
	if !strings.Contains(p.logs.String(), "input topic was recreated") {
		t.Errorf("no warning about the recreated topic; logs:\n%s", tail(p.logs.String(), 20))
	}
	if m := commitMeta(t, s.group(), s.in)[0]; m != metaFor(t, s.in) || m == oldMeta {
		t.Errorf("partition 0: commit metadata %q after the run, want the new ID's %q", m, metaFor(t, s.in))
	}
	p.stop()
}

// A committed offset above the high watermark under the topic's own ID
// (a truncated log) resumes at the high watermark: records written from
// then on are processed, the ones below it are not processed again.
func TestStageTruncatedLogResumesAtHighWatermark(t *testing.T) {
	s := recreateStage(t, "sftrunc")
	produceGen(t, s.in, genOld) // 3 and 2 records
	commitWithMeta(t, s.group(), s.in, 0, 100, metaFor(t, s.in))
	commitWithMeta(t, s.group(), s.in, 1, 2, metaFor(t, s.in))
	p := s.run(t, "exactly-once", "sf-1")
	eventually(t, 45*time.Second, func() bool {
		p.alive()
		return strings.Contains(p.logs.String(), "the log was truncated")
	}, func() string { return "no error about the truncated log; logs:\n" + tail(p.logs.String(), 20) })
	more := eventLines("after", 0, 2, 0)
	kcatProducePartition(t, s.in, 0, more)
	s.waitCommitted(t, map[int32]int64{0: 5, 1: 2}, 45*time.Second)
	s.checkOutputs(t, "exactly-once", keysOf(more))
	p.stop()
}

// The stage is stopped (SIGTERM) while it retries one input record per
// transaction to find a record the broker refuses, and started again:
// every small record is output (once with exactly-once), the refused one
// is dead-lettered, and the group ends at the end of the partition.
func TestStageStoppedMidRetry(t *testing.T) {
	for _, g := range bothGuarantees {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			s := newRefusedStage(t, "sfstop", 1, "2s", 100000)
			pre, post := eventLines("a", 0, 300, 0), eventLines("b", 0, 300, 0)
			lines := append(append(append([][]byte{}, pre...), eventLines("big", 0, 1, refusedPad)...), post...)
			kcatProduce(t, s.in, lines)
			p := s.run(t, g, "sf-1")
			eventually(t, 45*time.Second, func() bool {
				p.alive()
				return strings.Contains(p.logs.String(), "one input record per transaction")
			}, func() string { return "the one-record retry never started" })
			p.stop()
			t.Logf("committed at the stop: %v", groupOffsets(t, s.group(), s.in))
			p = s.run(t, g, "sf-1")
			s.settle(t, g, p, map[int32]int64{0: int64(len(lines))}, 90*time.Second, append(keysOf(pre), keysOf(post)...), []dlqSource{{0, 300, "produce"}})
		})
	}
}
