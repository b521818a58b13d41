package stage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/serde"
)

// txn is the state of one open transaction of a session.
type txn struct {
	ctx     context.Context // for Go transforms; not for Kafka calls
	stage   *Stage
	sess    session
	open    bool
	started time.Time
	records int // input records in this transaction
	// caughtUp is whether the last poll with records ended every
	// partition it read at its last stable offset: all the broker had.
	caughtUp bool
	// buffered is whether the transaction began on records that were
	// already buffered, fetched while the last transaction ended.
	buffered bool
	lastEnd  time.Duration // how long the last End took
	ending   time.Time     // when end began: flush, then End

	last                           source // the last input record processed
	cur                            source // the input record being processed
	outputs, deadLetters, filtered int64
	deduplicated                   int64 // records the dedupe step dropped

	// step is the stateful step's part of the transaction (nil without
	// one); stateLost is set when a record of a partition without state
	// was polled (revoked meanwhile): the transaction then aborts.
	step      stepTxn
	stateLost bool
	// changelogEnds is, per changelog partition, the offset after the
	// last changelog record of the open transaction (guarded by mu).
	changelogEnds map[int32]int64
	perTopic      map[string]int64 // outputs by topic, for metrics
	perReason     map[string]int64 // dead letters by reason, for metrics
	timestamps    []time.Time      // input timestamps, for the latency histogram

	// Rewinds: first is the first offset polled in this transaction, by
	// partition; failed the input records whose outputs or dead letters
	// failed (guarded by mu); delivered the records an at-least-once abort
	// found already written, skipped when polled again (see rewind).
	first     map[partition]int64
	lastOff   map[partition]int64
	lastTime  map[int32]time.Time // the timestamp of lastOff's record, by input partition
	failed    []source
	delivered map[partition]*deliveredRange
	// windowsRefused are the window results (or their dead letters) the
	// broker refused as a fault of the record (guarded by mu);
	// windowsAlone is set when the transaction produced its window
	// results one at a time, each alone in its batch, so that a refusal
	// is that result's own (Stage.suspectWindows); windowsDead are the
	// windows whose results went to the dead letters.
	windowsRefused map[windowID]error
	windowsAlone   bool
	windowsDead    map[windowID]bool
	// Acknowledged outputs by topic and dead letters by reason (guarded
	// by mu): an at-least-once abort counts them, they are in their
	// topics for good.
	acked map[acked]int64
	// old are the outputs that retention may delete before they are read
	// (guarded by mu; see noteOld).
	old agedOutputs

	mu         sync.Mutex
	produceErr error
	// halted: a record failed for a fault that is not its own (a registry
	// down or refusing): the transaction will abort, so the records after
	// it are not processed (each would wait out the same fault: a registry
	// timeout per record). The abort rewinds to the committed offsets, so
	// they are polled again.
	halted bool
	// promises counts the open transaction's produce callbacks still to
	// come: end decides only once all have answered (see kafkaconn.Promises).
	promises *kafkaconn.Promises

	// produceCtx is the open transaction's context for Produce: it ends
	// when the broker would abort the transaction anyway (its timeout
	// after Begin), so that a Produce waiting for room in the producer's
	// buffer (Config.MaxBufferedBytes) fails the transaction then rather
	// than wait for a broker that does not answer. It is never the
	// stage's: shutdown must not fail the transaction it commits.
	produceCtx    context.Context
	cancelProduce context.CancelFunc
}

// partition is one input partition.
type partition struct {
	topic string
	p     int32
}

// processFetches begins the transaction if records came, and processes
// them into it.
func (t *txn) processFetches(fetches kgo.Fetches) error {
	if fetches.NumRecords() == 0 {
		return nil
	}
	if err := t.begin(); err != nil {
		return err
	}
	s := t.stage
	if pr, ok := t.step.(interface{ polled() }); ok {
		pr.polled() // a join reads its table again before these records
	}
	t.caughtUp = true
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			tp := partition{p.Topic, p.Partition}
			if _, ok := t.first[tp]; !ok {
				t.first[tp] = p.Records[0].Offset
			}
			t.lastOff[tp] = p.Records[len(p.Records)-1].Offset
			t.lastTime[p.Partition] = p.Records[len(p.Records)-1].Timestamp
		}
		data := 0
		for _, r := range p.Records {
			if !r.Attrs.IsControl() {
				data++
			}
			t.process(r)
		}
		s.consumed.Add(int64(data))
		s.metrics.consumedRecords(p.Topic, data)
		if len(p.Records) > 0 {
			// Control records are kept, so a caught-up partition reads 0
			// here, never the 1 of a trailing marker.
			last := p.Records[len(p.Records)-1].Offset
			lag := p.LastStableOffset - (last + 1)
			s.lag.polled(p.Partition, last+1, p.LastStableOffset, p.LogStartOffset)
			if lag > 0 {
				t.caughtUp = false
			}
		}
	})
	return nil
}

