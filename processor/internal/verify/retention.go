package verify

import (
	"fmt"
	"sort"
)

// DeletedUnread is an input partition whose records the broker deleted
// (retention.ms, a DeleteRecords) before the stage or sink reading it got
// to them: its committed offset or stored position is below the
// partition's log start offset. The records in between were written
// (by a producer, a stage upstream, or `exactly redrive`) and are gone
// unread. They cannot be read any more, so they are counted as offsets:
// transaction markers among them count too.
type DeletedUnread struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Position  int64  `json:"position"`  // the group's committed offset, or the sink's stored position
	LogStart  int64  `json:"log_start"` // the partition's first offset when verify read it
}

// Offsets is how many offsets were deleted unread.
func (d DeletedUnread) Offsets() int64 { return d.LogStart - d.Position }

// deletedUnread returns the partitions of topic whose position in
// positions is below their start in starts, sorted by partition. A
// partition without a position is left out: where a stage or sink that
// never committed starts is its own rule, and records deleted before it
// ever ran are no loss of its.
func deletedUnread(topic string, positions, starts map[int32]int64) []DeletedUnread {
	var out []DeletedUnread
	for p, pos := range positions {
		if st, ok := starts[p]; ok && pos >= 0 && pos < st {
			out = append(out, DeletedUnread{Topic: topic, Partition: p, Position: pos, LogStart: st})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// checkDeletedUnread finds, for each stage and sink, the input records
// deleted before it read them, and makes each such partition a problem:
// verify never says OK while a record that was written is gone unread.
// starts are the log start offsets of the topics read, by topic.
func (r *Report) checkDeletedUnread(starts map[string]map[int32]int64) {
	for _, c := range r.Stages {
		c.DeletedUnread = deletedUnread(c.Input, c.group, starts[c.Input])
		for _, d := range c.DeletedUnread {
			r.Problems = append(r.Problems, deletedProblem("stage "+c.Name+"'s group committed offset", d))
		}
	}
	for _, c := range r.Sinks {
		c.DeletedUnread = deletedUnread(c.Input, c.positions, starts[c.Input])
		for _, d := range c.DeletedUnread {
			r.Problems = append(r.Problems, deletedProblem("sink "+c.Name+"'s stored position", d))
		}
	}
}

func deletedProblem(whose string, d DeletedUnread) string {
	return fmt.Sprintf("%s/%d: %s is %d, below the log start offset %d: %d offsets were deleted (retention.ms, or records deleted) before they were read; "+
		"their records are lost to it (a redrive into a topic with a short retention.ms, or a stage stopped longer than it)",
		d.Topic, d.Partition, whose, d.Position, d.LogStart, d.Offsets())
}
