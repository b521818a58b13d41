package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
)

// newSession builds the Kafka client of one session: a
// GroupTransactSession, or a plain group consumer for at-least-once. The
// session consumes incarnation topicID of the input topic: its commits
// record that ID, and committed offsets of another incarnation are not
// resumed (see identity.go).
func (s *Stage) newSession(adm *kadm.Client, topicID [16]byte) (session, *resetlog.Watch, error) {
	check := &startCheck{s: s, adm: adm, topicID: topicID}
	meta := commitMeta{topic: s.cfg.Input, text: partpos.CommitMetadata(topicID)}
	fence := group.NewFenceWatch(s.cfg.Group(), s.cfg.TransactionalID(), func(err error) {
		s.fenced.Store(&err)
		s.log.Error("fenced out of the consumer group; ending the session", "group", s.cfg.Group(), "err", err)
	})
	opts := append(append(kafkaconn.GroupConsumerOpts(s.cfg.Brokers, s.cfg.ClientID, group.RoleStage, s.cfg.Group(), s.cfg.TransactionalID(), s.cfg.Input, s.log, s.ready.Brokers, fence),
		kgo.SessionTimeout(s.cfg.SessionTimeout)), kafkaconn.MetadataOpts(s.cfg.MetadataMaxAge)...)
	opts = append(opts, kafkaconn.FetchOpts(s.cfg.FetchMaxBytes, s.cfg.MaxPartitionFetchBytes)...)
	// The producer holds at most this of unacknowledged records (and
	// franz-go sizes its request buffers by what it holds); a Produce
	// past it waits for acknowledgements (txn.produce bounds the wait).
	opts = append(opts, kgo.MaxBufferedBytes(s.cfg.MaxBufferedBytes))
	// franz-go fetches a group's offsets with require_stable (KIP-447)
	// always: a new owner of a partition waits for our pending
	// transactional offsets to resolve instead of reading stale ones.
	opts = append(opts,
		kgo.OnOffsetsFetched(check.onFetched),
		kgo.AdjustFetchOffsetsFn(check.adjust),
	)
	// The added partitions are not started until check.adjust has read
	// their offsets.
	opts = append(opts, s.ready.Member.Opts(s.cfg.Input, func(ctx context.Context, _ *kgo.Client, assigned map[string][]int32) {
		// Before the partitions' offsets are fetched, so before any
		// of their records is polled (franz-go runs this callback
		// first, heartbeating meanwhile).
		s.restoreState(ctx, assigned[s.cfg.Input])
		// A failed session's error stays until this one commits or has
		// run for the stall limit (see Ready): a fault that comes back at
		// every rebuild must not read as ready between two of them.
		if s.cfg.Guarantee == AtLeastOnce || s.producerReady.Load() {
			s.ready.Up()
		}
		s.metrics.Rebalance()
		s.lag.assigned(assigned[s.cfg.Input])
		for topic, parts := range assigned {
			s.log.Info("partitions assigned", "topic", topic, "partitions", parts)
		}
	}, s.partitionsRevoked, s.partitionsLost)...)
	if s.cfg.Guarantee == AtLeastOnce {
		cl, err := kgo.NewClient(append(append(append(opts, kgo.DisableAutoCommit()), s.kopts...), s.roleClientID())...)
		if err != nil {
			return nil, nil, err
		}
		fence.Attach(cl)
		return alosSession{cl: cl, meta: meta}, &check.deleted, nil
	}
	opts = append(opts, kgo.TransactionalID(s.cfg.TransactionalID()), kgo.TransactionTimeout(s.cfg.TransactionTimeout))
	if s.offsetTrap = newOffsetCommitTrap(s); s.offsetTrap != nil {
		opts = append(opts, kgo.WithHooks(s.offsetTrap))
	}
	last := []kgo.Opt{s.roleClientID()}
	if cl := s.changelog(); cl != "" {
		// After the injected options: changelog records must go to the
		// partition of their input partition.
		last = append(last, kgo.RecordPartitioner(changelogPartitioner{changelog: cl, def: defaultPartitioner()}))
	}
	sess, err := kgo.NewGroupTransactSession(append(append(opts, s.kopts...), last...)...)
	if err != nil {
		return nil, nil, err
	}
	fence.Attach(sess.Client())
	return eosSession{GroupTransactSession: sess, meta: meta}, &check.deleted, nil
}

