package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// Input deleted before it was read. A stored position below the log start
// (retention, a DeleteRecords, a sink stopped too long), no stored position
// while the log start is past 0, or a fetch position that the log start
// passes while the sink lags: in each case the sink reads on from the log
// start, and its next batch stores a position past records it never read.
// Each such range is written to the reset log
// (resetlog.CauseDeletedUnread) before that batch commits, so that
// `exactly verify` reports it for ever after, not only while the position
// lags.

// findDeleted notes in b the range of partition p deleted before the sink
// read it, if the fetch fp shows one: its log start is past the offset the
// sink expected next (the batch's, else the stored position, else 0: the
// sink never read the partition).
func (s *Sink) findDeleted(b *batch, fp kgo.FetchTopicPartition) {
	if fp.Topic != s.cfg.Input || len(fp.Records) == 0 {
		return
	}
	expect, ok := b.next[fp.Partition]
	if !ok {
		// Polled beside the batch before it: that batch read on to here.
		expect, ok = b.after[fp.Partition]
	}
	first := int64(-1)
	s.mu.Lock()
	pos, owned := s.pos[fp.Partition]
	s.mu.Unlock()
	if !owned {
		return
	}
	for _, r := range fp.Records {
		if r.Offset >= pos.from {
			first = r.Offset
			break
		}
	}
	if first < 0 {
		return // buffered before a seek
	}
	switch {
	case ok: // the batch read the partition up to it
	case pos.rewind:
		expect = pos.from // a recreated or truncated topic, read from its start
	case pos.stored:
		expect = pos.next
	}
	if to := min(fp.LogStartOffset, first); to > expect {
		b.deleted = append(b.deleted, resetlog.Partition{Partition: fp.Partition, From: expect, To: to,
			NoPosition: !ok && !pos.rewind && !pos.stored})
	}
}

// recordDeleted writes b's deleted ranges to the reset log, once, retrying
// until it succeeds or ctx ends: the batch's positions, past them, must
// not commit before.
func (s *Sink) recordDeleted(ctx context.Context, b *batch) error {
	if len(b.deleted) == 0 || b.recorded {
		return nil
	}
	for _, g := range b.deleted {
		if g.NoPosition {
			s.log.Info("the sink starts on a partition at its log start: the offsets below were deleted before it first ran; recording the range in the reset log, where exactly verify reports it as lost if the topology writes the topic",
				"topic", s.cfg.Input, "partition", g.Partition, "from", g.From, "to", g.To, "log_topic", resetlog.Topic)
			continue
		}
		s.log.Warn("input records were deleted before the sink read them (retention.ms, or records deleted); recording the range in the reset log, where exactly verify reports it as lost",
			"topic", s.cfg.Input, "partition", g.Partition, "from", g.From, "to", g.To, "log_topic", resetlog.Topic)
	}
	e := resetlog.Entry{Kind: "sink", Name: s.cfg.Sink, Group: s.cfg.Group(), PositionsTable: s.logPositions, Topic: s.cfg.Input,
		Cause: resetlog.CauseDeletedUnread, Partitions: b.deleted}
	bo := backoff.NewBackoff(100*time.Millisecond, 5*time.Second)
	for {
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err := resetlog.Write(wctx, append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), s.kopts...), e)
		cancel()
		if err == nil || resetlog.OnlyNoPosition(b.deleted) {
			if err != nil {
				// A first start on an old topic: not worth holding the
				// batch for; verify sees the range while no position is
				// stored there.
				s.log.Warn("cannot record where the sink first started in the reset log", "log_topic", resetlog.Topic, "err", err)
			}
			b.recorded = true
			return nil
		}
		wait := bo.Next()
		s.log.Warn("cannot record input deleted before it was read; the batch waits", "log_topic", resetlog.Topic, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return fmt.Errorf("record input deleted before it was read: %w", ctx.Err())
		case <-time.After(wait):
		}
	}
}
