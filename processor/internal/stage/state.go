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

	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/state"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
)

// The stateful steps in the engine: dedupe (dedupe.go), aggregate
// (aggregate.go) and stateful, a user's Go function over a key-value
// store (stateful.go). A stage has at most one.
//
// The step's state lives in a Pebble database under Config.StateDir, and
// every change to it is produced to the step's compacted changelog topic
// exactly-<stage>-<store>-changelog (partition = input partition) in the
// transaction that commits the outputs and input offsets of the records
// that caused it. The changes of the open transaction are buffered,
// read through, and applied to the database only once End has
// committed, with the checkpoint of the changelog offset they bring the
// store to: an aborted transaction leaves the store as the changelog has
// it, and its records, polled again, are judged against the same state.
//
// A partition's store is brought to its changelog partition's end in
// OnPartitionsAssigned, which franz-go runs before it fetches the
// partition's offsets and so before any of its records is polled: from
// its checkpoint, or rebuilt (state.Checkpoint.Check). A revoked or lost
// partition's store is dropped (its keys and checkpoint stay on disk), and
// so is every store when a session is rebuilt (a failed EndTxn leaves the
// outcome unknown).

// statefulStep is a step with state: the engine opens, restores, drops
// and commits the state of every kind the same way; the step says how a
// record runs through it.
type statefulStep interface {
	// about names the step and its changelog.
	about() *stepInfo
	// open returns the step's store in db; it runs once, before begin.
	open(db *state.DB) stateStore
	// begin returns the step's part of the transactions of t's session.
	begin(t *txn) stepTxn
}

// stepInfo names a stateful step.
type stepInfo struct {
	kind      string // dedupe, aggregate or stateful: the step in messages
	field     string // its field in the topology file, e.g. transform[0].dedupe
	changelog string // its changelog topic
	// lost says what a partition whose state was lost does until its
	// state is whole again, for the warning of a lost changelog.
	lost string
}

func (i *stepInfo) about() *stepInfo { return i }

// stepTxn is a stateful step in the transactions of one session: it runs
// input records through the step against the open transaction's state,
// and commits or discards that state with the transaction.
type stepTxn interface {
	// outputs is recordOutputs for a stage with the step; skip says that
	// r has neither outputs nor a dead letter (a duplicate, a record of a
	// partition whose state was dropped, a state that failed: the last
	// two abort the transaction).
	outputs(r *kgo.Record, src source) (outs []*kgo.Record, skip bool, err error)
	// verdict is the record error r would get, changing no state: for the
	// dead letter of a record whose output the broker refused, which says
	// why the record had failed first.
	verdict(r *kgo.Record) error
	// finish writes into the open transaction what the step adds at its
	// end (expired IDs, closed windows, the last value of changed keys).
	finish()
	// Commit applies the committed transaction's changes to the store,
	// with the changelog offsets they bring each partition to; Discard
	// forgets them.
	Commit(ends map[int32]int64) error
	Discard()
}

// stateStore is what the engine does with the store of any stateful
// step: restore, drop and measure its partitions.
type stateStore interface {
	Restore(p int32, cl state.ChangelogPartition, now time.Time) (state.Restorer, error)
	Drop(ps ...int32) error
	DropAll() error
	Size() map[int32]int64
}

// newStatefulStep returns the stateful step of stage's pipeline p, nil
// without one.
func newStatefulStep(stage string, p *transform.Pipeline) statefulStep {
	info := func(kind, field, store, lost string) stepInfo {
		return stepInfo{kind: kind, field: field, changelog: topology.ChangelogTopic(stage, store), lost: lost}
	}
	if d := p.Dedupe(); d != nil {
		return &dedupeStep{d: d, stepInfo: info("dedupe", "transform[0].dedupe", topology.DedupeStore,
			"event IDs the lost state held pass the dedupe step again (duplicates downstream) until their retention would have ended")}
	}
	if a := p.Aggregate(); a != nil {
		return &aggregateStep{a: a, stepInfo: info("aggregate", fmt.Sprintf("transform[%d].aggregate", a.Index), topology.AggregateStore,
			"the windows the lost state held start over: their results count only the records read from now on")}
	}
	if j := p.Join(); j != nil {
		return &joinStep{j: j, stepInfo: stepInfo{kind: "join", field: fmt.Sprintf("transform[%d].join", j.Index), changelog: j.Table,
			lost: "records are joined with what the table topic still holds"}}
	}
	if f := p.Stateful(); f != nil {
		return &kvStep{stepInfo: info("stateful", fmt.Sprintf("transform[%d].stateful", f.Index), f.Store,
			"the stateful function starts from the state the changelog still holds")}
	}
	return nil
}

// changelog returns the changelog topic of the stage's stateful step, ""
// without one.
func (s *Stage) changelog() string {
	if s.step == nil {
		return ""
	}
	return s.step.about().changelog
}

