package stage

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// Input deleted before it was read. A committed offset below the log
// start (retention, a DeleteRecords, a stage stopped too long), no
// committed offset while the log start is past 0, or a fetch position
// that the log start passes while the stage lags: in each case the client
// resumes at the log start, and the next commit moves the offset past
// records the stage never read. The stage writes each such range to the
// reset log (resetlog.CauseDeletedUnread) before anything polled after it
// can commit, so that `exactly verify` reports it for ever after, not
// only while the offset lags.

// noteDeleted writes the ranges of the input that fetches show deleted
// before the stage read them (w knows where it expected each partition
// to go on). On a failure the ranges stay expected, to be found again
// when the aborted transaction's records are polled again.
func (s *Stage) noteDeleted(ctx context.Context, w *resetlog.Watch, topicID [16]byte, fetches kgo.Fetches) error {
	var gaps []resetlog.Partition
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Topic != s.cfg.Input || len(p.Records) == 0 {
			return
		}
		if g, ok := w.Polled(p.Partition, p.LogStartOffset, p.Records[0].Offset, p.Records[len(p.Records)-1].Offset); ok {
			gaps = append(gaps, g)
		}
	})
	if len(gaps) == 0 {
		return nil
	}
	for _, g := range gaps {
		if g.NoPosition {
			s.log.Info("the stage starts on a partition at its log start: the offsets below were deleted before it first ran; recording the range in the reset log, where exactly verify reports it as lost if the topology writes the topic",
				"topic", s.cfg.Input, "partition", g.Partition, "from", g.From, "to", g.To, "log_topic", resetlog.Topic)
			continue
		}
		s.log.Warn("input records were deleted before the stage read them (retention.ms, or records deleted); recording the range in the reset log, where exactly verify reports it as lost",
			"topic", s.cfg.Input, "partition", g.Partition, "from", g.From, "to", g.To, "log_topic", resetlog.Topic)
	}
	err := s.recordDeletedUnread(ctx, topicID, gaps)
	if err != nil && resetlog.OnlyNoPosition(gaps) {
		// A first start on an old topic: not worth stopping the stage
		// for (the reset log may not even be writable to it), and verify
		// sees the range while the group has no offset there.
		s.log.Warn("cannot record where the stage first started in the reset log", "log_topic", resetlog.Topic, "err", err)
		return nil
	}
	if err != nil {
		for _, g := range gaps {
			w.Expect(g.Partition, g.From)
		}
		return fmt.Errorf("record input deleted before it was read: %w", err)
	}
	return nil
}

// expectPositions tells w where each assigned partition of the input
// resumes: its committed offset, or 0 when none (the stage starts at the
// log start, and every offset below it was never read by the stage).
func expectPositions(w *resetlog.Watch, input string, offsets map[string]map[int32]kgo.Offset, committed map[int32]partpos.StoredPosition) {
	for p := range offsets[input] {
		if pos, ok := committed[p]; ok {
			w.Expect(p, pos.Offset)
		} else {
			w.ExpectFirst(p)
		}
	}
}

// recordDeletedUnread writes ranges of the input topic (topicID; zero:
// unknown) that the stage never read to the reset log, cause
// deleted_unread, where exactly verify reports them.
func (s *Stage) recordDeletedUnread(ctx context.Context, topicID [16]byte, ranges []resetlog.Partition) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	e := resetlog.Entry{Kind: "stage", Name: s.cfg.Stage, Group: s.cfg.Group(), Topic: s.cfg.Input,
		Cause: resetlog.CauseDeletedUnread, Partitions: ranges}
	if topicID != ([16]byte{}) {
		e.TopicID = kadm.TopicID(topicID).String()
	}
	return resetlog.Write(ctx, append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), s.kopts...), e)
}
