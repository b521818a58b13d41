package stage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// The resume guard. A stage resumes from its group's committed offsets; a
// partition with none starts at its earliest offset. That is right for a
// new stage, and wrong for one whose offsets are gone while its outputs
// are not: offsets expired (offsets.retention.minutes, 7 days by default,
// counted from when the group became empty), the group was deleted, or the
// group name changed with the stage's name. Reprocessing from the earliest
// offset would then write every output again. So before its first session
// the stage looks at the tail of its output and dead-letter topics: if any
// record there carries this stage's lineage for an input partition that
// has no committed offset (or, in the output topic, another stage's
// lineage from this input: this stage before a rename), Run refuses with a
// *ResumeError, which names `exactly reset` and the offsets after the
// highest source offsets found.

// guardScanRecords is how many records at the end of each output and
// dead-letter partition the guard reads. Outputs are written in input
// order, so the newest output of a partition is at the tail; a shared
// output topic whose tail holds only other stages' records hides this
// stage's older ones (see cli.md, "Resume guard").
const guardScanRecords = 1000

// guardIdlePolls ends a tail scan after this many empty polls of
// guardPollWait each: records of aborted transactions at the very end of a
// partition are never returned, so the end may be unreachable.
const (
	guardIdlePolls = 3
	guardPollWait  = time.Second
)

