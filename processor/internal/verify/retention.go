package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/reset"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// DeletedUnread is a range of offsets of a partition whose records the
// broker deleted (retention.ms, a DeleteRecords) before the stage or sink
// reading it got to them, or outputs a stage wrote that were deleted
// before anyone in the topology could read them. The records were
// written (by a producer, a stage upstream, or `exactly redrive`) and are
// gone unread. They cannot be read any more, so they are counted as
// offsets: transaction markers among them count too.
type DeletedUnread struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Position  int64  `json:"position"`  // the first offset deleted unread: the group's committed offset, the sink's stored position, 0 without one
	LogStart  int64  `json:"log_start"` // the end of the range: the partition's first offset when verify read it, or the recorded range's end
	// NoPosition: the group committed no offset (or the sink stored no
	// position) on the partition, and its log start is past 0.
	NoPosition bool `json:"no_position,omitempty"`
	// Recorded: the reader recorded the range in the reset log when it
	// found it (resetlog.CauseDeletedUnread); its position may be past it
	// since.
	Recorded bool `json:"recorded,omitempty"`
}

// Offsets is how many offsets were deleted unread.
func (d DeletedUnread) Offsets() int64 { return d.LogStart - d.Position }

// deletedUnread returns the ranges of topic that a reader never read,
// sorted by partition and offset: for each partition in starts (its log
// start), [position, log start) when its position in positions is below
// it, [0, log start) when it has none and the log start is past 0, and
// the ranges it recorded (resetlog.CauseDeletedUnread), merged. The
// ranges below where a reader first started (no position) count only when
// written: the topology writes topic (a stage's output or dead letters).
// Of a topic written outside it, they are the history its producers had
// before the reader existed, which retention was free to delete.
func deletedUnread(topic string, written bool, positions, starts map[int32]int64, recorded map[int32][]resetlog.Partition) []DeletedUnread {
	var out []DeletedUnread
	for p, st := range starts {
		var rs []DeletedUnread
		pos, ok := positions[p]
		switch {
		case !ok && st > 0 && written:
			rs = append(rs, DeletedUnread{Topic: topic, Partition: p, Position: 0, LogStart: st, NoPosition: true})
		case ok && pos >= 0 && pos < st:
			rs = append(rs, DeletedUnread{Topic: topic, Partition: p, Position: pos, LogStart: st})
		}
		for _, r := range recorded[p] {
			if r.NoPosition && !written {
				continue
			}
			rs = append(rs, DeletedUnread{Topic: topic, Partition: p, Position: r.From, LogStart: r.To, Recorded: true, NoPosition: r.NoPosition})
		}
		out = append(out, mergeRanges(rs)...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Position < out[j].Position
	})
	return out
}

// mergeRanges merges the overlapping or touching ranges of one partition.
func mergeRanges(rs []DeletedUnread) []DeletedUnread {
	if len(rs) < 2 {
		return rs
	}
	slices.SortFunc(rs, func(a, b DeletedUnread) int { return int(a.Position - b.Position) })
	out := rs[:1]
	for _, r := range rs[1:] {
		last := &out[len(out)-1]
		if r.Position > last.LogStart {
			out = append(out, r)
			continue
		}
		last.LogStart = max(last.LogStart, r.LogStart)
		last.Recorded = last.Recorded || r.Recorded
		last.NoPosition = last.NoPosition || r.NoPosition
	}
	return out
}

// readDeleted reads the ranges the stages and sinks recorded in the reset
// log as deleted before they read them, and the outputs the stages
// recorded as written past their topic's retention. It runs after the
// positions are read: a reader records a range before its position
// passes it, so a position read before is either below the range (seen
// as lagging) or the range is in the log read after.
func (p *plan) readDeleted(ctx context.Context, adm *kadm.Client, cfg Config) error {
	entries, err := reset.ReadLog(ctx, cfg.KafkaOptions)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		cfg.Logger.Warn("cannot read the reset log: input that readers recorded as deleted unread is seen only while their positions lag", "topic", reset.LogTopic, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	id, err := topicIDs(ctx, adm, p.topics())
	if err != nil {
		return err
	}
	for _, c := range p.rep.Stages {
		c.recorded = resetlog.Ranges(entries, resetlog.CauseDeletedUnread, resetlog.Entry{Kind: "stage", Name: c.Name, Topic: c.Input, TopicID: id(c.Input)})
		c.pastRetention = map[string]map[int32][]resetlog.Partition{}
		for _, o := range c.Outputs {
			c.pastRetention[o] = resetlog.Ranges(entries, resetlog.CausePastRetention, resetlog.Entry{Kind: "stage", Name: c.Name, Topic: o, TopicID: id(o)})
		}
	}
	for _, c := range p.rep.Sinks {
		positions := pgsink.SinkConfig(cfg.Topology, &c.cfg, "verify").PositionsTable
		c.recorded = resetlog.Ranges(entries, resetlog.CauseDeletedUnread, resetlog.Entry{Kind: "sink", Name: c.Name, PositionsTable: positions,
			Topic: c.Input, TopicID: id(c.Input)})
	}
	return nil
}

// topicIDs returns a function giving each of topics' IDs as the reset log
// writes them ("" for a topic not found).
func topicIDs(ctx context.Context, adm *kadm.Client, topics []string) (func(string) string, error) {
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("verify: describe topics: %w", err)
	}
	return func(topic string) string {
		td, ok := tds[topic]
		if !ok || td.Err != nil {
			return ""
		}
		return kadm.TopicID(td.ID).String()
	}, nil
}

