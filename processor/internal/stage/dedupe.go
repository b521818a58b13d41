package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/state"
)

// The dedupe step (topology.Dedupe) in the engine.
//
// Its state, the IDs seen per input partition (state.Dedupe), lives in a
// Pebble database under Config.StateDir, and every change to it is
// produced to the compacted changelog topic exactly-<stage>-dedupe-changelog
// (partition = input partition) in the transaction that commits the
// outputs and input offsets of the records that caused it. The changes of
// the open transaction are buffered (state.DedupeTxn), read through, and
// applied to the database only once End has committed, with the
// checkpoint of the changelog offset they bring the store to: an aborted
// transaction leaves the store as the changelog has it, and its records,
// polled again, are judged against the same state.
//
// A partition's store is brought to its changelog partition's end in
// OnPartitionsAssigned, which franz-go runs before it fetches the
// partition's offsets and so before any of its records is polled: from
// its checkpoint, or rebuilt (state.Checkpoint.Check). A revoked or lost
// partition's store is dropped (its keys and checkpoint stay on disk), and
// so is every store when a session is rebuilt (a failed EndTxn leaves the
// outcome unknown).

// DefaultStateDir is where the local state of stateful steps goes when
// Config.StateDir is empty: exactly-state under the OS temporary
// directory.
func DefaultStateDir() string { return filepath.Join(os.TempDir(), "exactly-state") }

// expirePerTxn bounds the expired IDs purged per transaction, so that a
// jump in stream time does not make one transaction huge; the rest go in
// the next ones (lookups judge expiry themselves meanwhile).
const expirePerTxn = 1000

// restoreReadTimeout bounds a restore's read beyond the wait for an open
// transaction (at most the transaction timeout).
const restoreReadTimeout = 10 * time.Minute

// changelogPartitioner sends records to the changelog topic to the
// partition set on them (the input partition), and every other record
// where franz-go's default partitioner does.
type changelogPartitioner struct {
	changelog string
	def       kgo.Partitioner
}