// DefaultStateDir is where the local state of stateful steps goes when
// Config.StateDir is empty: exactly-state under the OS temporary
// directory.
func DefaultStateDir() string { return filepath.Join(os.TempDir(), "exactly-state") }

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
	if s.step == nil {
		return nil
	}
	dir := filepath.Join(s.cfg.StateDir, s.cfg.Stage+"-"+s.cfg.InstanceID)
	identity := fmt.Sprintf("stage=%s instance=%s changelog=%s", s.cfg.Stage, s.cfg.InstanceID, s.changelog())
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
	s.store = s.step.open(db)
	s.setWatermark()
	return nil
}

func (s *Stage) closeState() {
	if s.db == nil {
		return
	}
	// s.db and s.store stay set: the callbacks of a session closed in
	// the background may still run, and get state.ErrClosed.
	if err := s.db.Close(); err != nil {
		s.log.Warn("closing the state store failed", "err", err)
	}
}

// changelogWords says, for checkChangelog's errors, what the changelog
// topic is, how to create it, and why its partition count must match the
// input's ("" when it need not: a global join's table).
func (s *Stage) changelogWords(info *stepInfo) (what, create, match string) {
	j, join := s.step.(*joinStep)
	switch {
	case join && j.j.Global:
		return "the join's table topic", "create it compacted, keyed by the lookup key", ""
	case join:
		return "the join's table topic", "create it compacted, keyed by the lookup key, with the input's partition count",
			"co_partitioned: input partition p looks up table partition p, so both topics need one partition count and one keying; " + rekeyTable
	}
	return fmt.Sprintf("the %s changelog topic", info.kind), s.cfg.Origin.CreateHint(), "a changelog has one partition per input partition; add partitions to match"
}

// partitionCountError is the refusal of a changelog (or co-partitioned
// join table) with n partitions for an input topic with in: at start and,
// for a join, while it runs.
func (s *Stage) partitionCountError(n, in int) error {
	info := s.step.about()
	what, _, match := s.changelogWords(info)
	return &fault.ConfigError{Err: fmt.Errorf("%s: %s %q has %d partitions, the input topic %q has %d (%s)",
		s.cfg.Origin.Field(info.field), what, info.changelog, n, s.cfg.Input, in, match)}
}

// checkChangelog is checkStart's look at the stateful step's changelog
// topic: it exists, has the input topic's partition count, and is
// compacted. A deleted segment of a changelog would lose state, and a
// partition count that differs would leave input partitions without their
// store.
func (s *Stage) checkChangelog(ctx context.Context, adm *kadm.Client) error {
	if s.step == nil {
		return nil
	}
	info := s.step.about()
	field := s.cfg.Origin.Field(info.field)
	td, err := adm.ListTopics(ctx, s.cfg.Input, info.changelog)
	if err != nil {
		return fmt.Errorf("describe topics: %w", err)
	}
	what, create, match := s.changelogWords(info)
	cl, ok := td[info.changelog]
	if !ok || errors.Is(cl.Err, kerr.UnknownTopicOrPartition) {
		return &fault.ConfigError{Err: fmt.Errorf("%s: %s %q does not exist (%s)", field, what, info.changelog, create)}
	}
	if in := td[s.cfg.Input]; match != "" && len(cl.Partitions) != len(in.Partitions) {
		return s.partitionCountError(len(cl.Partitions), len(in.Partitions))
	}
	if j, ok := s.step.(*joinStep); ok {
		j.startPartitions = len(cl.Partitions)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, info.changelog)
	if err == nil {
		var rc kadm.ResourceConfig
		if rc, err = rcs.On(info.changelog, nil); err == nil {
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
				return &fault.ConfigError{Err: fmt.Errorf("%s: %s %q has cleanup.policy=%s, want compact alone (with delete, expired segments would lose state; set it with kafka-configs --alter --add-config cleanup.policy=compact)",
					field, what, info.changelog, policy)}
			}
			if j, ok := s.step.(*joinStep); ok {
				j.checkCompactionLag(s.log, rc.Configs)
			}
			return nil
		}
	}
	if kafkaconn.IsFatal(err) || errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) {
		s.log.Warn("cannot read the changelog topic's cleanup.policy; not checked", "topic", info.changelog, "err", err)
		return nil
	}
	return fmt.Errorf("describe changelog config: %w", err)
}