// runSession runs one GroupTransactSession until ctx ends (nil) or the
// session fails (the error). progressed reports whether any transaction
// committed, to reset the backoff.
func (s *Stage) runSession(ctx context.Context, adm *kadm.Client) (progressed bool, err error) {
	topicID, err := s.resumeTopic(ctx, adm)
	if err != nil {
		return false, err
	}
	s.producerReady.Store(false)
	s.sessionBuilt.Store(time.Now().UnixNano())
	if err := s.checkGroup(ctx, adm); err != nil {
		return false, err
	}
	if s.store != nil {
		// A new session: what the last one applied may not match what
		// committed (a failed EndTxn). Every partition is restored.
		if err := s.store.DropAll(); err != nil {
			return false, err
		}
		s.stateErr.Store(nil)
	}
	sess, deleted, err := s.newSession(adm, topicID)
	if err != nil {
		return false, &fault.ConfigError{Err: fmt.Errorf("kafka client: %w", err)}
	}
	defer func() { s.closeSession(ctx, sess, errors.Is(err, failpoint.ErrCrashed)) }()
	if s.cfg.Guarantee == ExactlyOnce {
		if err := s.initProducer(ctx, sess); err != nil {
			return false, err
		}
	}
	t := s.newTxn(ctx, sess)
	defer t.closeStep()
	return s.runTxns(ctx, t, adm, topicID, deleted)
}

// resumeTopic returns the input topic's ID. A topic that is new, or
// recreated since the last session, forgets what the stage remembered of
// the old one's offsets.
func (s *Stage) resumeTopic(ctx context.Context, adm *kadm.Client) ([16]byte, error) {
	topicID, err := s.topicID(ctx, adm, s.lastTopicID)
	if err != nil {
		return topicID, err
	}
	if s.lastTopicID != ([16]byte{}) && topicID != s.lastTopicID {
		s.log.Warn("input topic was recreated; committed offsets of the old topic are not resumed", "topic", s.cfg.Input,
			"old_topic_id", partpos.TopicIDString(s.lastTopicID), "topic_id", partpos.TopicIDString(topicID))
	}
	if topicID != s.lastTopicID || s.delivered == nil {
		// Offsets of another topic name other records: what was
		// delivered, and which records (and window results) the broker
		// refused, are the old topic's. A refused record's offset in the
		// new topic is another record, which a remembered refusal would
		// dead-letter unread.
		s.delivered = map[partition]*deliveredRange{}
		clear(s.poisoned)
		clear(s.poisonedWindows)
		clear(s.suspectWindows)
		s.isolate = 0
	}
	s.lastTopicID = topicID
	return topicID, nil
}

// initProducer gets the session's producer ID before the first poll.
func (s *Stage) initProducer(ctx context.Context, sess session) error {
	// InitProducerId now, not at the first Begin: it aborts the open
	// transaction of this instance's predecessor (KIP-98). Until then
	// the predecessor's transactional offsets are pending, and the
	// group's offset fetch, which requires stable offsets (KIP-447),
	// answers UNSTABLE_OFFSET_COMMIT until the broker aborts that
	// transaction at its timeout: a predecessor killed inside End
	// (between TxnOffsetCommit and EndTxn) would stall this session
	// for the transaction timeout. The restore of a store's
	// partitions waits for the same abort.
	slow := time.AfterFunc(s.stallLimit(), func() {
		s.log.Warn("the transactional producer is still waiting for its producer ID; the stage is not ready",
			"transactional_id", s.cfg.TransactionalID(), "waited", s.stallLimit(),
			"why", "InitProducerId ends the open transaction of this transactional ID first, and waits while an output partition refuses its markers (no leader, too few in-sync replicas)")
	})
	_, _, err := sess.Client().ProducerID(ctx)
	slow.Stop()
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("init producer id: %w", err)
	}
	s.producerReady.Store(true)
	// The session is up once it is assigned and can produce: this
	// starts the stall limit after which a past failure is forgotten.
	s.ready.Up()
	return nil
}