// checkResume runs the resume guard (see above). Errors reaching Kafka are
// retried with backoff until ctx ends (nil is returned then); the refusal
// is a *ResumeError. An at-least-once stage is not guarded: it writes
// outputs before it commits their offsets, so outputs without offsets are
// its normal state after a crash, and repeats are its contract.
func (s *Stage) checkResume(ctx context.Context) error {
	if s.cfg.Guarantee == AtLeastOnce {
		return nil
	}
	backoff := backoff.NewBackoff(100*time.Millisecond, 10*time.Second)
	for {
		err := s.guard(ctx)
		var re *ResumeError
		if err == nil || errors.As(err, &re) || kafkaconn.IsFatal(err) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		wait := backoff.Next()
		s.log.Warn("resume guard: cannot read offsets; retrying", "topic", s.cfg.Input, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (s *Stage) guard(ctx context.Context) error {
	cl, err := kgo.NewClient(append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID),
		append([]kgo.Opt{kgo.WithLogger(kafkaconn.KafkaLogger(s.log))}, s.kopts...)...)...)
	if err != nil {
		return &fault.ConfigError{Err: fmt.Errorf("kafka client: %w", err)}
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	td, missing, err := s.guardedPartitions(ctx, adm)
	if err != nil || len(missing) == 0 {
		return err
	}
	found, renamedFrom, err := s.scanLineage(ctx, adm, cl, missing)
	if err != nil {
		return err
	}
	if len(found) > 0 {
		// Offsets committed while we scanned (a transaction's outputs
		// can turn visible before its offsets do) are not lost.
		if missing, err = s.uncommitted(ctx, adm, td); err != nil {
			return err
		}
	}
	re, err := s.resumeError(ctx, adm, cl, missing, found, renamedFrom)
	if re == nil || err != nil {
		return err
	}
	s.noteDeletedBeforeResume(ctx, re, [16]byte(td.ID))
	return re
}

// noteDeletedBeforeResume records in the reset log the input records
// that were deleted (retention.ms, DeleteRecords) after the last one the
// outputs show read and before the log start: the stage never read them,
// so they are lost whatever position the user resumes at, and `exactly
// verify` must say so even after a reset to the earliest offset. The
// refusal's suggested offsets start at the log start, which `exactly
// reset` accepts. A failed write is said in the refusal, not retried: the
// stage does not start anyway.
func (s *Stage) noteDeletedBeforeResume(ctx context.Context, re *ResumeError, topicID [16]byte) {
	if len(re.Deleted) == 0 {
		return
	}
	var ranges []resetlog.Partition
	for _, p := range slices.Sorted(maps.Keys(re.Deleted)) {
		ranges = append(ranges, re.Deleted[p])
	}
	if err := s.recordDeletedUnread(ctx, topicID, ranges); err != nil {
		re.NotRecorded = err
		return
	}
	s.log.Warn("input records were deleted before the stage read them; recorded the ranges in the reset log, where exactly verify reports them as lost",
		"topic", s.cfg.Input, "ranges", ranges, "log_topic", resetlog.Topic)
}

// guardedPartitions returns the input topic and its partitions without a
// committed offset, for a group without members; none when the input
// topic is missing (the session's to report) or the group is alive (its
// partitions without offsets are being read by its members, another
// instance joining, not lost).
func (s *Stage) guardedPartitions(ctx context.Context, adm *kadm.Client) (kadm.TopicDetail, map[int32]bool, error) {
	tds, err := adm.ListTopics(ctx, s.cfg.Input)
	if err != nil {
		return kadm.TopicDetail{}, nil, fmt.Errorf("describe %s: %w", s.cfg.Input, err)
	}
	td, ok := tds[s.cfg.Input]
	if !ok || td.Err != nil {
		return td, nil, nil
	}
	described, err := adm.DescribeGroups(ctx, s.cfg.Group())
	if err != nil {
		return td, nil, fmt.Errorf("describe group %s: %w", s.cfg.Group(), err)
	}
	if g, ok := described[s.cfg.Group()]; ok && g.Err == nil && len(g.Members) > 0 {
		return td, nil, nil
	}
	missing, err := s.uncommitted(ctx, adm, td)
	return td, missing, err
}

// scanLineage reads the tails of the output and dead-letter topics for
// records written from the missing input partitions: found holds them by
// input partition, renamedFrom the stages (this stage before a rename)
// whose outputs are in this stage's output topic, with one such output.
func (s *Stage) scanLineage(ctx context.Context, adm *kadm.Client, cl *kgo.Client, missing map[int32]bool) (found map[int32][]lineage, renamedFrom map[string]string, err error) {
	found = map[int32][]lineage{} // input partition -> the outputs seen of it
	// Dead letters that other stages wrote from this input, by stage: a
	// shared dead-letter topic's say nothing of this stage, but those of
	// a stage whose outputs are in this stage's output topic (this stage
	// before a rename) do.
	others := map[string][]lineage{}
	renamedFrom = map[string]string{} // stage -> one of its outputs in this stage's output topic
	for _, topic := range []string{s.cfg.Output, s.cfg.DeadLetter} {
		err := scanTail(ctx, adm, cl, topic, guardScanRecords, func(r *kgo.Record) {
			l, ok := s.lineageOf(r)
			if !ok || !missing[l.partition] {
				return
			}
			switch {
			case l.stage == s.cfg.Stage:
			case r.Topic == s.cfg.Output:
				renamedFrom[l.stage] = l.where
			default:
				others[l.stage] = append(others[l.stage], l)
				return
			}
			found[l.partition] = append(found[l.partition], l)
		})
		if err != nil {
			return nil, nil, err
		}
	}
	for st := range renamedFrom {
		for _, l := range others[st] {
			found[l.partition] = append(found[l.partition], l)
		}
	}
	return found, renamedFrom, nil
}

// resumeError is the *ResumeError of the missing partitions with outputs
// found from the current incarnation of the input topic; nil if none has.
func (s *Stage) resumeError(ctx context.Context, adm *kadm.Client, cl *kgo.Client, missing map[int32]bool, found map[int32][]lineage, renamedFrom map[string]string) (*ResumeError, error) {
	re := &ResumeError{Stage: s.cfg.Stage, Group: s.cfg.Group(), Input: s.cfg.Input, Found: map[int32]int64{}, Deleted: map[int32]resetlog.Partition{}}
	var starts, ends kadm.ListedOffsets
	for p, ls := range found {
		if !missing[p] {
			continue
		}
		if starts == nil {
			// The input's offsets, listed once for every partition.
			var err error
			if starts, ends, err = s.inputOffsets(ctx, adm); err != nil {
				return nil, err
			}
		}
		l, ok, err := s.current(ctx, cl, starts, ends, p, ls)
		if err != nil {
			return nil, err
		}
		if !ok {
			// The input topic was deleted and created again (Kafka deletes
			// a deleted topic's group offsets), and nothing was written
			// from the new topic: it is read from its start, as operating.md
			// "Topic identity and start positions" says.
			s.log.Info("resume guard: outputs of partition came from an earlier incarnation of the input topic; starting it at the earliest offset",
				"topic", s.cfg.Input, "partition", p, "output", ls[0].where)
			continue
		}
		re.Found[p] = l.offset
		if st, _ := starts.Lookup(s.cfg.Input, p); l.offset+1 < st.Offset {
			re.Deleted[p] = resetlog.Partition{Partition: p, From: l.offset + 1, To: st.Offset}
		}
		if re.Where == "" {
			re.Where = l.where
		}
		if where, ok := renamedFrom[l.stage]; ok && re.Other == "" {
			re.Other, re.Where = l.stage, where // the output the refusal cites
		}
	}
	if len(re.Found) == 0 {
		return nil, nil
	}
	re.Missing = slices.Sorted(maps.Keys(missing))
	return re, nil
}

// uncommitted returns the partitions of td without a committed offset in
// the stage's group. A transaction's offsets show here once it completed.
func (s *Stage) uncommitted(ctx context.Context, adm *kadm.Client, td kadm.TopicDetail) (map[int32]bool, error) {
	fetched, err := adm.FetchOffsetsForTopics(ctx, s.cfg.Group(), s.cfg.Input)
	if err == nil {
		err = fetched.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", s.cfg.Group(), err)
	}
	missing := map[int32]bool{}
	for p := range td.Partitions {
		if o, ok := fetched.Lookup(s.cfg.Input, p); !ok || o.Err != nil || o.At < 0 {
			missing[p] = true
		}
	}
	return missing, nil
}

// lineage is where an output or a dead letter of this stage came from.
type lineage struct {
	partition int32
	offset    int64
	timestamp time.Time // the input record's: outputs keep it, dead letters name it
	where     string    // the output's topic/partition@offset
	// stage wrote it: this stage, or another that wrote this stage's
	// output topic from its input (this stage before a rename).
	stage string
}

// lineageOf returns where r, an output or a dead letter, came from, if a
// stage wrote it from this stage's input: this stage, or another one (the
// guard counts another's in this stage's output topic: this stage before
// a rename, whose group was exactly-<old name>; or, rarely, another stage
// writing the same topic from the same input; and then that stage's dead
// letters too).
func (s *Stage) lineageOf(r *kgo.Record) (lineage, bool) {
	var stage, topic, part, off string
	ts := r.Timestamp
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderLineageStage, deadletter.HeaderStage:
			stage = string(h.Value)
		case HeaderLineageTopic, deadletter.HeaderSourceTopic:
			topic = string(h.Value)
		case HeaderLineagePartition, deadletter.HeaderSourcePartition:
			part = string(h.Value)
		case HeaderLineageOffset, deadletter.HeaderSourceOffset:
			off = string(h.Value)
		case deadletter.HeaderSourceTimestamp, HeaderLineageTimestamp:
			if ms, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				ts = time.UnixMilli(ms)
			}
		}
	}
	if topic != s.cfg.Input || stage == "" {
		return lineage{}, false
	}
	p, perr := strconv.ParseInt(part, 10, 32)
	o, oerr := strconv.ParseInt(off, 10, 64)
	return lineage{partition: int32(p), offset: o, timestamp: ts, where: fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset), stage: stage},
		perr == nil && oerr == nil
}