func (t *txn) begin() error {
	if t.open {
		return nil
	}
	if err := t.sess.Begin(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	t.open, t.started = true, time.Now()
	t.promises = &kafkaconn.Promises{}
	t.produceCtx, t.cancelProduce = context.WithDeadline(context.Background(), t.started.Add(t.stage.cfg.TransactionTimeout))
	t.stage.ready.Opened(t.started)
	t.outputs, t.deadLetters, t.filtered, t.deduplicated, t.produceErr, t.stateLost, t.halted = 0, 0, 0, 0, nil, false, false
	t.first, t.lastOff, t.lastTime, t.failed = map[partition]int64{}, map[partition]int64{}, map[int32]time.Time{}, nil
	t.windowsRefused, t.windowsAlone, t.windowsDead = nil, false, nil
	t.acked = map[acked]int64{}
	t.old = nil
	t.changelogEnds = map[int32]int64{}
	if t.stage.metrics.m != nil {
		t.perTopic, t.perReason, t.timestamps = map[string]int64{}, map[string]int64{}, t.timestamps[:0]
	}
	return nil
}

// process turns one input record into its output or its dead letter and
// produces it into the open transaction.
func (t *txn) process(r *kgo.Record) {
	t.records++
	if r.Attrs.IsControl() {
		return // a transaction marker: its offset commits, it is no record
	}
	if t.halted {
		return // the transaction aborts; the record is polled again
	}
	if t.perTopic != nil {
		t.timestamps = append(t.timestamps, r.Timestamp)
	}
	redrivenEventTime(r)
	s := t.stage
	src := source{r.Topic, r.Partition, r.Offset}
	if t.wasDelivered(src) {
		return // written before an at-least-once abort; not written twice
	}
	if audit.IsMarker(r) {
		// An audit marker (audit.Drain): forwarded as it is, so that audits
		// see through chained stages. Nothing read is ever dropped.
		t.produce(src, &kgo.Record{Topic: s.cfg.Output, Headers: r.Headers, Timestamp: r.Timestamp})
		return
	}
	t.last, t.cur = src, src
	if p, ok := s.poisoned[t.last]; ok {
		t.processPoisoned(r, src, p)
		return
	}
	outs, skip, err := t.outputsOf(r, src)
	if skip || t.haltOn(r, src, err) {
		return
	}
	if err != nil {
		var re *dlq.RecordError
		if !errors.As(err, &re) {
			re = &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
		}
		t.produceDeadLetter(r, re)
		return
	}
	if len(outs) == 0 {
		t.filtered++
		return
	}
	t.outputs += int64(len(outs))
	for _, out := range outs {
		if t.perTopic != nil {
			t.perTopic[out.Topic]++
		}
		t.produce(src, out)
	}
}

// unwritableTimestamp produces the dead letter of r if the Kafka client
// would write its timestamp as another time, and reports whether it did:
// outputs keep the input's timestamp (record.go). A window result has its
// own timestamp (aggregate's MaxEventTime), so the aggregate step does not
// check it.
func (t *txn) unwritableTimestamp(r *kgo.Record) bool {
	err := kafkaconn.CheckWritableTimestamp(r.Timestamp)
	if err != nil {
		t.produceDeadLetter(r, &dlq.RecordError{Reason: deadletter.ReasonProduce, Err: err})
	}
	return err != nil
}

// processPoisoned produces the dead letter of r, whose output the broker
// refused (too large, say), instead of stalling the stage.
func (t *txn) processPoisoned(r *kgo.Record, src source, p poison) {
	re := &dlq.RecordError{Reason: deadletter.ReasonProduce, Err: p.err}
	if !p.envelope {
		t.produceDeadLetter(r, re)
		return
	}
	// Even its dead letter was refused: keep why it failed in the
	// first place, and send a size-bounded envelope.
	if err := t.verdict(r); err != nil && !serde.IsTransient(err) {
		errors.As(err, &re)
	}
	t.countDeadLetter(r, re)
	t.produce(src, t.stage.envelope(r, re))
}

// outputsOf returns the outputs of r, by the stage's stateful step if it
// has one; skip means r has none to write and no dead letter (a
// duplicate, a record of a partition whose state was dropped).
func (t *txn) outputsOf(r *kgo.Record, src source) (outs []*kgo.Record, skip bool, err error) {
	if t.step != nil {
		return t.step.outputs(r, src)
	}
	if t.unwritableTimestamp(r) {
		return nil, true, nil
	}
	outs, err = t.stage.recordOutputs(t.ctx, r)
	return outs, false, err
}

// verdict is the record error of r, leaving no change in the state: for
// the dead letter of a record whose output the broker refused, which says
// why the record had failed first.
func (t *txn) verdict(r *kgo.Record) error {
	if t.step != nil {
		return t.step.verdict(r)
	}
	_, err := t.stage.recordOutputs(t.ctx, r)
	return err
}

// haltOn dooms the transaction for err, the error of record r, if it is
// not the record's fault, and reports whether it did.
func (t *txn) haltOn(r *kgo.Record, src source, err error) bool {
	switch {
	case serde.IsRegistryRefused(err):
		// No retry mends it (the registry refuses the credentials or
		// the output schema): the stage stops (afterAbort), naming it,
		// instead of dead-lettering every record.
		t.fail(src, &fault.FatalError{Err: fmt.Errorf("record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)})
	case serde.IsTransient(err):
		// A registry that is down: the whole transaction is aborted
		// and retried, nothing is dead-lettered.
		t.fail(src, fmt.Errorf("record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err))
	default:
		return false
	}
	t.halted = true
	return true
}

// produceDeadLetter produces the dead letter of r into the open
// transaction.
func (t *txn) produceDeadLetter(r *kgo.Record, re *dlq.RecordError) {
	t.countDeadLetter(r, re)
	t.produce(source{r.Topic, r.Partition, r.Offset}, dlq.DeadLetter(t.stage.cfg.DeadLetter, t.stage.cfg.Stage, r, re, t.stage.topicIDHeader()...))
}

// countDeadLetter counts the dead letter (or envelope) of r in the open
// transaction, for Stats and for exactly_stage_records_dead_lettered_total.
func (t *txn) countDeadLetter(r *kgo.Record, re *dlq.RecordError) {
	t.stage.log.Debug("dead-lettering record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", re.Reason, "err", re.Err)
	t.deadLetters++
	if t.perReason != nil {
		t.perReason[re.Reason]++
	}
}

// produce produces r, an output or dead letter of input record src, into
// the open transaction.
func (t *txn) produce(src source, r *kgo.Record) { t.produceThen(src, r, nil) }

// produceThen is produce, calling then (if not nil) with the outcome once
// the broker has answered and the outcome is counted.
func (t *txn) produceThen(src source, r *kgo.Record, then func(error)) {
	// The context is not the stage's: a canceled produce would fail the
	// transaction that shutdown is about to commit.
	t.sess.Produce(t.produceCtx, r, t.promises.Track(func(r *kgo.Record, err error) {
		if then != nil {
			defer then(err)
		}
		if err != nil {
			t.fail(src, fmt.Errorf("produce to %s: %w", r.Topic, err))
			return
		}
		if cl := t.stage.changelog(); cl != "" && r.Topic == cl {
			// Where the store's checkpoint moves once this commits.
			t.mu.Lock()
			t.changelogEnds[r.Partition] = max(t.changelogEnds[r.Partition], r.Offset+1)
			t.mu.Unlock()
		}
		t.noteOld(r)
		if t.stage.cfg.Guarantee != AtLeastOnce {
			return // an aborted transaction leaves nothing behind
		}
		a := acked{topic: r.Topic}
		if r.Topic == t.stage.cfg.DeadLetter {
			a.reason, _ = audit.Header(r, deadletter.HeaderReason)
		}
		t.mu.Lock()
		t.acked[a]++
		t.mu.Unlock()
	}))
}

// refusedWindows returns the window results the broker refused in the
// open transaction.
func (t *txn) refusedWindows() map[windowID]error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.windowsRefused
}

// produceWindow produces out, the emit-final result of window w, closed
// in this transaction, or its dead letter when the broker refused it
// before (Stage.poisonedWindows); step names the aggregate step in a dead
// letter. A refusal that is the record's fault is
// noted for afterAbort. The broker refuses a whole batch for one bad
// record in it (INVALID_TIMESTAMP, say), so while some refused results
// are suspects (Stage.suspectWindows), each result is produced alone:
// after everything produced before it is answered, and the next waits for
// its own answer.
func (t *txn) produceWindow(w windowID, step string, out *kgo.Record) {
	// The source a refusal is charged to, and a dead letter names: the
	// last record of the window's input partition in this transaction,
	// whose stream time closed it.
	tp := partition{t.stage.cfg.Input, w.partition}
	src := source{tp.topic, tp.p, t.lastOff[tp]}
	var done chan struct{}
	if len(t.stage.suspectWindows) > 0 || len(t.stage.poisonedWindows) > 0 {
		t.windowsAlone = true
		if err := t.promises.Flush(t.produceCtx, t.sess.Client()); err != nil {
			t.fail(src, err)
			return
		}
		done = make(chan struct{})
		defer func() { <-done }()
	}
	if p, ok := t.stage.poisonedWindows[w]; ok {
		if t.windowsDead == nil {
			t.windowsDead = map[windowID]bool{}
		}
		t.windowsDead[w] = true
		re := &dlq.RecordError{Reason: deadletter.ReasonProduce, Step: step,
			Err: fmt.Errorf("the broker refused the window result (record timestamp %d ms): %w", out.Timestamp.UnixMilli(), p.err)}
		// The result as the dead letter's value, marked as a result
		// (redrive has no input record to send back).
		r := &kgo.Record{Topic: src.topic, Partition: src.partition, Offset: src.offset, Key: out.Key, Value: out.Value, Timestamp: t.lastTime[w.partition]}
		extra := append([]kgo.RecordHeader{{Key: deadletter.HeaderWindowResult, Value: []byte("true")}}, t.stage.topicIDHeader()...)
		dl := dlq.DeadLetter(t.stage.cfg.DeadLetter, t.stage.cfg.Stage, r, re, extra...)
		if p.envelope {
			dl = dlq.Envelope(t.stage.cfg.DeadLetter, t.stage.cfg.Stage, r, re, extra...)
		}
		t.countDeadLetter(r, re)
		out = dl
	} else {
		t.outputs++
		if t.perTopic != nil {
			t.perTopic[out.Topic]++
		}
	}
	t.produceThen(src, out, func(err error) {
		if err != nil && dlq.IsRecordFault(err) {
			t.mu.Lock()
			if t.windowsRefused == nil {
				t.windowsRefused = map[windowID]error{}
			}
			t.windowsRefused[w] = err
			t.mu.Unlock()
		}
		if done != nil {
			close(done)
		}
	})
}

// fail records that input record src failed, and the first error that
// dooms the open transaction: end aborts it instead of committing, and
// the session rewinds (see rewind).
func (t *txn) fail(src source, err error) {
	t.mu.Lock()
	if t.produceErr == nil {
		t.produceErr = err
	}
	t.failed = append(t.failed, src)
	t.mu.Unlock()
}

// end commits the open transaction, or aborts it if a record failed to
// produce; trigger is what ended it (see endNow), for metrics. It returns
// whether it committed. A non-nil error means the session must be rebuilt
// (GroupTransactSession.End errors are not retryable), or failpoint.ErrCrashed.
func (t *txn) end(ctx context.Context, trigger string) (committed bool, err error) {
	if !t.open {
		return false, nil
	}
	t.ending = time.Now()
	t.stage.metrics.ended(trigger)
	// End must not see a canceled context: a canceled EndTxn leaves the
	// outcome unknown. Shutdown still commits what was polled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.stage.cfg.TransactionTimeout)
	defer cancel()
	s := t.stage
	s.txns++
	t.finishState()
	if s.fp.Armed(failpoint.CrashBeforeCommit, s.txns) {
		// The records reach the broker, EndTxn never does.
		if err := t.sess.Client().Flush(ctx); err != nil {
			return false, fmt.Errorf("flush: %w", err)
		}
		return false, s.fp.Fire(s.log, failpoint.CrashBeforeCommit, s.txns)
	}
	// A record refused before it was buffered answers after the client's
	// Flush: the outcome waits for every answer.
	if err := t.promises.Flush(ctx, t.sess.Client()); err != nil {
		return false, err
	}
	try, produceErr := t.endTry()
	n := t.records
	t.open, t.records = false, 0
	s.ready.Closed()
	endStart := time.Now()
	trap := s.offsetTrap
	if trap != nil && try == kgo.TryCommit && s.fp.Armed(failpoint.CrashAfterOffsetCommit, s.txns) {
		trap.arm(s.txns, cancel)
	}
	committed, err = t.sess.End(ctx, bool(try))
	t.lastEnd = time.Since(endStart)
	if trap != nil && trap.fired.Load() {
		return false, failpoint.ErrCrashed
	}
	t.cancelProduce() // every record is settled: End flushed or aborted them
	if err != nil || !committed {
		return false, t.notCommitted(ctx, err, produceErr, n)
	}
	s.noteProducer(ctx, t.sess.Client())
	if err := t.afterCommit(n); err != nil {
		return true, err
	}
	if s.fp.Armed(failpoint.CrashAfterCommit, s.txns) {
		return true, s.fp.Fire(s.log, failpoint.CrashAfterCommit, s.txns)
	}
	return true, nil
}

// finishState writes what the stores add at the end of a transaction
// into it, unless their state was dropped.
func (t *txn) finishState() {
	if t.stateLost || t.step == nil {
		return
	}
	t.step.finish()
}

// endTry is how the transaction ends: an abort if a record failed to
// produce (produceErr) or it polled a partition whose state was dropped,
// a commit otherwise.
func (t *txn) endTry() (try kgo.TransactionEndTry, produceErr error) {
	s := t.stage
	try = kgo.TryCommit
	t.mu.Lock()
	produceErr = t.produceErr
	t.mu.Unlock()
	if produceErr != nil {
		s.log.Warn("aborting transaction", "topic", s.cfg.Input, "partition", t.last.partition, "offset", t.last.offset, "err", produceErr)
		try = kgo.TryAbort
	}
	if t.stateLost {
		s.log.Info("aborting transaction: it polled a partition whose state was dropped (revoked)", "topic", s.cfg.Input)
		try = kgo.TryAbort
	}
	return try, produceErr
}

// notCommitted handles a transaction of n records that End did not
// commit: with endErr, the outcome is unknown; without, it aborted.
func (t *txn) notCommitted(ctx context.Context, endErr, produceErr error, n int) error {
	s := t.stage
	t.discardState()
	s.lag.aborted()
	s.aborted.Add(1)
	if endErr != nil {
		// The outcome is unknown: the session is rebuilt, and the state
		// with it (restored from the changelogs).
		s.metrics.abort(AbortError)
		return fmt.Errorf("end transaction: %w", endErr)
	}
	if a, ok := t.sess.(alosSession); ok {
		if err := t.rewind(ctx, a.cl, a.commit); err != nil {
			return err
		}
	}
	return s.afterAbort(t, produceErr, n)
}

// afterCommit applies a committed transaction of n records: its state to
// the local store, its counts to the stage.
func (t *txn) afterCommit(n int) error {
	s := t.stage
	if t.step != nil {
		t.mu.Lock()
		ends := t.changelogEnds
		t.mu.Unlock()
		if err := t.step.Commit(ends); err != nil {
			// Kafka has the changes; the local store does not: it is
			// rebuilt with the session.
			return fmt.Errorf("apply committed state: %w", err)
		}
		s.setStateSize()
	}
	s.committed.Add(1)
	s.metrics.commit(t, n, time.Now())
	s.committedOld(t.old)
	if s.isolate > 0 {
		s.isolate--
	}
	if t.windowsAlone {
		clear(s.suspectWindows) // each was accepted alone, or is poisoned
	}
	for w := range t.windowsDead {
		delete(s.poisonedWindows, w) // its dead letter is written: closed
	}
	s.ready.Fail(nil)
	s.produced.Add(t.outputs)
	s.deadLettered.Add(t.deadLetters)
	s.filtered.Add(t.filtered)
	s.deduplicated.Add(t.deduplicated)
	s.log.Debug("transaction committed", "records", n, "outputs", t.outputs, "dead_letters", t.deadLetters)
	return nil
}

// abort ends the open transaction with an abort, best effort: the caller is
// about to drop the session, and a new one with the same transactional ID
// aborts whatever this leaves open.
func (t *txn) abort(ctx context.Context) error {
	if !t.open {
		return nil
	}
	t.open, t.records = false, 0
	t.discardState()
	t.stage.lag.aborted()
	t.stage.aborted.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.stage.cfg.TransactionTimeout)
	defer cancel()
	_, err := t.sess.End(ctx, false)
	t.cancelProduce()
	return err
}

// discardState forgets the open transaction's state changes: it aborted,
// or its outcome is unknown.
func (t *txn) discardState() {
	if t.step != nil {
		t.step.Discard()
	}
}
