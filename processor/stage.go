// Package processor is the exactly-once Kafka→Kafka stage engine.
//
// A Stage consumes one input topic in a consumer group with
// isolation.level=read_committed, turns each record into an output record or
// a dead letter, and commits the outputs, the dead letters and the group's
// offsets in one Kafka transaction (KIP-98, with the offsets sent in the
// transaction as KIP-447 specifies). Either all of a transaction becomes
// visible to read_committed readers or none of it does, so a crash at any
// instant is recovered by the next instance with neither loss nor
// duplicates.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/audit"
	"github.com/exactly-io/exactly/processor/kit"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// Config is what a Stage needs. Every field without a stated default is
// required.
type Config struct {
	Stage      string   // stage name; part of the group and transactional ID
	InstanceID string   // stable per instance, e.g. the hostname
	Brokers    []string // seed brokers, host:port
	ClientID   string   // Kafka client.id; default "exactly"

	Input        string // input topic
	Output       string // output topic
	DeadLetter   string // dead-letter topic
	InputFormat  string // serde format name; default "json"
	OutputFormat string // serde format name; default "json"
	// InputCodec and OutputCodec hold the Avro settings (schema file,
	// registry) of each side; their Format and Topic are taken from the
	// fields above. See CodecConfig.
	InputCodec, OutputCodec serde.Config
	// KeyField, when set, makes the output key the value of this top-level
	// field of a JSON object value. A record without it is dead-lettered.
	KeyField string

	// CommitInterval bounds how long one transaction stays open; default
	// 100ms.
	CommitInterval time.Duration
	// MaxRecords bounds the input records in one transaction; default 10000.
	MaxRecords int
	// Guarantee is ExactlyOnce (the default) or AtLeastOnce.
	Guarantee string

	// TransactionTimeout is the producer's transaction.timeout.ms: how long
	// the broker keeps a transaction open before aborting it; default 30s.
	TransactionTimeout time.Duration
}

// Group returns the consumer group of the stage: exactly-<stage>.
func (c Config) Group() string { return "exactly-" + c.Stage }

// TransactionalID returns the instance's transactional ID,
// exactly-<stage>-<instance>. It is stable across restarts so that a
// restarted instance fences its predecessor and aborts its open transaction
// at once (KIP-98 InitProducerId), instead of leaving the last stable offset
// stuck until transaction.timeout.ms.
func (c Config) TransactionalID() string { return "exactly-" + c.Stage + "-" + c.InstanceID }

// Option configures a Stage.
type Option func(*Stage)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Stage) { s.log = l } }

// WithKafkaOptions appends franz-go options to every client the stage
// builds, after its own (for example a kgo.Dialer in tests).
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(s *Stage) { s.kopts = append(s.kopts, opts...) }
}

// WithTransform sets the stage's compiled transform steps (see
// transform.Compile); without it records pass through unchanged.
func WithTransform(p *transform.Pipeline) Option { return func(s *Stage) { s.pipeline = p } }

// WithMetrics records the stage's metrics in m (see NewMetrics).
func WithMetrics(m *Metrics) Option { return func(s *Stage) { s.metrics.m = m } }

// WithFailpoints arms failpoints (see kit.ParseFailpoints).
func WithFailpoints(fps ...kit.Failpoint) Option {
	return func(s *Stage) { s.fp.List = append(s.fp.List, fps...) }
}

// WithCrashAction replaces what a failpoint does when it fires. The default
// is kit.KillSelf. If the action returns, Run returns kit.ErrCrashed without ending
// the transaction or closing the client cleanly.
func WithCrashAction(f func()) Option { return func(s *Stage) { s.fp.Crash = f } }

// Stats are counters of one Stage since it was built.
type Stats struct {
	Consumed     int64 // input records polled
	Produced     int64 // output records in committed transactions
	Filtered     int64 // input records with no output and no dead letter, committed
	DeadLettered int64 // dead letters in committed transactions
	Committed    int64 // transactions committed
	Aborted      int64 // transactions aborted (rebalance, produce error)
	Rebuilds     int64 // sessions rebuilt after an error
}