func (c changelogPartitioner) ForTopic(t string) kgo.TopicPartitioner {
	if t == c.changelog {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	return c.def.ForTopic(t)
}

// defaultPartitioner is franz-go's default (kgo.RecordPartitioner).
func defaultPartitioner() kgo.Partitioner {
	return kgo.UniformBytesPartitioner(64<<10, true, true, nil)
}

// openState opens the local database of the stage's stateful step, if it
// has one: <StateDir>/<stage>-<instance>, kept from the last run of this
// stage instance (emptied if another made it), and locked.
func (s *Stage) openState() error {
	if s.changelog == "" {
		return nil
	}
	dir := filepath.Join(s.cfg.StateDir, s.cfg.Stage+"-"+s.cfg.InstanceID)
	identity := fmt.Sprintf("stage=%s instance=%s changelog=%s", s.cfg.Stage, s.cfg.InstanceID, s.changelog)
	db, err := state.Open(dir, identity, s.log)
	if err != nil {
		if !errors.Is(err, state.ErrLocked) {
			// The default, under the temporary directory, does not exist
			// in the container image (no /tmp).
			err = fmt.Errorf("%w (a stateful stage needs a writable --state-dir; in a container, on a mounted volume)", err)
		}
		return &fault.ConfigError{Err: fmt.Errorf("state dir: %w", err)}
	}
	s.db = db
	switch {
	case s.dedupeStep != nil:
		s.dedupe = state.NewDedupe(db, s.dedupeStep.Retention)
		s.store = s.dedupe
	case s.aggregateStep != nil:
		a := s.aggregateStep
		s.aggregate = state.NewAggregate(db, state.AggregateConfig{Size: a.Size, Advance: a.Advance, Grace: a.Grace, Kinds: a.Kinds, Update: a.Update})
		s.store = s.aggregate
	default:
		s.kv = state.NewKV(db)
		s.store = s.kv
	}
	return nil
}

// stateLossConsequence says what a partition whose state was lost does
// until its state is whole again, for the warning of a lost changelog.
func (s *Stage) stateLossConsequence() string {
	switch {
	case s.dedupe != nil:
		return "event IDs the lost state held pass the dedupe step again (duplicates downstream) until their retention would have ended"
	case s.aggregate != nil:
		return "the windows the lost state held start over: their results count only the records read from now on"
	}
	return "the stateful function starts from the state the changelog still holds"
}

func (s *Stage) closeState() {
	if s.db == nil {
		return
	}
	// s.db and s.dedupe stay set: the callbacks of a session closed in
	// the background may still run, and get state.ErrClosed.
	if err := s.db.Close(); err != nil {
		s.log.Warn("closing the state store failed", "err", err)
	}
}

// checkChangelog is checkStart's look at the dedupe changelog topic: it
// exists, has the input topic's partition count, and is compacted. A
// deleted segment of a changelog would lose state, and a partition count
// that differs would leave input partitions without their store.
func (s *Stage) checkChangelog(ctx context.Context, adm *kadm.Client) error {
	if s.changelog == "" {
		return nil
	}
	field := s.cfg.Origin.Field(s.stateField())
	td, err := adm.ListTopics(ctx, s.cfg.Input, s.changelog)
	if err != nil {
		return fmt.Errorf("describe topics: %w", err)
	}
	cl, ok := td[s.changelog]
	if !ok || errors.Is(cl.Err, kerr.UnknownTopicOrPartition) {
		return &fault.ConfigError{Err: fmt.Errorf("%s: the %s changelog topic %q does not exist (%s)", field, s.stateStep, s.changelog, s.cfg.Origin.CreateHint())}
	}
	if in := td[s.cfg.Input]; len(cl.Partitions) != len(in.Partitions) {
		return &fault.ConfigError{Err: fmt.Errorf("%s: the %s changelog topic %q has %d partitions, the input topic %q has %d (a changelog has one partition per input partition; add partitions to match)",
			field, s.stateStep, s.changelog, len(cl.Partitions), s.cfg.Input, len(in.Partitions))}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, s.changelog)
	if err == nil {
		var rc kadm.ResourceConfig
		if rc, err = rcs.On(s.changelog, nil); err == nil {
			err = rc.Err
		}
		if err == nil {
			policy := ""
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" && c.Value != nil {
					policy = *c.Value
				}
			}
			// Exactly "compact": with "compact,delete" the broker also
			// deletes segments past retention.ms, state included.
			if policy != "compact" {
				return &fault.ConfigError{Err: fmt.Errorf("%s: the %s changelog topic %q has cleanup.policy=%s, want compact alone (with delete, expired segments would lose state; set it with kafka-configs --alter --add-config cleanup.policy=compact)",
					field, s.stateStep, s.changelog, policy)}
			}
			return nil
		}
	}
	if kafkaconn.IsFatal(err) || errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		s.log.Warn("cannot read the changelog topic's cleanup.policy; not checked", "topic", s.changelog, "err", err)
		return nil
	}
	return fmt.Errorf("describe changelog config: %w", err)
}

// stateStore is what the engine does with the store of any stateful
// step: restore, drop and measure its partitions.
type stateStore interface {
	Restore(p int32, cl state.ChangelogPartition, now time.Time) (state.Restorer, error)
	Drop(ps ...int32) error
	DropAll() error
	Size() map[int32]int64
}

// stateField is the stateful step's field in the topology file.
func (s *Stage) stateField() string {
	switch {
	case s.aggregateStep != nil:
		return fmt.Sprintf("transform[%d].aggregate", s.aggregateStep.Index)
	case s.statefulStep != nil:
		return fmt.Sprintf("transform[%d].stateful", s.statefulStep.Index)
	}
	return "transform[0].dedupe"
}

