package processor

import (
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

	"github.com/exactly-io/exactly/processor/kit"
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
// has no committed offset, Run refuses with a *ResumeError, which names
// `exactly reset` and the offsets after the highest source offsets found.

// guardScanRecords is how many records at the end of each output and
// dead-letter partition the guard reads. Outputs are written in input
// order, so the newest output of a partition is at the tail; a shared
// output topic whose tail holds only other stages' records hides this
// stage's older ones (see the README, "Resume guard").
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
	backoff := kit.NewBackoff(100*time.Millisecond, 10*time.Second)
	for {
		err := s.guard(ctx)
		var re *ResumeError
		if err == nil || errors.As(err, &re) || kit.IsFatal(err) {
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
	cl, err := kgo.NewClient(append(kit.ClientOpts(s.cfg.Brokers, s.cfg.ClientID),
		append([]kgo.Opt{kgo.WithLogger(kit.KafkaLogger(s.log))}, s.kopts...)...)...)
	if err != nil {
		return &kit.ConfigError{Err: fmt.Errorf("kafka client: %w", err)}
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	tds, err := adm.ListTopics(ctx, s.cfg.Input)
	if err != nil {
		return fmt.Errorf("describe %s: %w", s.cfg.Input, err)
	}
	td, ok := tds[s.cfg.Input]
	if !ok || td.Err != nil {
		// A missing input topic is the session's to report.
		return nil
	}
	fetched, err := adm.FetchOffsetsForTopics(ctx, s.cfg.Group(), s.cfg.Input)
	if err == nil {
		err = fetched.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("fetch offsets of group %s: %w", s.cfg.Group(), err)
	}
	missing := map[int32]bool{}
	for p := range td.Partitions {
		if o, ok := fetched.Lookup(s.cfg.Input, p); !ok || o.Err != nil || o.At < 0 {
			missing[p] = true
		}
	}
	if len(missing) == 0 {
		return nil
	}
	found := map[int32]int64{} // input partition -> highest source offset seen
	var where string
	for _, topic := range []string{s.cfg.Output, s.cfg.DeadLetter} {
		err := scanTail(ctx, adm, cl, topic, guardScanRecords, func(r *kgo.Record) {
			p, off, ok := s.lineageOf(r)
			if !ok || !missing[p] {
				return
			}
			if cur, seen := found[p]; !seen || off > cur {
				found[p] = off
			}
			if where == "" {
				where = fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
			}
		})
		if err != nil {
			return err
		}
	}
	if len(found) == 0 {
		if len(missing) < len(td.Partitions) {
			s.log.Info("input partitions without committed offsets start at the earliest offset", "topic", s.cfg.Input, "partitions", slices.Sorted(maps.Keys(missing)))
		}
		return nil
	}
	return &ResumeError{Stage: s.cfg.Stage, Group: s.cfg.Group(), Input: s.cfg.Input, Missing: slices.Sorted(maps.Keys(missing)), Found: found, Where: where}
}

// lineageOf returns the input partition and offset that r, an output or a
// dead letter, says it came from, if this stage wrote it from its input.
func (s *Stage) lineageOf(r *kgo.Record) (partition int32, offset int64, ok bool) {
	var stage, topic, part, off string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderLineageStage, kit.HeaderStage:
			stage = string(h.Value)
		case HeaderLineageTopic, kit.HeaderSourceTopic:
			topic = string(h.Value)
		case HeaderLineagePartition, kit.HeaderSourcePartition:
			part = string(h.Value)
		case HeaderLineageOffset, kit.HeaderSourceOffset:
			off = string(h.Value)
		}
	}
	if stage != s.cfg.Stage || topic != s.cfg.Input {
		return 0, 0, false
	}
	p, perr := strconv.ParseInt(part, 10, 32)
	o, oerr := strconv.ParseInt(off, 10, 64)
	return int32(p), o, perr == nil && oerr == nil
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

// ResumeError is the resume guard's refusal: the stage's group has no
// committed offsets for input partitions Missing, while its output or
// dead-letter topic holds records it wrote from them.
type ResumeError struct {
	Stage, Group, Input string
	Missing             []int32         // input partitions without a committed offset
	Found               map[int32]int64 // of those, the highest source offset seen in outputs
	Where               string          // topic/partition@offset of one such output
}

func (e *ResumeError) Error() string {
	parts := slices.Sorted(maps.Keys(e.Found))
	var offsets []string
	for _, p := range parts {
		offsets = append(offsets, fmt.Sprintf("%d=%d", p, e.Found[p]+1))
	}
	return fmt.Sprintf("%s: group %s has no committed offsets for %s partitions %v, but its outputs of partitions %v are already written (e.g. %s); "+
		"starting from the earliest offset would write them again. Choose where to resume with exactly reset --stage %s "+
		"(--to-offsets %s resumes after the last records found; --to-earliest reprocesses on purpose) --execute",
		ErrNoCommittedOffsets, e.Group, e.Input, e.Missing, parts, e.Where, e.Stage, strings.Join(offsets, ","))
}

func (e *ResumeError) Unwrap() error { return ErrNoCommittedOffsets }
