package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/processor/internal/fault"
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
// partitions were read up to their high watermarks listed after that poll
// returned, waiting for transactions open below them (refresh): a record
// is joined, as of its timestamp, with at least every table update
// committed before it was fetched, so before it was produced, as a
// restart would join it. A record processed again after an abort or a
// crash reads the same versions, unless a table update with a timestamp
// at or before the record's was committed in between (see joins.md,
// "Table and stream far apart in time").

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
	// startPartitions is the table topic's partition count the start
	// check saw (co-partitioned): the keying the table was written with.
	startPartitions int
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
	// fresh: the table was read up to its high watermarks since the last
	// poll.
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

// refresh brings the table to what a restart would read for the records
// of the last poll, or says why it cannot (a *tableLayoutError). It sends
// one Metadata and one ListOffsets request, after the poll returned:
//
//   - Metadata: the table topic's ID and both topics' partition counts. A
//     topic is created, or gains partitions, in the cluster's metadata log
//     before any producer can write to the new topic or partitions, and a
//     producer learns of them from that same metadata. So a record of
//     this poll produced after the change was produced after the change
//     was in the metadata a broker answers, and this request, sent after
//     the record was fetched, sees it too (short of a broker that lags
//     behind the metadata log more than the record's whole trip). No
//     record fetched after the change is joined with the old layout.
//   - ListOffsets: the high watermarks of the restored table partitions.
//     The read up to them is read_committed, so it waits for a
//     transaction open below them (another producer's, on the table) to
//     end, as a restore does: an update committed behind it is joined,
//     as a restart would join it. With no transaction open, the high
//     watermark is the last stable offset and nothing waits.
//
// The wait ends before the stage's own transaction would time out (see
// tableWaitDeadline); the transaction then aborts and its records are
// polled again, never joined with the older table.
func (x *joinTxn) refresh() error {
	s, v := x.t.stage, x.j.store
	parts := v.Size()
	if len(parts) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(x.t.ctx, s.cfg.TransactionTimeout)
	defer cancel()
	listed := time.Now()
	cl := x.t.sess.Client()
	meta, err := topicsNow(ctx, cl, s.cfg.Input, x.j.changelog)
	if err != nil {
		return fmt.Errorf("describe table %s: %w", x.j.changelog, err)
	}
	if err := x.checkLayout(meta, parts); err != nil {
		return err
	}
	ends, err := highWatermarks(ctx, cl, x.j.changelog, parts)
	if err != nil {
		return fmt.Errorf("list high watermarks of table %s: %w", x.j.changelog, err)
	}
	if x.reader == nil {
		opts := append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), append(s.kopts, kgo.WithLogger(kafkaconn.KafkaLogger(s.log)))...)
		x.reader = state.NewTableReader(opts, x.j.changelog)
		x.reader.Waiting = s.tableWaiting
	}
	readCtx, cancelRead := context.WithDeadline(ctx, x.tableWaitDeadline())
	defer cancelRead()
	s.tableWait.begin(x.j.changelog, nil, listed)
	n, err := v.Refresh(readCtx, x.reader, ends, listed)
	s.tableWait.end()
	if n > 0 {
		s.log.Debug("table refreshed", "topic", x.j.changelog, "records", n)
	}
	if err != nil && readCtx.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", errTableWaitTooLong, err)
	}
	return err
}

// tableWaitDeadline is when a table read must give up waiting for an open
// transaction: a fifth of the transaction timeout before the stage's own
// transaction would time out, kept for producing and ending it.
func (x *joinTxn) tableWaitDeadline() time.Time {
	tt := x.t.stage.cfg.TransactionTimeout
	return x.t.started.Add(tt - tt/5)
}

// topicLayout is a topic's ID and partition count, from a Metadata
// answer; err is the topic's error in it.
type topicLayout struct {
	id         [16]byte
	partitions []int32
	err        error
}