// Stage is one instance of a Kafka→Kafka stage.
type Stage struct {
	cfg      Config
	in, out  serde.Codec
	log      *slog.Logger
	kopts    []kgo.Opt
	fp       kit.Failpoints
	pipeline *transform.Pipeline
	metrics  stageMetrics

	// Isolating a record the broker refuses (run goroutine only): after
	// such an abort, the next isolate transactions carry one input record
	// each, and the one whose output is refused again is poisoned: it is
	// dead-lettered on its next read.
	isolate  int
	poisoned map[source]poison

	// passJSON: json in and out, no transform steps; records are checked
	// and copied, never decoded whole (see passThroughJSON).
	passJSON bool

	txns int // transactions ended by this instance, for failpoints

	// Readiness, read by Ready from other goroutines.
	joined     atomic.Bool
	txnOpened  atomic.Int64 // Unix nanoseconds of the open transaction's Begin; 0 when none
	sessionErr atomic.Pointer[error]
	brokers    *kit.BrokerHealth

	consumed, produced, deadLettered, filtered atomic.Int64
	committed, aborted, rebuilds               atomic.Int64
}

// New validates cfg and returns a Stage. It does no network I/O.
func New(cfg Config, opts ...Option) (*Stage, error) {
	// The defaults are topology's, so that a Config built by hand and one
	// built from a file (StageConfig) behave the same.
	if cfg.ClientID == "" {
		cfg.ClientID = topology.DefaultClientID
	}
	if cfg.InputFormat == "" {
		cfg.InputFormat = topology.DefaultFormat
	}
	if cfg.OutputFormat == "" {
		cfg.OutputFormat = topology.DefaultFormat
	}
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = topology.DefaultCommitInterval
	}
	if cfg.MaxRecords == 0 {
		cfg.MaxRecords = topology.DefaultCommitMaxRecords
	}
	if cfg.TransactionTimeout == 0 {
		cfg.TransactionTimeout = topology.DefaultTransactionTimeout
	}
	if cfg.Guarantee == "" {
		cfg.Guarantee = ExactlyOnce
	}
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"stage", cfg.Stage}, {"instance id", cfg.InstanceID},
		{"input topic", cfg.Input}, {"output topic", cfg.Output}, {"dead-letter topic", cfg.DeadLetter},
	} {
		if f.v == "" {
			errs = append(errs, kit.NewConfigError("%s is required", f.name))
		}
	}
	if cfg.Guarantee != ExactlyOnce && cfg.Guarantee != AtLeastOnce {
		errs = append(errs, kit.NewConfigError("guarantee %q: want %s or %s", cfg.Guarantee, ExactlyOnce, AtLeastOnce))
	}
	if len(cfg.Brokers) == 0 {
		errs = append(errs, kit.NewConfigError("brokers are required"))
	}
	if cfg.CommitInterval < 0 || cfg.MaxRecords < 0 {
		errs = append(errs, kit.NewConfigError("commit interval and max records must be positive"))
	}
	if cfg.CommitInterval >= cfg.TransactionTimeout {
		errs = append(errs, kit.NewConfigError("commit interval %s must be below the transaction timeout %s", cfg.CommitInterval, cfg.TransactionTimeout))
	}
	in, err := serde.NewCodec(cfg.codec(cfg.InputCodec, cfg.InputFormat, cfg.Input))
	if err != nil {
		errs = append(errs, &kit.ConfigError{Err: fmt.Errorf("input: %w", err)})
	}
	out, err := serde.NewCodec(cfg.codec(cfg.OutputCodec, cfg.OutputFormat, cfg.Output))
	if err != nil {
		errs = append(errs, &kit.ConfigError{Err: fmt.Errorf("output: %w", err)})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("stage %q: %w", cfg.Stage, err)
	}
	s := &Stage{cfg: cfg, in: in, out: out, log: slog.New(slog.DiscardHandler), fp: kit.Failpoints{Crash: kit.KillSelf}, poisoned: map[source]poison{}, brokers: kit.NewBrokerHealth()}
	for _, o := range opts {
		o(s)
	}
	s.log = s.log.With("stage", cfg.Stage, "txn_id", cfg.TransactionalID())
	s.metrics.stage = cfg.Stage
	s.passJSON = cfg.InputFormat == serde.JSON && cfg.OutputFormat == serde.JSON && (s.pipeline == nil || s.pipeline.Len() == 0)
	return s, nil
}