// newTxn returns the transaction state of sess, with the stateful step's
// part.
func (s *Stage) newTxn(ctx context.Context, sess session) *txn {
	// Transforms see a context that shutdown does not cancel: a record
	// polled before SIGTERM is still processed, never dead-lettered for it.
	t := &txn{ctx: context.WithoutCancel(ctx), stage: s, sess: sess, delivered: s.delivered}
	if s.store != nil {
		t.step = s.step.begin(t)
	}
	return t
}

// closeStep releases what the stateful step held for the session.
func (t *txn) closeStep() {
	if c, ok := t.step.(interface{ close() }); ok {
		c.close()
	}
}

// runTxns polls, processes and commits transactions in t's session until
// ctx ends (nil, once what was polled is committed) or the session fails.
func (s *Stage) runTxns(ctx context.Context, t *txn, adm *kadm.Client, topicID [16]byte, deleted *resetlog.Watch) (progressed bool, err error) {
	retryBackoff := backoff.NewBackoff(100*time.Millisecond, 10*time.Second)
	// Fetch errors that repeat (a topic being recreated, a partition
	// without a leader) are waited out, not polled in a busy loop.
	fetchBackoff := backoff.NewBackoff(50*time.Millisecond, 5*time.Second)
	for {
		fetches, err := s.poll(ctx, t, adm, topicID)
		if err != nil {
			return progressed, err
		}
		if err := s.sessionBroken(); err != nil {
			_ = t.abort(ctx)
			return progressed, err
		}
		if fetches.NumRecords() > 0 {
			fetchBackoff.Reset()
		} else if hasFetchError(fetches) && ctx.Err() == nil {
			sleep(ctx, fetchBackoff.Next())
		}
		noteErr := s.noteDeleted(ctx, deleted, topicID, fetches)
		if err := t.processFetches(fetches); err != nil {
			return progressed, err
		}
		if noteErr != nil && t.open {
			// Nothing past the deleted range commits before it is
			// recorded: abort, and poll it again.
			t.fail(t.last, noteErr)
			t.halted = true
		}
		if ctx.Err() != nil {
			// Shutdown: commit what was polled and processed. End commits
			// the offsets of every polled record, so records are never
			// polled and then left out of the transaction.
			_, err := t.end(ctx, endShutdown)
			return progressed, err
		}
		why := s.endNow(t, fetches.NumRecords(), time.Now())
		if why == "" {
			continue
		}
		committed, err := t.end(ctx, why)
		if retry, ok := errors.AsType[*retryError](err); ok {
			s.retryAfterAbort(ctx, t, retry, retryBackoff)
			continue
		}
		if err != nil {
			return progressed, err
		}
		if committed {
			progressed = true
			retryBackoff.Reset()
			s.retrying.Store(0)
		}
	}
}

// sessionBroken returns why nothing polled in this session may commit: a
// restore failed (its partitions have no state; a new session restores
// them again), or another process holds our group.instance.id.
func (s *Stage) sessionBroken() error {
	if errp := s.stateErr.Load(); errp != nil {
		return *errp
	}
	return s.fencedErr()
}

