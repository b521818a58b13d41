package pgsink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Start-position reasons: the reason label of
// exactly_sink_topic_recreations_total, and what the log says.
const (
	// ReasonRecreated: the stored position belongs to an earlier
	// incarnation of the topic (its topic ID differs from the broker's,
	// or, for a row stored without a topic ID, its offset is above the
	// high watermark). The sink reads the new incarnation from its log
	// start; the event IDs keep rows already loaded from being doubled.
	ReasonRecreated = "recreated"
	// ReasonTruncated: same topic ID, but the stored offset is above the
	// high watermark: the log was truncated (an unclean leader election),
	// or the row was edited. Records appended since then have offsets
	// below the stored one, and the high watermark seen now may already
	// be past some of them, so the sink reads the partition from its log
	// start: the event IDs absorb the re-read, a skip could not be undone.
	// The guard then stores the lower position at the next commit. (A
	// stage resumes at the high watermark instead: see kit.StartAt.)
	ReasonTruncated = "truncated"
	// reasonRetention: the stored offset is below the log start offset:
	// retention deleted records the sink never read. It resumes at the
	// log start; logged, not counted as a re-creation.
	reasonRetention = "retention"
)

// startAt is where a partition's reading starts and why.
type startAt struct {
	offset int64  // -1: the log start offset
	reason string // "" when the stored position is used as it is
}

// decideStart applies the topic-identity policy (operating.md, "Topic
// identity and start positions") to one partition: row is its stored position
// (ok false: none), brokerID the topic's current ID, logStart and hwm its
// log start offset and high watermark now.
func decideStart(row StoredPosition, ok bool, brokerID string, logStart, hwm int64) startAt {
	switch {
	case !ok:
		return startAt{offset: -1}
	case row.TopicID != "" && brokerID != "" && row.TopicID != brokerID:
		return startAt{offset: -1, reason: ReasonRecreated}
	case row.NextOffset > hwm && row.TopicID == "":
		return startAt{offset: -1, reason: ReasonRecreated}
	case row.NextOffset > hwm:
		return startAt{offset: -1, reason: ReasonTruncated}
	case row.NextOffset < logStart:
		return startAt{offset: logStart, reason: reasonRetention}
	}
	return startAt{offset: row.NextOffset}
}

// topicState is what the broker says of the input topic now.
type topicState struct {
	id                  string // kadm.TopicID.String(): base64
	start, end, lastStb map[int32]int64
}

// errTopicMissing is the input topic not existing (deleted, or not yet
// created).
var errTopicMissing = errors.New("input topic does not exist")

// readTopic returns the input topic's ID and, for parts (all when nil),
// its log start offsets, high watermarks and last stable offsets. A
// missing topic is errTopicMissing.
func (s *Sink) readTopic(ctx context.Context, parts []int32) (topicState, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	id, err := s.topicID(ctx)
	if err != nil {
		return topicState{}, err
	}
	st := topicState{id: id, start: map[int32]int64{}, end: map[int32]int64{}, lastStb: map[int32]int64{}}
	for _, l := range []struct {
		list func(context.Context, ...string) (kadm.ListedOffsets, error)
		into map[int32]int64
		what string
	}{{s.adm.ListStartOffsets, st.start, "log start"}, {s.adm.ListEndOffsets, st.end, "high watermark"}, {s.adm.ListCommittedOffsets, st.lastStb, "last stable"}} {
		offs, err := l.list(ctx, s.cfg.Input)
		if err == nil {
			err = offs.Error()
		}
		if err != nil {
			return topicState{}, fmt.Errorf("list %s offsets of %s: %w", l.what, s.cfg.Input, err)
		}
		offs.Each(func(o kadm.ListedOffset) { l.into[o.Partition] = o.Offset })
	}
	for _, p := range parts {
		if _, ok := st.end[p]; !ok {
			return topicState{}, fmt.Errorf("topic %s has no partition %d yet", s.cfg.Input, p)
		}
	}
	return st, nil
}

// topicID returns the input topic's current ID, or errTopicMissing.
func (s *Sink) topicID(ctx context.Context) (string, error) {
	md, err := s.adm.Metadata(ctx, s.cfg.Input)
	if err != nil {
		return "", fmt.Errorf("metadata of %s: %w", s.cfg.Input, err)
	}
	td, ok := md.Topics[s.cfg.Input]
	switch {
	case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return "", fmt.Errorf("%w: %s", errTopicMissing, s.cfg.Input)
	case td.Err != nil:
		return "", fmt.Errorf("metadata of %s: %w", s.cfg.Input, td.Err)
	}
	if td.ID == (kadm.TopicID{}) {
		return "", nil // a broker without topic IDs (before KIP-516)
	}
	return td.ID.String(), nil
}

// errRebuild asks Run for a new Kafka client: the input topic was
// recreated.
var errRebuild = errors.New("input topic recreated: new kafka client")

// topicLogEvery bounds how often a lasting topic condition is logged.
const topicLogEvery = 30 * time.Second

// checkTopic handles a fetch error saying the client does not know the
// input topic (fetchErr: UNKNOWN_TOPIC_ID or UNKNOWN_TOPIC_OR_PARTITION).
// It asks the broker for the topic's ID:
//   - the topic is gone: the sink turns not ready with a reason naming it,
//     and waits (a backoff, not a spin); operators often delete and
//     recreate a topic;
//   - the topic has another ID than the one being read, or the client
//     gets UNKNOWN_TOPIC_ID for a topic that exists: it was recreated, and
//     checkTopic returns errRebuild (franz-go never adopts a new topic ID);
//   - otherwise the error is a broker catching up: it waits and polls
//     again.
//
// Each condition is logged once, then at most every topicLogEvery.
func (s *Sink) checkTopic(ctx context.Context, fetchErr error) error {
	id, err := s.topicID(ctx)
	s.mu.Lock()
	current := ""
	for _, p := range s.pos {
		current = p.current
		break
	}
	s.mu.Unlock()
	var cond string
	switch {
	case errors.Is(err, errTopicMissing):
		gone := fmt.Errorf("input topic %s does not exist (deleted?); waiting for it to be created again", s.cfg.Input)
		s.topicTrouble.gone.Store(&gone)
		cond = "gone"
		s.logTopic(cond, "input topic does not exist; waiting for it", "err", fetchErr)
	case err != nil:
		cond = "unknown"
		s.logTopic(cond, "input topic unknown to the client, and its metadata failed; retrying", "fetch_err", fetchErr, "err", err)
	case id != current || errors.Is(fetchErr, kerr.UnknownTopicID):
		s.topicTrouble.gone.Store(nil)
		s.log.Warn("input topic was recreated; reading the new topic with a new client", "topic", s.cfg.Input,
			"old_topic_id", current, "topic_id", id, "err", fetchErr)
		return errRebuild
	default:
		s.topicTrouble.gone.Store(nil)
		cond = "lagging"
		s.logTopic(cond, "input topic not yet known to every broker; retrying", "err", fetchErr)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	return nil
}

// logTopic logs a topic condition when it is new or topicLogEvery after it
// was last logged.
func (s *Sink) logTopic(cond, msg string, args ...any) {
	t := &s.topicTrouble
	if cond == t.last && time.Since(t.loggedAt) < topicLogEvery {
		return
	}
	t.last, t.loggedAt = cond, time.Now()
	s.log.Warn(msg, append([]any{"topic", s.cfg.Input}, args...)...)
}