// Config returns the stage's configuration with defaults applied.
func (s *Stage) Config() Config { return s.cfg }

// Stats returns a snapshot of the stage's counters.
func (s *Stage) Stats() Stats {
	return Stats{
		Consumed: s.consumed.Load(), Produced: s.produced.Load(), DeadLettered: s.deadLettered.Load(), Filtered: s.filtered.Load(),
		Committed: s.committed.Load(), Aborted: s.aborted.Load(), Rebuilds: s.rebuilds.Load(),
	}
}

// Run processes records until ctx is canceled, then commits the open
// transaction, leaves the group and returns nil. A session that fails (a
// fenced producer, a broker that went away, a failed EndTxn) is closed and
// rebuilt with exponential backoff; the new session resumes from the
// offsets committed in the last committed transaction. Run returns an error
// only for faults that a rebuild cannot mend (see kit.IsFatal), or kit.ErrCrashed.
func (s *Stage) Run(ctx context.Context) error {
	s.log.Info("stage starting", "input", s.cfg.Input, "output", s.cfg.Output, "group", s.cfg.Group())
	backoff := kit.NewBackoff(100*time.Millisecond, 10*time.Second)
	for {
		progressed, err := s.runSession(ctx)
		if ctx.Err() != nil && err == nil {
			s.log.Info("stage stopped")
			return nil
		}
		if errors.Is(err, kit.ErrCrashed) || kit.IsFatal(err) {
			return fmt.Errorf("stage %q: %w", s.cfg.Stage, err)
		}
		if progressed {
			backoff.Reset()
		}
		s.rebuilds.Add(1)
		s.metrics.rebuild()
		s.joined.Store(false)
		s.txnOpened.Store(0)
		s.sessionErr.Store(&err)
		wait := backoff.Next()
		s.log.Warn("kafka session failed; rebuilding", "topic", s.cfg.Input, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// newSession builds the Kafka client of one session: a
// GroupTransactSession, or a plain group consumer for at-least-once.
func (s *Stage) newSession() (session, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(s.cfg.Brokers...),
		kgo.ClientID(s.cfg.ClientID),
		kgo.ConsumerGroup(s.cfg.Group()),
		// Static membership (KIP-345): a restarted instance takes over its
		// predecessor's partitions at once instead of waiting out the
		// session timeout of a member that was killed.
		kgo.InstanceID(s.cfg.TransactionalID()),
		kgo.ConsumeTopics(s.cfg.Input),
		// Only committed records are ever transformed: an aborted
		// upstream transaction must leave no trace downstream.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// KIP-447: a new owner of a partition waits for our pending
		// transactional offsets to resolve instead of reading stale ones.
		kgo.RequireStableFetchOffsets(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers are returned as control records, so that the
		// committed offset moves past the last marker: a caught-up stage
		// then has committed offset == last stable offset, and lag 0, not
		// the "stuck at 1" of consumers that stop before the marker.
		kgo.KeepControlRecords(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
			s.joined.Store(true)
			s.metrics.rebalance()
			for topic, parts := range assigned {
				s.log.Info("partitions assigned", "topic", topic, "partitions", parts)
			}
		}),
		kgo.OnPartitionsRevoked(s.partitionsGone),
		kgo.OnPartitionsLost(s.partitionsGone),
		kgo.WithLogger(kit.KafkaLogger(s.log)),
		// Readiness: an idle stage whose brokers are all gone polls
		// nothing and fails nothing; only silence shows it.
		kgo.WithHooks(s.brokers),
	}
	if s.cfg.Guarantee == AtLeastOnce {
		cl, err := kgo.NewClient(append(append(opts, kgo.DisableAutoCommit()), s.kopts...)...)
		if err != nil {
			return nil, err
		}
		return alosSession{cl}, nil
	}
	opts = append(opts, kgo.TransactionalID(s.cfg.TransactionalID()), kgo.TransactionTimeout(s.cfg.TransactionTimeout))
	sess, err := kgo.NewGroupTransactSession(append(opts, s.kopts...)...)
	if err != nil {
		return nil, err
	}
	return eosSession{sess}, nil
}

// runSession runs one GroupTransactSession until ctx ends (nil) or the
// session fails (the error). progressed reports whether any transaction
// committed, to reset the backoff.
func (s *Stage) runSession(ctx context.Context) (progressed bool, err error) {
	sess, err := s.newSession()
	if err != nil {
		return false, &kit.ConfigError{Err: fmt.Errorf("kafka client: %w", err)}
	}
	crashed := false
	defer func() {
		if crashed {
			// A simulated crash: give up the group without a word.
			leaveCtx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = sess.Client().LeaveGroupContext(leaveCtx)
			go sess.Close()
			return
		}
		sess.Close()
		// A static member does not leave on Close; leave on its behalf
		// so that the group rebalances now, not after the session
		// timeout (KIP-345 LeaveGroup by group.instance.id).
		kit.LeaveStaticGroup(context.WithoutCancel(ctx), s.log, s.cfg.Group(), s.cfg.TransactionalID(),
			append([]kgo.Opt{kgo.SeedBrokers(s.cfg.Brokers...), kgo.ClientID(s.cfg.ClientID)}, s.kopts...)...)
	}()

	// Transforms see a context that shutdown does not cancel: a record
	// polled before SIGTERM is still processed, never dead-lettered for it.
	t := &txn{ctx: context.WithoutCancel(ctx), stage: s, sess: sess}
	retryBackoff := kit.NewBackoff(100*time.Millisecond, 10*time.Second)
	for {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if t.open {
			pollCtx, cancel = context.WithDeadline(ctx, t.started.Add(s.cfg.CommitInterval))
		}
		limit := s.cfg.MaxRecords - t.records
		if s.isolate > 0 {
			limit = 1
		}
		fetches := sess.PollRecords(pollCtx, limit)
		cancel()

		if err := fatalFetchError(fetches); err != nil {
			_ = t.abort(ctx)
			return progressed, err
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})

		if n := fetches.NumRecords(); n > 0 {
			if err := t.begin(); err != nil {
				return progressed, err
			}
			fetches.EachPartition(func(p kgo.FetchTopicPartition) {
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
					// Control records are kept, so a caught-up partition
					// reads 0 here, never the 1 of a trailing marker.
					last := p.Records[len(p.Records)-1].Offset
					s.metrics.setLag(p.Topic, p.Partition, p.LastStableOffset-(last+1))
				}
			})
		}
		if ctx.Err() != nil {
			// Shutdown: commit what was polled and processed. End commits
			// the offsets of every polled record, so records are never
			// polled and then left out of the transaction.
			_, err := t.end(ctx)
			if errors.Is(err, kit.ErrCrashed) {
				crashed = true
			}
			return progressed, err
		}
		if t.open && (t.records >= s.cfg.MaxRecords || s.isolate > 0 || time.Since(t.started) >= s.cfg.CommitInterval) {
			committed, err := t.end(ctx)
			var retry *retryError
			switch {
			case errors.As(err, &retry):
				// Aborted for a fault that may pass (a registry or
				// broker hiccup): the session rewound to the last
				// committed offsets; wait, then poll the records again.
				wait := retryBackoff.Next()
				s.log.Warn("transaction aborted; retrying", "topic", s.cfg.Input, "partition", t.last.partition, "offset", t.last.offset, "err", retry.err, "retry_in", wait)
				select {
				case <-ctx.Done():
				case <-time.After(wait):
				}
				continue
			case errors.Is(err, kit.ErrCrashed):
				crashed = true
				return progressed, err
			case err != nil:
				return progressed, err
			}
			if committed {
				progressed = true
				retryBackoff.Reset()
			}
		}
	}
}