// restoreState brings the stores of newly assigned input partitions to
// the end of their changelog partitions: from their checkpoints, or
// rebuilt from the start. It runs in OnPartitionsAssigned, before the
// partitions' offsets are fetched. A failure is kept for the run loop,
// which rebuilds the session. A restore that finds changelog records
// deleted before it read them (state.GapError) starts again at once: the
// checkpoint it left makes that restore rebuild the partition as lost,
// with the "partition state lost" warning, as for records deleted while
// the stage was down.
func (s *Stage) restoreState(ctx context.Context, parts []int32) {
	if s.store == nil || len(parts) == 0 {
		return
	}
	if j, ok := s.step.(*joinStep); ok && j.j.Global {
		var err error
		if parts, err = s.globalTableParts(ctx, j); err != nil {
			err = fmt.Errorf("restore table %s: %w", j.changelog, err)
			s.stateErr.Store(&err)
			return
		}
		if len(parts) == 0 {
			return // every table partition is restored already
		}
	}
	info := s.step.about()
	start := time.Now()
	s.restoring.begin(info.changelog, parts, start)
	defer s.restoring.end()
	var err error
	for attempt := 1; ; attempt++ {
		err = s.restoreOnce(ctx, info, parts, start)
		var gap *state.GapError
		if !errors.As(err, &gap) || attempt == maxRestoreAttempts {
			break
		}
		s.log.Warn("changelog records were deleted before the restore read them; restoring again", "topic", gap.Topic,
			"partition", gap.Partition, "offset", gap.Next)
	}
	s.metrics.restoreTime(time.Since(start))
	if err != nil {
		_ = s.store.Drop(parts...)
		err = fmt.Errorf("restore state of partitions %v from %s: %w", parts, info.changelog, err)
		s.stateErr.Store(&err)
		return
	}
	s.setStateSize()
}

// maxRestoreAttempts bounds the restores of one assignment that records
// deleted under them cut short; the last one's error rebuilds the session.
const maxRestoreAttempts = 3

// restoreOnce is one restore of parts (see restoreState).
func (s *Stage) restoreOnce(ctx context.Context, info *stepInfo, parts []int32, start time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransactionTimeout+restoreReadTimeout)
	defer cancel()
	opts := append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), append(s.kopts, kgo.WithLogger(kafkaconn.KafkaLogger(s.log)))...)
	listed := time.Now()
	cls, err := state.DescribeChangelog(ctx, opts, info.changelog, parts)
	if errors.Is(err, state.ErrNoChangelogPartition) {
		if j, ok := s.step.(*joinStep); ok && !j.j.Global {
			return &fault.ConfigError{Err: fmt.Errorf("%w (input partitions were added; %s)", err, rekeyTable)}
		}
		return &fault.ConfigError{Err: fmt.Errorf("%w (input partitions were added: add as many to %s)", err, info.changelog)}
	}
	if err != nil {
		return err
	}
	rs := make(map[int32]state.Restorer, len(parts))
	var resumed, rebuilt []int32
	var behind int64
	for _, p := range parts {
		r, err := s.store.Restore(p, cls[p], listed)
		if err != nil {
			return err
		}
		rs[p] = r
		behind += max(cls[p].End-r.From(), 0)
		if why := r.Rebuild(); r.Lost() {
			rebuilt = append(rebuilt, p)
			s.log.Warn("partition state lost: its changelog no longer holds what the local checkpoint recorded; rebuilding from what it holds",
				"topic", info.changelog, "partition", p, "reason", why, "consequence", info.lost)
		} else if why != "" {
			rebuilt = append(rebuilt, p)
			s.log.Info("rebuilding partition state from its changelog", "topic", info.changelog, "partition", p, "reason", why)
		} else {
			resumed = append(resumed, p)
		}
	}
	s.metrics.restoreBehind(behind)
	n, err := state.Replay(ctx, opts, info.changelog, parts, rs, cls, state.ReplayHooks{
		Each: func() error {
			s.metrics.restored(1)
			s.restoredRecords++
			s.restoring.read()
			if s.fp.Armed(failpoint.CrashDuringRestore, s.restoredRecords) {
				return s.fp.Fire(s.log, failpoint.CrashDuringRestore, s.restoredRecords)
			}
			if s.fp.Armed(failpoint.PauseDuringRestore, s.restoredRecords) {
				s.fp.Pause(s.log, failpoint.PauseDuringRestore, s.restoredRecords)
			}
			return nil
		},
		Waiting: s.restoreWaiting,
	})
	if err != nil {
		return err
	}
	s.metrics.restoreBehind(0)
	s.log.Info("state restored", "topic", info.changelog, "partitions", parts, "from_checkpoint", resumed, "rebuilt", rebuilt,
		"records", n, "elapsed", time.Since(start))
	return nil
}

// dropState forgets the stores of revoked or lost input partitions.
func (s *Stage) dropState(parts []int32) {
	if s.store == nil || len(parts) == 0 {
		return
	}
	if j, ok := s.step.(*joinStep); ok && j.j.Global {
		return // a global table does not follow the input's partitions
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

// emitChangelog produces one changelog record into the open transaction.
func (t *txn) emitChangelog(p int32, key, value []byte) {
	t.produce(t.cur, &kgo.Record{Topic: t.stage.changelog(), Partition: p, Key: key, Value: value})
}