// inputOffsets lists the input's log start offsets and last stable
// offsets.
func (s *Stage) inputOffsets(ctx context.Context, adm *kadm.Client) (starts, ends kadm.ListedOffsets, err error) {
	starts, err = adm.ListStartOffsets(ctx, s.cfg.Input)
	if err == nil {
		err = starts.Error()
	}
	if err == nil {
		ends, err = adm.ListCommittedOffsets(ctx, s.cfg.Input)
	}
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list offsets of %s: %w", s.cfg.Input, err)
	}
	return starts, ends, nil
}

// guardMaxChecks bounds the input records the guard reads per partition
// to find the outputs of the input topic as it is now.
const guardMaxChecks = 1000

// current returns, of ls (the outputs seen of input partition p), the one
// of the highest source offset that came from the input topic as it is
// now, ok false if none did. An output came from it if its source offset
// holds a committed record with the output's timestamp (outputs keep their
// input's timestamp; dead letters name it). An offset the partition does
// not reach is another incarnation's; one that retention deleted cannot
// be checked and counts as this one's. The outputs of an earlier
// incarnation of a recreated topic may carry higher source offsets than
// any of this one's (trusting only the highest would start the partition
// from its earliest offset and write its outputs twice), so each
// candidate is checked, highest first.
func (s *Stage) current(ctx context.Context, base *kgo.Client, starts, ends kadm.ListedOffsets, p int32, ls []lineage) (lineage, bool, error) {
	st, _ := starts.Lookup(s.cfg.Input, p)
	end, _ := ends.Lookup(s.cfg.Input, p)
	slices.SortStableFunc(ls, func(a, b lineage) int { return cmp.Compare(b.offset, a.offset) })
	read := map[int64]int64{} // offset -> the record's timestamp (ms); -1: none there
	for _, l := range ls {
		switch {
		case l.offset >= end.Offset:
			continue
		case l.offset < st.Offset:
			return l, true, nil
		}
		ts, ok := read[l.offset]
		if !ok {
			if len(read) >= guardMaxChecks {
				s.log.Warn("resume guard: no output of partition matched the input topic within the records checked; starting it at the earliest offset",
					"topic", s.cfg.Input, "partition", p, "checked", len(read))
				break
			}
			ts = -1
			err := scanRange(ctx, base, s.cfg.Input, p, l.offset, l.offset, func(r *kgo.Record) {
				if ts == -1 && r.Offset == l.offset && !r.Attrs.IsControl() {
					redrivenEventTime(r) // as the stage read it
					ts = r.Timestamp.UnixMilli()
				}
			})
			if err != nil {
				return lineage{}, false, err
			}
			read[l.offset] = ts
		}
		if ts == l.timestamp.UnixMilli() {
			return l, true, nil
		}
	}
	return lineage{}, false, nil
}