// restoreState brings the stores of newly assigned input partitions to
// the end of their changelog partitions: from their checkpoints, or
// rebuilt from the start. It runs in OnPartitionsAssigned, before the
// partitions' offsets are fetched. A failure is kept for the run loop,
// which rebuilds the session.
func (s *Stage) restoreState(ctx context.Context, parts []int32) {
	if s.store == nil || len(parts) == 0 {
		return
	}
	start := time.Now()
	rs := make(map[int32]state.Restorer, len(parts))
	err := func() error {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.TransactionTimeout+restoreReadTimeout)
		defer cancel()
		opts := append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), append(s.kopts, kgo.WithLogger(kafkaconn.KafkaLogger(s.log)))...)
		cls, err := state.DescribeChangelog(ctx, opts, s.changelog, parts)
		if errors.Is(err, state.ErrNoChangelogPartition) {
			return &fault.ConfigError{Err: fmt.Errorf("%w (input partitions were added: add as many to %s)", err, s.changelog)}
		}
		if err != nil {
			return err
		}
		var resumed, rebuilt []int32
		var behind int64
		for _, p := range parts {
			r, err := s.store.Restore(p, cls[p], start)
			if err != nil {
				return err
			}
			rs[p] = r
			behind += max(cls[p].End-r.From(), 0)
			if why := r.Rebuild(); r.Lost() {
				rebuilt = append(rebuilt, p)
				s.log.Warn("partition state lost: its changelog no longer holds what the local checkpoint recorded; rebuilding from what it holds",
					"topic", s.changelog, "partition", p, "reason", why, "consequence", s.stateLossConsequence())
			} else if why != "" {
				rebuilt = append(rebuilt, p)
				s.log.Info("rebuilding partition state from its changelog", "topic", s.changelog, "partition", p, "reason", why)
			} else {
				resumed = append(resumed, p)
			}
		}
		s.metrics.restoreBehind(behind)
		n, err := state.Replay(ctx, opts, s.changelog, parts, rs, cls, func() error {
			s.metrics.restored(1)
			s.restoredRecords++
			if s.fp.Armed(failpoint.CrashDuringRestore, s.restoredRecords) {
				return s.fp.Fire(s.log, failpoint.CrashDuringRestore, s.restoredRecords)
			}
			return nil
		})
		if err != nil {
			return err
		}
		s.metrics.restoreBehind(0)
		s.log.Info("state restored", "topic", s.changelog, "partitions", parts, "from_checkpoint", resumed, "rebuilt", rebuilt,
			"records", n, "elapsed", time.Since(start))
		return nil
	}()
	s.metrics.restoreTime(time.Since(start))
	if err != nil {
		_ = s.store.Drop(parts...)
		err = fmt.Errorf("restore state of partitions %v from %s: %w", parts, s.changelog, err)
		s.stateErr.Store(&err)
		return
	}
	s.setStateSize()
}

// dropState forgets the stores of revoked or lost input partitions.
func (s *Stage) dropState(parts []int32) {
	if s.store == nil || len(parts) == 0 {
		return
	}
	if err := s.store.Drop(parts...); err != nil {
		s.log.Warn("dropping partition state failed", "partitions", parts, "err", err)
	}
	s.setStateSize()
}

func (s *Stage) setStateSize() {
	if s.store == nil {
		return
	}
	var total int64
	for _, n := range s.store.Size() {
		total += n
	}
	s.metrics.stateSize(total)
}

// dedupeVerdict is what the dedupe step decided for a record.
type dedupeVerdict int

const (
	dedupeProcess   dedupeVerdict = iota // not a duplicate: process it
	dedupeDuplicate                      // drop it, count it as deduplicated
	dedupeSkip                           // neither: the transaction aborts
)

// dedupeOutputs is recordOutputs for a stage with a dedupe step: the ID
// of r is checked against its partition's store before the other steps
// run, and remembered once they produced outputs or filtered r (not when
// r became a dead letter, which exactly redrive may send back).
func (t *txn) dedupeOutputs(r *kgo.Record, src source) ([]*kgo.Record, dedupeVerdict, error) {
	s := t.stage
	in, err := s.decodeInput(r)
	if err != nil {
		return nil, dedupeProcess, err
	}
	id, err := s.dedupeStep.ID(t.ctx, &in)
	if err != nil {
		return nil, dedupeProcess, &dlq.RecordError{Reason: deadletter.ReasonTransform, Step: s.dedupeStep.Step, Err: err}
	}
	dup, err := t.dd.Check(r.Partition, id, r.Timestamp)
	switch {
	case errors.Is(err, state.ErrNotRestored):
		// Revoked while polled (or its restore failed): the
		// transaction must not commit this record's offset.
		t.stateLost = true
		return nil, dedupeSkip, nil
	case err != nil:
		t.fail(src, fmt.Errorf("dedupe state: %w", err))
		return nil, dedupeSkip, nil
	case dup:
		return nil, dedupeDuplicate, nil
	}
	outs, err := s.transformOutputs(t.ctx, r, in)
	if err == nil {
		t.dd.Remember()
	}
	return outs, dedupeProcess, err
}

// emitChangelog produces one changelog record into the open transaction.
func (t *txn) emitChangelog(p int32, key, value []byte) {
	t.produce(t.cur, &kgo.Record{Topic: t.stage.changelog, Partition: p, Key: key, Value: value})
}
