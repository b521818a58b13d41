package stage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/topology"
)

// HeaderLineageTimestamp is the lineage header that an output carries
// when the stage writes it with the time of writing (output_timestamp:
// write): its input's timestamp, Unix milliseconds, decimal. The resume
// guard matches an output to its input with it, as it does with the
// output's own timestamp otherwise.
const HeaderLineageTimestamp = "exactly.source.timestamp"

// topicTimes are the settings of an output topic that decide how long a
// record stays readable, as DescribeConfigs reads them.
type topicTimes struct {
	// retention is retention.ms; 0 when records are kept for ever (-1),
	// or the topic is compacted only.
	retention time.Duration
	// logAppend: message.timestamp.type=LogAppendTime, the broker
	// stamps each record with its own time; retention counts from that.
	logAppend bool
}

// readableFor reports whether a record with timestamp ts, written at
// now, stays in the topic: retention deletes a segment once its newest
// timestamp is older than retention.ms, at the broker's next check
// (log.retention.check.interval.ms, 5 minutes), which can come before
// any consumer reads it. A record within a tenth of the retention of
// that age counts as too old: the next check may take it.
func (tt topicTimes) readableFor(ts, now time.Time) bool {
	if tt.retention <= 0 || tt.logAppend {
		return true
	}
	return now.Sub(ts) < tt.retention-tt.retention/10
}

// outputTimes watches the settings of the topics the stage writes
// outputs to (output and route topics), read at start and every metadata
// refresh (stages[].metadata_max_age), and counts the committed outputs
// that retention may delete before anyone reads them.
type outputTimes struct {
	// topics is the described topics' settings, replaced whole by each
	// refresh: the producer's callbacks read it without a lock.
	topics atomic.Pointer[map[string]topicTimes]
	mu     sync.Mutex
	seen   map[string]bool // output topics written, described at the next refresh
	warned map[outPartition]bool
	// unread is set once a describe failed and was warned about.
	unread bool
	// past records the old outputs in the reset log (pastretention.go).
	past pastLog
}

// outPartition is one output partition.
type outPartition struct {
	topic string
	p     int32
}

// agedOutputs are the outputs of one transaction that retention may
// delete before they are read, by output partition.
type agedOutputs map[outPartition]agedOutput

type agedOutput struct {
	n         int64
	offset    int64 // the first one's
	last      int64 // the last one's
	timestamp time.Time
	retention time.Duration
}

// watchOutputTimes reads the output topics' settings now, then again
// every metadata refresh until ctx ends. A stage whose outputs take the
// time of writing has nothing to watch.
func (s *Stage) watchOutputTimes(ctx context.Context, adm *kadm.Client) {
	if s.cfg.OutputTimestamp == topology.OutputTimestampWrite {
		return
	}
	ot := &s.outTimes
	ot.mu.Lock()
	if ot.seen == nil {
		// Every declared output topic is read now, before the first
		// transaction: a route topic first met in a transaction would
		// be read only at the next refresh, its first outputs unjudged.
		ot.seen = map[string]bool{s.cfg.Output: true}
		for _, t := range s.cfg.RouteTopics {
			ot.seen[t] = true
		}
	}
	ot.mu.Unlock()
	s.metrics.startOldOutputs(s.cfg.Output)
	s.describeOutputTimes(ctx, adm)
	go func() {
		tick := time.NewTicker(s.cfg.MetadataMaxAge)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				ot.past.close()
				return
			case <-tick.C:
				s.describeOutputTimes(ctx, adm)
			}
		}
	}()
}

// describeOutputTimes reads the settings of every output topic seen. A
// failure keeps what was read before; the first is a warning (without
// the settings, old outputs go unnoticed), the next refresh tries again.
func (s *Stage) describeOutputTimes(ctx context.Context, adm *kadm.Client) {
	ot := &s.outTimes
	ot.mu.Lock()
	topics := make([]string, 0, len(ot.seen))
	for t := range ot.seen {
		topics = append(topics, t)
	}
	ot.mu.Unlock()
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	next := map[string]topicTimes{}
	if old := ot.topics.Load(); old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	for _, rc := range rcs {
		if rc.Err != nil {
			err = fmt.Errorf("%s: %w", rc.Name, rc.Err)
			continue
		}
		next[rc.Name] = parseTopicTimes(rc.Configs)
	}
	ot.topics.Store(&next)
	if err != nil {
		ot.mu.Lock()
		first := !ot.unread
		ot.unread = true
		ot.mu.Unlock()
		if first && ctx.Err() == nil {
			const msg = "cannot read the output topics' retention.ms (DescribeConfigs); outputs older than it are not detected until it can"
			// The least-privilege ACLs of security.md leave DescribeConfigs
			// out: say so in words, without Kafka's error code, which
			// operators search logs for (as reader.WarnLimitsUnread does).
			if errors.Is(err, kerr.TopicAuthorizationFailed) {
				s.log.Warn(msg, "topics", topics, "why", "the principal may not describe these topics' configs (grant DescribeConfigs on them to check)")
			} else {
				s.log.Warn(msg, "topics", topics, "err", err)
			}
		}
	}
}