// Ready returns nil when the stage is healthy: it has joined its consumer
// group, its last session did not fail, and no transaction has been open
// for longer than kit.StallFactor commit intervals. Otherwise the error says
// why. It is safe to call from any goroutine, e.g. a /readyz handler.
func (s *Stage) Ready() error {
	if errp := s.sessionErr.Load(); errp != nil && *errp != nil {
		return fmt.Errorf("stage %s: kafka session failing: %w", s.cfg.Stage, *errp)
	}
	// Unreachable brokers first: they are also why no partitions come.
	if err := s.brokers.Check(kit.BrokerSilenceLimit); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	if !s.joined.Load() {
		return fmt.Errorf("stage %s: no partitions assigned yet in group %s", s.cfg.Stage, s.cfg.Group())
	}
	if err := kit.CheckStall("transaction", s.txnOpened.Load(), s.cfg.CommitInterval); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	return nil
}

// partitionsGone forgets the lag of partitions this instance no longer
// owns, so that a scaled-out stage does not report stale lag.
func (s *Stage) partitionsGone(_ context.Context, _ *kgo.Client, gone map[string][]int32) {
	s.metrics.rebalance()
	for topic, parts := range gone {
		s.log.Info("partitions revoked", "topic", topic, "partitions", parts)
		for _, p := range parts {
			s.metrics.dropLag(topic, p)
		}
	}
}