// retryAfterAbort waits before polling again the records of a transaction
// aborted for a fault that may pass (a registry or broker hiccup): the
// session rewound to the last committed offsets.
func (s *Stage) retryAfterAbort(ctx context.Context, t *txn, retry *retryError, b *backoff.Backoff) {
	wait := b.Next()
	// From the Begin of the first aborted transaction: its fault (a
	// registry timeout) may have taken most of the stall limit already.
	since := time.Now()
	if !t.started.IsZero() && t.started.Before(since) {
		since = t.started
	}
	s.retrying.CompareAndSwap(0, since.UnixNano())
	s.retryErr.Store(&retry.err)
	s.log.Warn("transaction aborted; retrying", "topic", s.cfg.Input, "partition", t.last.partition, "offset", t.last.offset, "err", retry.err, "retry_in", wait)
	sleep(ctx, wait)
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// closeSession closes sess and leaves the group on the instance's behalf;
// after a simulated crash it gives up the group without a word instead.
func (s *Stage) closeSession(ctx context.Context, sess session, crashed bool) {
	if crashed {
		leaveCtx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = sess.Client().LeaveGroupContext(leaveCtx)
		go sess.Close()
		return
	}
	s.lag.closeSession()
	sess.Close()
	if s.fencedErr() != nil {
		// The group.instance.id is another process's now: a leave by
		// it would remove that process from the group.
		return
	}
	// A static member does not leave on Close; leave on its behalf so
	// that the group rebalances now, not after the session timeout
	// (KIP-345 LeaveGroup by group.instance.id).
	group.LeaveStaticGroup(context.WithoutCancel(ctx), s.log, s.cfg.Group(), s.cfg.TransactionalID(),
		append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), s.kopts...)...)
}

// poll polls the records of t's transaction: until the commit interval of
// an open transaction ends, at most the records left under the cap (one
// while isolating a refused record). A fetch error that polling again
// cannot mend aborts the transaction and is returned; so is an input topic
// that the broker no longer knows under topicID (*partpos.TopicChangedError),
// since only a new session can read its new incarnation.
func (s *Stage) poll(ctx context.Context, t *txn, adm *kadm.Client, topicID [16]byte) (kgo.Fetches, error) {
	limit := s.cfg.MaxRecords - t.records
	if s.isolate > 0 {
		limit = 1
	}
	var fetches kgo.Fetches
	if !t.open {
		// What the client fetched while the last transaction ended
		// comes first, without waiting (a nil context drains what is
		// buffered, kgo.Client.PollRecords; a cancelled one returns an
		// error instead).
		//lint:ignore SA1012 nil is kgo's "return what is buffered"
		fetches = t.sess.PollRecords(nil, limit)
		t.buffered = fetches.NumRecords() > 0
	}
	if fetches.NumRecords() == 0 && fetches.Err() == nil {
		pollCtx, cancel := s.pollContext(ctx, t)
		fetches = t.sess.PollRecords(pollCtx, limit)
		cancel()
		if fetches.NumRecords() > 0 {
			t.buffered = false
		}
	}
	if err := fatalFetchError(fetches); err != nil {
		_ = t.abort(ctx)
		return nil, err
	}
	var gone bool
	fetches.EachError(func(topic string, p int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		if topic == s.cfg.Input && isTopicGone(err) {
			gone = true
		}
		// Once per condition, then at most every 30 s: a fetch error
		// can come back on every poll.
		if s.fetchLog.ok(fmt.Sprintf("%s/%d: %v", topic, p, err)) {
			s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		}
	})
	if gone {
		id, err := s.topicID(ctx, adm, topicID)
		if err == nil && id != topicID {
			err = &partpos.TopicChangedError{Topic: s.cfg.Input, Old: topicID, New: id}
		}
		if err != nil {
			_ = t.abort(ctx)
			return nil, err
		}
	}
	return fetches, nil
}

// Why a transaction ends (endNow).
const (
	endCaughtUp = "caught_up"   // its last fetch read all the broker had
	endMax      = "max_records" // commit.max_records
	endInterval = "interval"    // commit.interval since Begin
	endIsolate  = "isolate"     // one record while isolating a refused one
	endShutdown = "shutdown"    // the stage is stopping
	endHalted   = "halted"      // a record failed for a fault not its own: it aborts now
)