// topicsNow asks a broker for the layout of topics, not the client's
// cache: kadm's Metadata answers from metadata up to MetadataMinAge (5 s)
// old, which may predate a record just fetched.
func topicsNow(ctx context.Context, cl *kgo.Client, topics ...string) (map[string]topicLayout, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false // a deleted topic stays deleted
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	out := make(map[string]topicLayout, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		l := topicLayout{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode)}
		for _, p := range t.Partitions {
			l.partitions = append(l.partitions, p.Partition)
		}
		out[*t.Topic] = l
	}
	return out, nil
}

// checkLayout compares the topics' metadata, listed after the poll, with
// the layout the table was restored for (parts, the restored table
// partitions): a table topic with another ID (deleted and created again),
// in global mode a table partition not restored (added), in
// co-partitioned mode partition counts that differ.
func (x *joinTxn) checkLayout(meta map[string]topicLayout, parts map[int32]int64) error {
	s, v := x.t.stage, x.j.store
	table, ok := meta[x.j.changelog]
	if !ok || table.err != nil {
		return nil // gone, or unreadable: the reads fail and the transaction is retried
	}
	for p := range parts {
		if id, ok := v.TopicID(p); ok && id != table.id {
			return &tableLayoutError{err: errTableRecreated}
		}
	}
	if x.j.j.Global {
		for _, p := range table.partitions {
			if _, ok := parts[p]; !ok {
				return &tableLayoutError{err: errTablePartitionsAdded}
			}
		}
		return nil
	}
	if n := x.j.startPartitions; n > 0 && len(table.partitions) != n {
		// Even with as many added to the input, the keys already in
		// the table stay in the partitions of the old count.
		return &tableLayoutError{err: &fault.ConfigError{Err: fmt.Errorf("%s: the join's table topic %q went from %d to %d partitions while the stage ran; %s",
			s.cfg.Origin.Field(x.j.field), x.j.changelog, n, len(table.partitions), rekeyTable)}}
	}
	if in, ok := meta[s.cfg.Input]; ok && in.err == nil && len(in.partitions) != len(table.partitions) {
		return &tableLayoutError{err: s.partitionCountError(len(table.partitions), len(in.partitions))}
	}
	return nil
}

// highWatermarks lists the high watermarks of partitions parts of topic:
// one ListOffsets request per partition leader, from the client's
// metadata (kadm's ListEndOffsets would send a Metadata request first).
func highWatermarks(ctx context.Context, cl *kgo.Client, topic string, parts map[int32]int64) (map[int32]int64, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = p, -1, -1 // -1: the high watermark, read_uncommitted
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	ends := make(map[int32]int64, len(parts))
	for _, sh := range cl.RequestSharded(ctx, req) {
		if sh.Err != nil {
			return nil, sh.Err
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("partition %d: %w", p.Partition, err)
				}
				ends[p.Partition] = p.Offset
			}
		}
	}
	return ends, nil
}

// tableLayoutError is a change of the table or input topic that the
// running session cannot follow: the session is rebuilt, which restores
// the table as a restart does (errTableRecreated,
// errTablePartitionsAdded), or the stage stops (a *fault.ConfigError).
type tableLayoutError struct{ err error }

func (e *tableLayoutError) Error() string { return e.err.Error() }
func (e *tableLayoutError) Unwrap() error { return e.err }

// tableWaiting is the table reader's Waiting: it names the open
// transactions a running join waits for in /readyz (stuck), and in the
// log at WARN, as a restore does.
func (s *Stage) tableWaiting(ws []state.Wait) {
	for _, w := range s.tableWait.waiting(ws, time.Now()) {
		s.log.Warn("the join waits for an open transaction on its table before joining the records polled: read_committed, nothing past its first offset can be read until it commits or aborts", waitAttrs(w)...)
	}
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
			// The transaction aborts; the records after this one are not
			// processed (each would refresh again): they are polled again.
			err = fmt.Errorf("join table: %w", err)
			if _, ok := errors.AsType[*tableLayoutError](err); ok && !kafkaconn.IsFatal(err) {
				t.stage.stateErr.Store(&err) // the run loop rebuilds the session
			}
			t.fail(src, err)
			t.halted = true
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
