package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/state"
	"github.com/exactly-io/exactly/processor/transform"
)

// The join step (topology.Join) in the engine: a stateful step (see
// state.go) whose state is the table, versioned (state.Versioned), and
// whose changelog is the table's own topic, co-partitioned with the
// input: input partition p looks up table partition p. The engine never
// writes to it.
//
// A partition's table is restored from its topic as any store is, when
// the partition is assigned, up to the end of the topic then. While the
// stage runs, the records of each poll are processed only once the table
// partitions were read up to their last stable offsets listed after that
// poll returned: a record is joined, as of its timestamp, with at least
// every table update committed before it was fetched, so before it was
// produced. A record processed
// again after an abort or a crash reads the same versions, unless a
// table update with a timestamp at or before the record's was committed
// in between (see joins.md, "Late table updates").

// In global mode every instance holds every table partition, whatever
// input partitions it is assigned: they are restored with the first
// assignment, kept across revocations, and a lookup reads them all.

// globalTableParts returns the partitions of the global table that are
// not restored.
func (s *Stage) globalTableParts(ctx context.Context, j *joinStep) ([]int32, error) {
	opts := append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), append(s.kopts, kgo.WithLogger(kafkaconn.KafkaLogger(s.log)))...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx, j.changelog)
	if err == nil {
		err = td.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	restored := j.store.Size()
	var parts []int32
	for _, p := range td[j.changelog].Partitions.Numbers() {
		if _, ok := restored[p]; !ok {
			parts = append(parts, p)
		}
	}
	return parts, nil
}

// checkCompactionLag warns when the table topic's min.compaction.lag.ms
// is below the history retention: compaction keeps only a key's latest
// record, so a table rebuilt from the topic (a new instance, a lost
// checkpoint) would lack versions a lookup within the retention needs.
// Kafka Streams sets the changelog of a versioned store likewise (KIP-889).
func (j *joinStep) checkCompactionLag(log *slog.Logger, configs []kadm.Config) {
	lag := time.Duration(0)
	for _, c := range configs {
		if c.Key == "min.compaction.lag.ms" && c.Value != nil {
			if ms, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
				lag = time.Duration(ms) * time.Millisecond
			}
		}
	}
	if lag < j.j.HistoryRetention {
		log.Warn("the join's table topic may compact away versions within history_retention: a table rebuilt from it then answers lookups as of earlier times with later versions or none",
			"topic", j.changelog, "min_compaction_lag", lag, "history_retention", j.j.HistoryRetention,
			"fix", fmt.Sprintf("kafka-configs --alter --entity-type topics --entity-name %s --add-config min.compaction.lag.ms=%d", j.changelog, j.j.HistoryRetention.Milliseconds()))
	}
}

// joinStep is the stage's join step.
type joinStep struct {
	stepInfo
	j     *transform.Join
	store *state.Versioned // set by open
}

func (j *joinStep) open(db *state.DB) stateStore {
	j.store = state.NewVersioned(db, j.j.HistoryRetention)
	return j.store
}

func (j *joinStep) begin(t *txn) stepTxn { return &joinTxn{t: t, j: j} }

// joinTxn is the join step in one session's transactions.
type joinTxn struct {
	t *txn
	j *joinStep
	// fresh: the table was read up to its last stable offsets since the
	// last poll.
	fresh bool
	// reader reads the table for the whole session (created by the first
	// refresh, closed by close).
	reader *state.TableReader
}

// close releases the session's table reader.
func (x *joinTxn) close() {
	if x.reader != nil {
		x.reader.Close()
	}
}

// polled is told that a poll returned records: they are joined only once
// the table has been read again.
func (x *joinTxn) polled() { x.fresh = false }

// refresh reads the table partitions of the restored input partitions up
// to their last stable offsets.
func (x *joinTxn) refresh() error {
	s, v := x.t.stage, x.j.store
	parts := v.Size()
	if len(parts) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(x.t.ctx, s.cfg.TransactionTimeout)
	defer cancel()
	listed := time.Now()
	lso, err := kadm.NewClient(x.t.sess.Client()).ListCommittedOffsets(ctx, x.j.changelog)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		return fmt.Errorf("list last stable offsets of table %s: %w", x.j.changelog, err)
	}
	ends := make(map[int32]int64, len(parts))
	for p := range parts {
		if o, ok := lso.Lookup(x.j.changelog, p); ok {
			ends[p] = o.Offset
		}
	}
	if x.reader == nil {
		opts := append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), append(s.kopts, kgo.WithLogger(kafkaconn.KafkaLogger(s.log)))...)
		x.reader = state.NewTableReader(opts, x.j.changelog)
	}
	n, err := v.Refresh(ctx, x.reader, ends, listed)
	if n > 0 {
		s.log.Debug("table refreshed", "topic", x.j.changelog, "records", n)
	}
	return err
}

// outputs skips a record whose table could not be used: the transaction
// then aborts.
func (x *joinTxn) outputs(r *kgo.Record, src source) (outs []*kgo.Record, skip bool, err error) {
	t := x.t
	if t.unwritableTimestamp(r) {
		return nil, true, nil
	}
	if !x.fresh {
		if err := x.refresh(); err != nil {
			t.fail(src, fmt.Errorf("join table: %w", err))
			return nil, true, nil
		}
		x.fresh = true
	}
	tb := &recordTable{v: x.j.store, p: r.Partition, global: x.j.j.Global}
	outs, err = t.stage.recordOutputs(transform.WithTable(t.ctx, tb), r)
	switch {
	case errors.Is(tb.err, state.ErrNotRestored):
		// Revoked while polled (or its restore failed): the
		// transaction must not commit this record's offset.
		t.stateLost = true
		return nil, true, nil
	case tb.err != nil:
		t.fail(src, fmt.Errorf("join table: %w", tb.err))
		return nil, true, nil
	}
	return outs, false, err
}

func (x *joinTxn) verdict(r *kgo.Record) error {
	_, err := x.t.stage.recordOutputs(transform.WithTable(x.t.ctx, &recordTable{v: x.j.store, p: r.Partition, global: x.j.j.Global}), r)
	return err
}

func (x *joinTxn) finish() {}

// Commit and Discard end the transaction. The table's state is the
// topic's, never the transaction's: nothing to apply or forget.
func (x *joinTxn) Commit(map[int32]int64) error { x.fresh = false; return nil }
func (x *joinTxn) Discard()                     { x.fresh = false }

// recordTable is the transform.Table of one input record: partition p of
// the table. err keeps its first failure, which is the state's, never the
// record's.
type recordTable struct {
	v      *state.Versioned
	p      int32
	global bool // every table partition, not p's (see transform.Join.Global)
	err    error
}

func (r *recordTable) Lookup(key []byte, at time.Time) ([]byte, bool, error) {
	var v []byte
	var ok bool
	var err error
	if r.global {
		v, ok, err = r.v.LookupAll(key, at.UnixMilli())
	} else {
		v, ok, err = r.v.Lookup(r.p, key, at.UnixMilli())
	}
	if err != nil && r.err == nil {
		r.err = err
	}
	return v, ok, err
}