// checkDeletedUnread finds, for each stage and sink, the input records
// deleted before it read them, and for each stage the outputs it wrote
// past their topic's retention that were deleted from a topic no stage or
// sink of the topology reads, and makes each a problem: verify never says
// OK while a record that was written is gone unread. starts are the log
// start offsets of the topics read, by topic.
func (r *Report) checkDeletedUnread(starts map[string]map[int32]int64) {
	read, written := map[string]bool{}, map[string]bool{}
	for _, c := range r.Stages {
		read[c.Input] = true
		for _, o := range c.Outputs {
			written[o] = true
		}
		if c.DeadLetter != "" {
			written[c.DeadLetter] = true
		}
	}
	for _, c := range r.Sinks {
		read[c.Input] = true
	}
	for _, c := range r.Stages {
		c.DeletedUnread = deletedUnread(c.Input, written[c.Input], c.group, starts[c.Input], c.recorded)
		for _, d := range c.DeletedUnread {
			r.Problems = append(r.Problems, deletedProblem("stage "+c.Name, "group committed offset", d))
		}
		for _, o := range c.Outputs {
			if read[o] {
				continue // its readers' positions tell what they read
			}
			c.DeletedOutputs = append(c.DeletedOutputs, deletedOutputs(o, c.pastRetention[o], starts[o])...)
		}
		for _, d := range c.DeletedOutputs {
			r.Problems = append(r.Problems, fmt.Sprintf("%s/%d: stage %s wrote offsets %d to %d older than the topic's retention.ms allows, and they were deleted; "+
				"no stage or sink of the topology reads %s, so nothing tells that anyone read them (set stages[].output_timestamp: write, or raise the topic's retention.ms)",
				d.Topic, d.Partition, c.Name, d.Position, d.LogStart-1, d.Topic))
		}
	}
	for _, c := range r.Sinks {
		c.DeletedUnread = deletedUnread(c.Input, written[c.Input], c.positions, starts[c.Input], c.recorded)
		for _, d := range c.DeletedUnread {
			r.Problems = append(r.Problems, deletedProblem("sink "+c.Name, "stored position", d))
		}
	}
}

// deletedOutputs returns the parts of the ranges past (outputs written
// past retention) of topic that lie below the log starts in starts.
func deletedOutputs(topic string, past map[int32][]resetlog.Partition, starts map[int32]int64) []DeletedUnread {
	var out []DeletedUnread
	for p, rs := range past {
		st, ok := starts[p]
		if !ok {
			continue
		}
		for _, rg := range rs {
			if end := min(rg.To, st); rg.From < end {
				out = append(out, DeletedUnread{Topic: topic, Partition: p, Position: rg.From, LogStart: end, Recorded: true})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Position < out[j].Position
	})
	return out
}

func deletedProblem(who, position string, d DeletedUnread) string {
	const why = "(a redrive into a topic with a short retention.ms, a stage or sink stopped longer than it, or records written with old timestamps)"
	switch {
	case d.Recorded:
		return fmt.Sprintf("%s/%d: %s found offsets %d to %d deleted (retention.ms, or records deleted) before it read them, as the reset log %s records: "+
			"their records are lost to it %s", d.Topic, d.Partition, who, d.Position, d.LogStart-1, reset.LogTopic, why)
	case d.NoPosition:
		return fmt.Sprintf("%s/%d: %s has no %s, and the log start offset is %d: %d offsets were deleted (retention.ms, or records deleted) before it read any; "+
			"their records are lost to it %s; to start a reader past records deleted on purpose, set its position first with exactly reset",
			d.Topic, d.Partition, who, position, d.LogStart, d.Offsets(), why)
	}
	return fmt.Sprintf("%s/%d: %s's %s is %d, below the log start offset %d: %d offsets were deleted (retention.ms, or records deleted) before they were read; "+
		"their records are lost to it %s", d.Topic, d.Partition, who, position, d.Position, d.LogStart, d.Offsets(), why)
}