// parseTopicTimes reads a topic's time settings from its configs.
func parseTopicTimes(cs []kadm.Config) topicTimes {
	var tt topicTimes
	deletes := true // cleanup.policy's default is delete
	for _, c := range cs {
		v := c.MaybeValue()
		switch c.Key {
		case "retention.ms":
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms > 0 {
				tt.retention = time.Duration(ms) * time.Millisecond
			}
		case "message.timestamp.type":
			tt.logAppend = v == "LogAppendTime"
		case "cleanup.policy":
			// retention.ms deletes only under the delete policy
			// ("delete" or "compact,delete"); a compacted-only topic
			// keeps each key's latest record whatever its age.
			deletes = slices.Contains(strings.Split(strings.ReplaceAll(v, " ", ""), ","), "delete")
		}
	}
	if !deletes {
		tt.retention = 0
	}
	return tt
}

// noteOld is called with each output the broker acknowledged in the open
// transaction: one that retention may delete before it is read is noted,
// for afterCommit. Dead letters take the time of writing; changelog
// records are the state's.
func (t *txn) noteOld(r *kgo.Record) {
	s := t.stage
	if r.Topic == s.cfg.DeadLetter || s.cfg.OutputTimestamp == topology.OutputTimestampWrite {
		return
	}
	topics := s.outTimes.topics.Load()
	if topics == nil {
		return
	}
	tt, ok := (*topics)[r.Topic]
	if !ok {
		if cl := s.changelog(); cl != "" && r.Topic == cl {
			return
		}
		s.outTimes.mu.Lock()
		s.outTimes.seen[r.Topic] = true // a route step's topic
		s.outTimes.mu.Unlock()
		return
	}
	if tt.readableFor(r.Timestamp, t.started) {
		return
	}
	k := outPartition{r.Topic, r.Partition}
	t.mu.Lock()
	if t.old == nil {
		t.old = agedOutputs{}
	}
	o, seen := t.old[k]
	if !seen {
		o = agedOutput{offset: r.Offset, timestamp: r.Timestamp, retention: tt.retention}
	}
	o.n++
	o.last = max(o.last, r.Offset)
	t.old[k] = o
	t.mu.Unlock()
}

// committedOld counts the old outputs of a committed transaction and
// warns once per output partition.
func (s *Stage) committedOld(old agedOutputs) {
	s.recordOld(old)
	for k, o := range old {
		s.metrics.countPastRetention(k.topic, o.n)
		ot := &s.outTimes
		ot.mu.Lock()
		if ot.warned == nil {
			ot.warned = map[outPartition]bool{}
		}
		first := !ot.warned[k]
		ot.warned[k] = true
		ot.mu.Unlock()
		if first {
			s.log.Warn("outputs are older than their topic's retention allows: the broker may delete them before they are read; "+
				"set stages[].output_timestamp: write, or raise the topic's retention.ms (warned once per partition, counted in exactly_stage_outputs_past_retention_total)",
				"topic", k.topic, "partition", k.p, "offset", o.offset, "timestamp", o.timestamp.UTC().Format(time.RFC3339Nano),
				"retention", o.retention.String(), "records", o.n)
		}
	}
}

// outputTimestamp is the timestamp of an output of an input with
// timestamp in: in, or the zero time, which the producer replaces with
// the time of writing.
func (s *Stage) outputTimestamp(in time.Time) time.Time {
	if s.cfg.OutputTimestamp == topology.OutputTimestampWrite {
		return time.Time{}
	}
	return in
}

// redrivenEventTime gives a record that `exactly redrive` wrote back its
// original timestamp (deadletter.HeaderRedriveTimestamp): redrive writes
// it with the time of writing, so that the input topic's retention
// counts from then, and the stage's steps, windows and outputs see the
// record as it first came.
func redrivenEventTime(r *kgo.Record) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == deadletter.HeaderRedriveTimestamp {
			if ms, err := strconv.ParseInt(string(r.Headers[i].Value), 10, 64); err == nil {
				r.Timestamp = time.UnixMilli(ms)
			}
			return
		}
	}
}