func retryCause(err error) string {
	if serde.IsTransient(err) {
		return "transient_record_error"
	}
	return "produce_error"
}

// poison is a record whose output the broker refused; envelope when its
// full dead letter was refused too.
type poison struct {
	err      error
	envelope bool
}

// source identifies an input record.
type source struct {
	topic     string
	partition int32
	offset    int64
}

func (s source) String() string { return fmt.Sprintf("%s/%d@%d", s.topic, s.partition, s.offset) }

// isRecordFault reports whether a produce error is the fault of the record
// itself, so that retrying it can never succeed.
func isRecordFault(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.InvalidTimestamp)
}

func isTopicGone(err error) bool {
	return errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
}

// retryError is a transaction aborted for a fault that may pass; the
// session stays, and the records are polled again after a backoff.
type retryError struct{ err error }

func (e *retryError) Error() string { return "transaction aborted: " + e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// fatalFetchError returns the first fetch error that polling again cannot
// mend: the client was closed, or the group or a topic is not authorized.
func fatalFetchError(fs kgo.Fetches) error {
	var fatal error
	fs.EachError(func(_ string, _ int32, err error) {
		if fatal == nil && (errors.Is(err, kgo.ErrClientClosed) || kit.IsFatal(err)) {
			fatal = err
		}
	})
	return fatal
}

// txn is the state of one open transaction of a session.
type txn struct {
	ctx     context.Context // for Go transforms; not for Kafka calls
	stage   *Stage
	sess    session
	open    bool
	started time.Time
	records int // input records in this transaction

	last                           source // the last input record processed
	outputs, deadLetters, filtered int64
	perTopic                       map[string]int64 // outputs by topic, for metrics
	perReason                      map[string]int64 // dead letters by reason, for metrics
	timestamps                     []time.Time      // input timestamps, for the latency histogram
	mu                             sync.Mutex
	produceErr                     error
}

func (t *txn) begin() error {
	if t.open {
		return nil
	}
	if err := t.sess.Begin(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	t.open, t.started = true, time.Now()
	t.stage.txnOpened.Store(t.started.UnixNano())
	t.outputs, t.deadLetters, t.filtered, t.produceErr = 0, 0, 0, nil
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
	if t.perTopic != nil {
		t.timestamps = append(t.timestamps, r.Timestamp)
	}
	s := t.stage
	if audit.IsMarker(r) {
		// An audit marker (audit.Drain): forwarded as it is, so that audits
		// see through chained stages. Nothing read is ever dropped.
		t.produce(&kgo.Record{Topic: s.cfg.Output, Headers: r.Headers, Timestamp: r.Timestamp})
		return
	}
	t.last = source{r.Topic, r.Partition, r.Offset}
	if p, ok := s.poisoned[t.last]; ok {
		// Its output was refused by the broker (too large, say): the
		// record becomes a dead letter instead of stalling the stage.
		re := &kit.RecordError{Reason: kit.ReasonProduce, Err: p.err}
		if p.envelope {
			// Even its dead letter was refused: keep why it failed in the
			// first place, and send a size-bounded envelope.
			if _, err := s.recordOutputs(t.ctx, r); err != nil && !serde.IsTransient(err) {
				errors.As(err, &re)
			}
			t.countDeadLetter(r, re)
			t.produce(s.envelope(r, re))
			return
		}
		t.produceDeadLetter(r, re)
		return
	}
	outs, err := s.recordOutputs(t.ctx, r)
	if serde.IsTransient(err) {
		// Not the record's fault (a registry that is down): the whole
		// transaction is aborted and retried, nothing is dead-lettered.
		t.fail(fmt.Errorf("record %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err))
		return
	}
	if err != nil {
		var re *kit.RecordError
		if !errors.As(err, &re) {
			re = &kit.RecordError{Reason: kit.ReasonDecode, Err: err}
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
		t.produce(out)
	}
}

// produceDeadLetter produces the dead letter of r into the open
// transaction.
func (t *txn) produceDeadLetter(r *kgo.Record, re *kit.RecordError) {
	t.countDeadLetter(r, re)
	t.produce(kit.DeadLetter(t.stage.cfg.DeadLetter, t.stage.cfg.Stage, r, re))
}

// countDeadLetter counts the dead letter (or envelope) of r in the open
// transaction, for Stats and for exactly_stage_records_dead_lettered_total.
func (t *txn) countDeadLetter(r *kgo.Record, re *kit.RecordError) {
	t.stage.log.Debug("dead-lettering record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", re.Reason, "err", re.Err)
	t.deadLetters++
	if t.perReason != nil {
		t.perReason[re.Reason]++
	}
}

func (t *txn) produce(r *kgo.Record) {
	// The context is not the stage's: a canceled produce would fail the
	// transaction that shutdown is about to commit.
	t.sess.Produce(context.Background(), r, t.promise)
}

func (t *txn) promise(r *kgo.Record, err error) {
	if err != nil {
		t.fail(fmt.Errorf("produce to %s: %w", r.Topic, err))
	}
}

// fail records the first error that dooms the open transaction: end aborts
// it instead of committing, and the session resumes from the last
// committed offsets.
func (t *txn) fail(err error) {
	t.mu.Lock()
	if t.produceErr == nil {
		t.produceErr = err
	}
	t.mu.Unlock()
}

// end commits the open transaction, or aborts it if a record failed to
// produce. It returns whether it committed. A non-nil error means the
// session must be rebuilt (GroupTransactSession.End errors are not
// retryable), or kit.ErrCrashed.
func (t *txn) end(ctx context.Context) (committed bool, err error) {
	if !t.open {
		return false, nil
	}
	// End must not see a canceled context: a canceled EndTxn leaves the
	// outcome unknown. Shutdown still commits what was polled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.stage.cfg.TransactionTimeout)
	defer cancel()
	s := t.stage
	s.txns++
	if s.fp.Armed(kit.CrashBeforeCommit, s.txns) {
		// The records reach the broker, EndTxn never does.
		if err := t.sess.Client().Flush(ctx); err != nil {
			return false, fmt.Errorf("flush: %w", err)
		}
		return false, s.fp.Fire(s.log, kit.CrashBeforeCommit, s.txns)
	}
	try := kgo.TryCommit
	if err := t.sess.Client().Flush(ctx); err != nil {
		return false, fmt.Errorf("flush: %w", err)
	}
	t.mu.Lock()
	produceErr := t.produceErr
	t.mu.Unlock()
	if produceErr != nil {
		s.log.Warn("aborting transaction", "topic", s.cfg.Input, "partition", t.last.partition, "offset", t.last.offset, "err", produceErr)
		try = kgo.TryAbort
	}
	n := t.records
	t.open, t.records = false, 0
	s.txnOpened.Store(0)
	committed, err = t.sess.End(ctx, bool(try))
	if err != nil {
		s.aborted.Add(1)
		s.metrics.abort(AbortError)
		return false, fmt.Errorf("end transaction: %w", err)
	}
	if !committed {
		s.aborted.Add(1)
		if produceErr != nil {
			s.metrics.abort(AbortRetry)
			s.metrics.retry(retryCause(produceErr))
			switch {
			case !isRecordFault(produceErr):
				if isTopicGone(produceErr) {
					// A topic deleted (and maybe recreated): only a new
					// client forgets the old topic ID.
					return false, produceErr
				}
			case s.isolate == 0:
				s.isolate = n
				s.log.Warn("the broker refused a record; retrying one input record per transaction to find it", "records", n, "err", produceErr)
			case t.outputs == 0 && t.deadLetters > 0 && s.poisoned[t.last].envelope:
				return false, &kit.FatalError{Err: fmt.Errorf("dead-letter topic %s refused even the envelope of %s: %w", s.cfg.DeadLetter, t.last, produceErr)}
			case t.outputs == 0 && t.deadLetters > 0:
				s.poisoned[t.last] = poison{err: produceErr, envelope: true}
				s.log.Warn("the broker refused a dead letter; sending a size-bounded envelope instead", "source", t.last.String(), "err", produceErr)
			default:
				s.poisoned[t.last] = poison{err: produceErr}
				s.log.Warn("the broker refused the output of a record; dead-lettering it", "source", t.last.String(), "err", produceErr)
			}
			return false, &retryError{produceErr}
		}
		s.metrics.abort(AbortRebalance)
		s.log.Info("transaction aborted; resuming from the last committed offsets", "topic", s.cfg.Input, "records", n)
		return false, nil
	}
	s.committed.Add(1)
	s.metrics.commit(t, time.Now())
	if s.isolate > 0 {
		s.isolate--
	}
	s.sessionErr.Store(nil)
	s.produced.Add(t.outputs)
	s.deadLettered.Add(t.deadLetters)
	s.filtered.Add(t.filtered)
	s.log.Debug("transaction committed", "records", n, "outputs", t.outputs, "dead_letters", t.deadLetters)
	if s.fp.Armed(kit.CrashAfterCommit, s.txns) {
		return true, s.fp.Fire(s.log, kit.CrashAfterCommit, s.txns)
	}
	return true, nil
}

// abort ends the open transaction with an abort, best effort: the caller is
// about to drop the session, and a new one with the same transactional ID
// aborts whatever this leaves open.
func (t *txn) abort(ctx context.Context) error {
	if !t.open {
		return nil
	}
	t.open, t.records = false, 0
	t.stage.aborted.Add(1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.stage.cfg.TransactionTimeout)
	defer cancel()
	_, err := t.sess.End(ctx, false)
	return err
}