// scanTail reads up to n records at the end of each partition of topic,
// read_committed, and calls fn with each data record.
func scanTail(ctx context.Context, adm *kadm.Client, base *kgo.Client, topic string, n int64, fn func(*kgo.Record)) error {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	from := map[int32]kgo.Offset{}
	last := map[int32]int64{} // the last offset to read
	ends.Each(func(e kadm.ListedOffset) {
		st, _ := starts.Lookup(topic, e.Partition)
		begin := max(st.Offset, e.Offset-n)
		if e.Offset > begin {
			from[e.Partition] = kgo.NewOffset().At(begin)
			last[e.Partition] = e.Offset - 1
		}
	})
	if len(from) == 0 {
		return nil
	}
	opts := append(slices.Clip(base.Opts()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	for idle := 0; len(last) > 0 && idle < guardIdlePolls; {
		pollCtx, cancel := context.WithTimeout(ctx, guardPollWait)
		fs := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return fmt.Errorf("read %s: %w", topic, ferr)
		}
		if fs.NumRecords() == 0 {
			idle++
			continue
		}
		idle = 0
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				fn(r)
			}
			if l, ok := last[r.Partition]; ok && r.Offset >= l {
				delete(last, r.Partition)
			}
		})
	}
	return nil
}

// scanRange reads partition p of topic from offset from until it has
// seen offset last (or gives up after guardIdlePolls empty polls),
// read_committed, and calls fn with every record, control records too.
func scanRange(ctx context.Context, base *kgo.Client, topic string, p int32, from, last int64, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(append(slices.Clip(base.Opts()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(from)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	for idle := 0; idle < guardIdlePolls; {
		pollCtx, cancel := context.WithTimeout(ctx, guardPollWait)
		fs := cl.PollFetches(pollCtx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fs.NumRecords() == 0 {
			idle++
			continue
		}
		idle = 0
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			fn(r)
			done = done || r.Offset >= last
		})
		if done {
			return nil
		}
	}
	return nil
}

// ResumeError is the resume guard's refusal: the stage's group has no
// committed offsets for input partitions Missing, while its output or
// dead-letter topic holds records it wrote from them.
type ResumeError struct {
	Stage, Group, Input string
	Missing             []int32         // input partitions without a committed offset
	Found               map[int32]int64 // of those, the highest source offset seen in outputs
	Where               string          // topic/partition@offset of one such output
	// Other is the stage named by such an output when it is not this one
	// (this stage's name before a rename); "" if all are this stage's.
	Other string
	// Deleted holds, by partition, the offsets after Found that the
	// broker deleted before the stage read them: lost, and recorded in
	// the reset log unless NotRecorded says why not.
	Deleted     map[int32]resetlog.Partition
	NotRecorded error
}

// resumeAt is where the refusal suggests partition p resumes: after the
// last record found, or at the log start when the records after it were
// deleted.
func (e *ResumeError) resumeAt(p int32) int64 {
	if d, ok := e.Deleted[p]; ok {
		return d.To
	}
	return e.Found[p] + 1
}

// deletedText says which records were lost to deletion, or "".
func (e *ResumeError) deletedText() string {
	if len(e.Deleted) == 0 {
		return ""
	}
	var ranges []string
	for _, p := range slices.Sorted(maps.Keys(e.Deleted)) {
		d := e.Deleted[p]
		ranges = append(ranges, fmt.Sprintf("partition %d offsets %d to %d", p, d.From, d.To-1))
	}
	recorded := "they are recorded in " + resetlog.Topic + ", and exactly verify reports them as lost"
	if e.NotRecorded != nil {
		recorded = fmt.Sprintf("recording them in %s failed (%v): exactly verify cannot report them", resetlog.Topic, e.NotRecorded)
	}
	return fmt.Sprintf(". The broker deleted input records the stage never read (%s): %s", strings.Join(ranges, ", "), recorded)
}

func (e *ResumeError) Error() string {
	parts := slices.Sorted(maps.Keys(e.Found))
	var offsets []string
	for _, p := range parts {
		offsets = append(offsets, fmt.Sprintf("%d=%d", p, e.resumeAt(p)))
	}
	if e.Other != "" {
		return fmt.Sprintf("%s: group %s has no committed offsets for %s partitions %v, but its output topic holds what stage %q wrote from them (e.g. %s); "+
			"if this stage was renamed from %q, starting from the earliest offset would write them again: exactly reset --stage %s --to-offsets %s --execute "+
			"resumes after the last records found. If %q is another stage that writes the same topic from the same input, "+
			"exactly reset --stage %s --to-earliest --execute starts this one from the start on purpose%s",
			ErrNoCommittedOffsets, e.Group, e.Input, e.Missing, e.Other, e.Where, e.Other, e.Stage, strings.Join(offsets, ","), e.Other, e.Stage, e.deletedText())
	}
	return fmt.Sprintf("%s: group %s has no committed offsets for %s partitions %v, but its outputs of partitions %v are already written (e.g. %s); "+
		"starting from the earliest offset would write them again. Choose where to resume with exactly reset --stage %s "+
		"(--to-offsets %s resumes after the last records found; --to-earliest reprocesses on purpose) --execute%s",
		ErrNoCommittedOffsets, e.Group, e.Input, e.Missing, parts, e.Where, e.Stage, strings.Join(offsets, ","), e.deletedText())
}

func (e *ResumeError) Unwrap() error { return ErrNoCommittedOffsets }