// endNow says why t ends now, after a poll that returned polled records,
// or "" if it stays open for more polls. The commit interval bounds how
// long a record waits; it is no fixed wait. A transaction whose last
// fetch ended every partition at its last stable offset has read all the
// broker had when it answered: it commits now, and what arrived since,
// buffered or not, goes in the next one. Growing it instead would hold
// every record in it until the interval ends whenever records arrive
// faster than one fetch's round trip (any steady load), which is most of
// a record's latency. Only records buffered while the last transaction
// ended first wait for the fetch behind them (see pollContext). A stage
// that is behind grows its transactions to the interval or the cap,
// which keeps the per-transaction cost small when it matters.
func (s *Stage) endNow(t *txn, polled int, now time.Time) string {
	switch {
	case !t.open:
		return ""
	case t.halted:
		return endHalted
	case t.caughtUp && (polled == 0 || !t.buffered):
		return endCaughtUp
	case t.records >= s.cfg.MaxRecords:
		return endMax
	case s.isolate > 0:
		return endIsolate
	case now.Sub(t.started) >= s.cfg.CommitInterval:
		return endInterval
	}
	return ""
}

// pollContext is how long the next poll of t may wait. The commit
// interval bounds how long a record waits; it is no fixed wait:
//   - no open transaction: until records come;
//   - caught up on records that were buffered while the last transaction
//     ended: for about as long as that End took. They may be older than
//     what the broker has now, and the client fetches the rest only once
//     they are polled; without the wait, that rest would be left for one
//     more transaction, a whole commit later;
//   - behind: until the commit interval ends.
//
// A transaction caught up on records fetched just now is not polled
// again: it commits (see runSession).
func (s *Stage) pollContext(ctx context.Context, t *txn) (context.Context, context.CancelFunc) {
	if !t.open {
		return ctx, func() {}
	}
	deadline := t.started.Add(s.cfg.CommitInterval)
	if t.caughtUp && t.buffered {
		if d := time.Now().Add(t.lastEnd); d.Before(deadline) {
			deadline = d
		}
	}
	return context.WithDeadline(ctx, deadline)
}

// hasFetchError reports whether fetches carry an error other than the
// poll's own deadline.
func hasFetchError(fs kgo.Fetches) bool {
	var has bool
	fs.EachError(func(_ string, _ int32, err error) {
		has = has || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
	})
	return has
}

// partitionsRevoked forgets the state and the lag of partitions this
// instance no longer owns, so that a scaled-out stage does not report
// stale lag; the revocations of a closing session keep their lag (see
// lagTracker).
func (s *Stage) partitionsRevoked(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	s.partitionsGone(gone, false)
}

// partitionsLost forgets the state of the partitions of a lost
// membership, and keeps their lag until the next assignment: the
// instance may hold them still, and their input keeps coming.
func (s *Stage) partitionsLost(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	s.partitionsGone(gone, true)
}

func (s *Stage) partitionsGone(gone map[string][]int32, lost bool) {
	s.metrics.Rebalance()
	s.dropState(gone[s.cfg.Input])
	for topic, parts := range gone {
		s.log.Info("partitions revoked", "topic", topic, "partitions", parts)
	}
	s.lag.gone(gone[s.cfg.Input], lost)
}

// fatalFetchError returns the first fetch error that polling again cannot
// mend: the client was closed, or the group or a topic is not authorized.
func fatalFetchError(fs kgo.Fetches) error {
	var fatal error
	fs.EachError(func(_ string, _ int32, err error) {
		if fatal == nil && (errors.Is(err, kgo.ErrClientClosed) || kafkaconn.IsFatal(err)) {
			fatal = err
		}
	})
	return fatal
}

// roleClientID is the group client's client.id, <client_id>-stage
// (group.RoleClientID), set after the injected Kafka options, whose own
// client ID (the file's) would otherwise hide the role from the start
// check of another process (group.CheckGroup).
func (s *Stage) roleClientID() kgo.Opt {
	return kgo.ClientID(group.RoleClientID(s.cfg.ClientID, group.RoleStage))
}
