package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// Topic identity (operating.md, "Topic identity and start positions"): the
// group's committed offsets carry the input topic's ID in their metadata
// (partpos.CommitMetadata). When partitions are assigned, each committed
// offset is checked against the topic the broker has now (partpos.StartAt)
// before anything is fetched. While running, a fetch that says the topic
// is unknown makes the stage look the topic up: a new ID (or no topic)
// ends the session, and the new session starts by the same rules, since
// only a new client forgets the old topic ID.

// topicID returns the input topic's current ID. A missing topic is a
// *partpos.TopicChangedError with a zero New (old is the ID last consumed,
// zero at start).
func (s *Stage) topicID(ctx context.Context, adm *kadm.Client, old [16]byte) ([16]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	md, err := adm.Metadata(ctx, s.cfg.Input)
	if err != nil {
		return [16]byte{}, fmt.Errorf("metadata of input topic %s: %w", s.cfg.Input, err)
	}
	d, ok := md.Topics[s.cfg.Input]
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition) || errors.Is(d.Err, kerr.UnknownTopicID):
		return [16]byte{}, &partpos.TopicChangedError{Topic: s.cfg.Input, Old: old}
	case d.Err != nil:
		return [16]byte{}, fmt.Errorf("metadata of input topic %s: %w", s.cfg.Input, d.Err)
	}
	return d.ID, nil
}

// startCheck applies partpos.StartAt to the partitions a session is assigned.
// OnOffsetsFetched keeps the fetched commits with their metadata, then
// AdjustFetchOffsetsFn (called next, by the same goroutine) replaces the
// offsets that must not be resumed.
type startCheck struct {
	s       *Stage
	adm     *kadm.Client
	topicID [16]byte // the ID the session consumes
	// deleted finds input deleted before the stage read it (deleted.go).
	deleted resetlog.Watch

	mu      sync.Mutex
	fetched map[int32]partpos.StoredPosition
}

func (c *startCheck) onFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	fetched := map[int32]partpos.StoredPosition{}
	add := func(topic string, id [16]byte, parts []kmsg.OffsetFetchResponseTopicPartition) {
		if topic != c.s.cfg.Input && (topic != "" || id != c.topicID) {
			return
		}
		for _, p := range parts {
			if p.ErrorCode != 0 || p.Offset < 0 {
				continue
			}
			pos := partpos.StoredPosition{Offset: p.Offset}
			if p.Metadata != nil {
				pos.TopicID, _ = partpos.ParseCommitMetadata(*p.Metadata)
			}
			fetched[p.Partition] = pos
		}
	}
	for _, t := range resp.Topics {
		add(t.Topic, [16]byte{}, t.Partitions)
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			parts := make([]kmsg.OffsetFetchResponseTopicPartition, 0, len(t.Partitions))
			for _, p := range t.Partitions {
				parts = append(parts, kmsg.OffsetFetchResponseTopicPartition{
					Partition: p.Partition, Offset: p.Offset, Metadata: p.Metadata, ErrorCode: p.ErrorCode,
				})
			}
			add(t.Topic, t.TopicID, parts)
		}
	}
	c.mu.Lock()
	c.fetched = fetched
	c.mu.Unlock()
	return nil
}

// adjust is the session's kgo.AdjustFetchOffsetsFn: check, then record
// in the stage's membership whether its assigned partitions started
// (readiness: a stage that cannot read its input's offsets consumes
// nothing and is not ready).
func (c *startCheck) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	adjusted, err := c.check(ctx, offsets)
	if err != nil {
		c.s.ready.Member.StartFailed(err)
		return nil, err
	}
	c.s.ready.Member.Assigned()
	return adjusted, nil
}

// check moves each committed offset of the input that no longer fits the
// partition (partpos.StartAt) to where the stage must start instead.
func (c *startCheck) check(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	c.mu.Lock()
	fetched := c.fetched
	c.fetched = nil
	c.mu.Unlock()
	parts := offsets[c.s.cfg.Input]
	expectPositions(&c.deleted, c.s.cfg.Input, offsets, fetched)
	var stored []int32
	for p := range parts {
		if _, ok := fetched[p]; ok {
			stored = append(stored, p)
		}
	}
	if len(stored) == 0 {
		return offsets, nil // no commits: the reset offset (the start) applies
	}
	starts, ends, err := c.bounds(ctx)
	if err != nil {
		// Leaves this group session; franz-go joins again.
		return nil, fmt.Errorf("check committed offsets of %s: %w", c.s.cfg.Input, err)
	}
	for _, p := range stored {
		pos := fetched[p]
		st, ok1 := starts.Lookup(c.s.cfg.Input, p)
		en, ok2 := ends.Lookup(c.s.cfg.Input, p)
		if !ok1 || !ok2 || st.Err != nil || en.Err != nil {
			return nil, fmt.Errorf("check committed offsets of %s/%d: no log start or end offset", c.s.cfg.Input, p)
		}
		now := partpos.PartitionState{TopicID: c.topicID, LogStart: st.Offset, HighWatermark: en.Offset}
		at, reason := partpos.StartAt(pos, now)
		if reason == "" {
			continue
		}
		parts[p] = kgo.NewOffset().At(at).WithEpoch(-1)
		if reason != partpos.RetentionPassed {
			// Another incarnation, or a truncated log: the committed
			// offset names no record of it to expect.
			c.deleted.Expect(p, at)
		}
		attrs := []any{"topic", c.s.cfg.Input, "partition", p, "committed", pos.Offset, "start", at,
			"log_start", now.LogStart, "high_watermark", now.HighWatermark,
			"old_topic_id", partpos.TopicIDString(pos.TopicID), "topic_id", partpos.TopicIDString(now.TopicID), "reason", reason}
		switch reason {
		case partpos.RecreatedNewID, partpos.RecreatedAboveEnd:
			c.s.metrics.Recreated(c.s.cfg.Input, reason)
			c.s.log.Warn("input topic was recreated: the committed offset belongs to the old topic; starting at the new topic's first offset", attrs...)
		case partpos.LogTruncated:
			c.s.metrics.Recreated(c.s.cfg.Input, reason)
			c.s.log.Error("committed offset is above the partition's high watermark: the log was truncated; resuming at the high watermark", attrs...)
		case partpos.RetentionPassed:
			c.s.log.Warn("committed offset is below the log start offset: retention deleted records that were never processed; starting at the log start", attrs...)
		}
	}
	return offsets, nil
}

// bounds lists the input topic's log start offsets and high watermarks.
func (c *startCheck) bounds(ctx context.Context) (starts, ends kadm.ListedOffsets, err error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if starts, err = c.adm.ListStartOffsets(ctx, c.s.cfg.Input); err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, err
	}
	if ends, err = c.adm.ListEndOffsets(ctx, c.s.cfg.Input); err == nil {
		err = ends.Error()
	}
	return starts, ends, err
}

// logEvery limits a repeated log line to one per interval and condition.
type logEvery struct {
	every time.Duration
	last  map[string]time.Time
}

// ok reports whether the line of condition key may be logged now.
func (l *logEvery) ok(key string) bool {
	if l.last == nil {
		l.last = map[string]time.Time{}
	}
	if t, seen := l.last[key]; seen && time.Since(t) < l.every {
		return false
	}
	l.last[key] = time.Now()
	return true
}
