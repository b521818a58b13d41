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
package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/processor/internal/readiness"
	"github.com/exactly-io/exactly/processor/internal/state"
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

	Input  string // input topic
	Output string // output topic
	// RouteTopics are the topics of the route steps, outputs too.
	RouteTopics  []string
	DeadLetter   string // dead-letter topic
	InputFormat  string // serde format name; default "json"
	OutputFormat string // serde format name; default "json"
	// InputCodec and OutputCodec hold the Avro settings (schema file,
	// registry) of each side; their Format and Topic are taken from the
	// fields above. See reader.CodecConfig.
	InputCodec, OutputCodec serde.Config
	// KeyField, when set, makes the output key the value of this top-level
	// field of a JSON object value. A record without it is dead-lettered.
	KeyField string
	// OutputTimestamp is the outputs' timestamp: topology.OutputTimestampInput
	// (the default: the input's) or topology.OutputTimestampWrite.
	OutputTimestamp string
	// Upstream maps the input topics of the stages that write Input to
	// their partition counts, and UpstreamIdle is how long one of those
	// partitions that sends nothing holds back the stream time of a dedupe
	// or aggregate step (default 30s; negative: for ever). See watermark.go.
	Upstream     map[string]int32
	UpstreamIdle time.Duration

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

	// SessionTimeout is the consumer group session timeout; default 45s.
	// A killed instance (a static member, KIP-345) keeps its partitions
	// until it passes, unless an instance with its ID starts again.
	SessionTimeout time.Duration
	// MetadataMaxAge bounds how late a partition added to the input topic
	// is read; default 30s.
	MetadataMaxAge time.Duration
	// FetchMaxBytes and MaxPartitionFetchBytes size the consumer's
	// fetches (kafkaconn.FetchOpts); default 2 MiB and 1 MiB.
	FetchMaxBytes, MaxPartitionFetchBytes int32
	// MaxBufferedBytes bounds the producer's unacknowledged records
	// (kgo.MaxBufferedBytes): a Produce past it waits for room, until
	// the transaction's deadline; default 4 MiB, at least 1 MiB.
	MaxBufferedBytes int
	// StateDir holds the local state of a stateful step (dedupe,
	// aggregate, stateful), in <StateDir>/<stage>-<instance>, locked while the stage
	// runs and kept across runs with a checkpoint of the changelog offset
	// it matches (see package state). Default DefaultStateDir().
	StateDir string
	// Origin locates these settings in their topology file, for the
	// errors of the checks at start; StageConfig sets it.
	Origin reader.Origin
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

// WithFailpoints arms failpoints (see failpoint.ParseFailpoints).
func WithFailpoints(fps ...failpoint.Failpoint) Option {
	return func(s *Stage) { s.fp.List = append(s.fp.List, fps...) }
}

// WithCrashAction replaces what a failpoint does when it fires. The default
// is failpoint.KillSelf. If the action returns, Run returns failpoint.ErrCrashed without ending
// the transaction or closing the client cleanly.
func WithCrashAction(f func()) Option { return func(s *Stage) { s.fp.Crash = f } }

// Stats are counters of one Stage since it was built.
type Stats struct {
	Consumed     int64 // input records polled
	Produced     int64 // output records in committed transactions
	Filtered     int64 // input records with no output and no dead letter, committed
	Deduplicated int64 // input records dropped by the dedupe step as duplicates, committed
	DeadLettered int64 // dead letters in committed transactions
	Committed    int64 // transactions committed
	Aborted      int64 // transactions aborted (rebalance, produce error)
	Rebuilds     int64 // sessions rebuilt after an error
}

// Stage is one instance of a Kafka→Kafka stage.
type Stage struct {
	cfg     Config
	in, out serde.Codec
	log     *slog.Logger
	kopts   []kgo.Opt
	fp      failpoint.Failpoints
	// offsetTrap fires crash-after-offset-commit inside End (see
	// offsettrap.go); nil unless armed. Set by each EOS session.
	offsetTrap *offsetCommitTrap
	pipeline   *transform.Pipeline
	metrics    stageMetrics
	// lag keeps the input partitions' lag series (see lag.go).
	lag *lagTracker
	// outTimes watches the output topics' retention (retention.go).
	outTimes outputTimes

	// The stateful step, dedupe, aggregate or stateful (see state.go),
	// nil without one, and, while Run runs, its local state.
	step     statefulStep
	db       *state.DB
	store    stateStore
	stateErr atomic.Pointer[error] // a failed restore, for the run loop
	// restoredRecords counts the changelog records restored by this
	// process (for failpoint.CrashDuringRestore); restores run one at a time.
	restoredRecords int
	// restoring is the restore under way, for Ready (restorewatch.go).
	restoring restoreStatus
	// tableWait is a running join's table read, for the open transactions
	// it waits for (join.go).
	tableWait restoreStatus

	// Isolating a record the broker refuses (run goroutine only): after
	// such an abort, the next isolate transactions carry one input record
	// each, and the one whose output is refused again is poisoned: it is
	// dead-lettered on its next read.
	isolate  int
	poisoned map[source]poison
	// poisonedWindows are the emit-final window results the broker
	// refused: the next time such a window closes, its result is a dead
	// letter (see afterAbort).
	poisonedWindows map[windowID]poison
	// suspectWindows are window results refused in a batch with others:
	// the retry produces each window result alone, to find the refused.
	suspectWindows map[windowID]error

	// passJSON: json in and out, no transform steps; records are checked
	// and copied, never decoded whole (see passThroughJSON).
	passJSON bool
	// stageName and inputName are the lineage header values of the
	// stage's name and input topic, made once (see lineage).
	stageName, inputName []byte

	txns int // transactions ended by this instance, for failpoints

	// Topic identity (run goroutine only): the input topic ID the last
	// session consumed, and the limit on repeated fetch error lines.
	lastTopicID [16]byte
	fetchLog    logEvery

	// delivered (run goroutine only) is what at-least-once aborts wrote
	// past their rewind point, per input partition (see rewind.go). It
	// outlives a session: a session rebuilt after an abort (a dead-letter
	// topic that is missing, say) polls those records again, and must not
	// write them again. Cleared when the input topic's ID changes.
	delivered map[partition]*deliveredRange

	// Readiness, read by Ready from other goroutines: the rule stages
	// and sinks share, and what only a stage adds to it (see ready.go).
	ready readiness.Rule
	// sessionBuilt is when the current session began (Unix nanoseconds),
	// producerReady whether its transactional producer has its producer
	// ID (exactly-once; InitProducerId can wait on the coordinator for
	// as long as an output partition refuses the markers of the
	// predecessor's open transaction).
	sessionBuilt  atomic.Int64
	producerReady atomic.Bool
	// retrying is when the transactions began to abort for a fault that
	// may pass (Unix nanoseconds; 0 after a commit), retryErr the last
	// such fault: a registry down aborts every attempt quickly, so no
	// transaction stays open long enough to read as a stall.
	retrying atomic.Int64
	retryErr atomic.Pointer[error]
	fenced   atomic.Pointer[error] // a *group.FencedError of the current session
	fences   group.FenceHistory    // whether Run rejoins after a fence or stops
	// producer is the producer ID and epoch of the last committed
	// transaction, for telling a timeout abort from a fence (fencecause.go).
	producer atomic.Pointer[producerEpoch]

	consumed, produced, deadLettered, filtered atomic.Int64
	deduplicated                               atomic.Int64
	committed, aborted, rebuilds               atomic.Int64
}

// New validates cfg and returns a Stage. It does no network I/O.
func New(cfg Config, opts ...Option) (*Stage, error) {
	// The defaults are topology's, so that a Config built by hand and one
	// built from a file (StageConfig) behave the same.
	rd := reader.Reader{Role: reader.Stages, Brokers: cfg.Brokers, ClientID: &cfg.ClientID, InputFormat: &cfg.InputFormat,
		CommitInterval: &cfg.CommitInterval, MaxRecords: &cfg.MaxRecords, SessionTimeout: &cfg.SessionTimeout, MetadataMaxAge: &cfg.MetadataMaxAge,
		FetchMaxBytes: &cfg.FetchMaxBytes, MaxPartitionFetchBytes: &cfg.MaxPartitionFetchBytes}
	rd.Defaults()
	reader.OrDefault(&cfg.OutputFormat, topology.Default[string]("stages[].output.format"))
	reader.OrDefault(&cfg.TransactionTimeout, topology.Default[time.Duration]("kafka.transaction_timeout"))
	reader.OrDefault(&cfg.MaxBufferedBytes, topology.Default[int]("stages[].max_buffered_bytes"))
	reader.OrDefault(&cfg.Guarantee, ExactlyOnce)
	reader.OrDefault(&cfg.OutputTimestamp, topology.Default[string]("stages[].output_timestamp"))
	if cfg.StateDir == "" {
		cfg.StateDir = DefaultStateDir()
	}
	errs := reader.Required([]reader.Field{
		{Name: "stage", Value: cfg.Stage}, {Name: "instance id", Value: cfg.InstanceID},
		{Name: "input topic", Value: cfg.Input}, {Name: "output topic", Value: cfg.Output}, {Name: "dead-letter topic", Value: cfg.DeadLetter},
	})
	if cfg.Guarantee != ExactlyOnce && cfg.Guarantee != AtLeastOnce {
		errs = append(errs, fault.NewConfigError("guarantee %q: want %s or %s", cfg.Guarantee, ExactlyOnce, AtLeastOnce))
	}
	if cfg.OutputTimestamp != topology.OutputTimestampInput && cfg.OutputTimestamp != topology.OutputTimestampWrite {
		errs = append(errs, fault.NewConfigError("output timestamp %q: want %s or %s", cfg.OutputTimestamp, topology.OutputTimestampInput, topology.OutputTimestampWrite))
	}
	errs = append(errs, rd.Check()...)
	if err := reader.Within("max buffered bytes", "stages[].max_buffered_bytes", cfg.MaxBufferedBytes); err != nil {
		errs = append(errs, err)
	}
	if _, hi := topology.Bounds[time.Duration]("kafka.transaction_timeout"); cfg.TransactionTimeout > hi {
		errs = append(errs, fault.NewConfigError("transaction timeout %s must be at most %s", cfg.TransactionTimeout, hi))
	}
	if cfg.CommitInterval >= cfg.TransactionTimeout {
		errs = append(errs, fault.NewConfigError("commit interval %s must be below the transaction timeout %s", cfg.CommitInterval, cfg.TransactionTimeout))
	}
	in, err := serde.NewCodec(cfg.codec(cfg.InputCodec, cfg.InputFormat, cfg.Input))
	if err != nil {
		errs = append(errs, &fault.ConfigError{Err: fmt.Errorf("input: %w", err)})
	}
	out, err := serde.NewCodec(cfg.codec(cfg.OutputCodec, cfg.OutputFormat, cfg.Output))
	if err != nil {
		errs = append(errs, &fault.ConfigError{Err: fmt.Errorf("output: %w", err)})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("stage %q: %w", cfg.Stage, err)
	}
	s := &Stage{cfg: cfg, in: in, out: out, log: slog.New(slog.DiscardHandler), fp: failpoint.Failpoints{Crash: failpoint.KillSelf}, poisoned: map[source]poison{}, poisonedWindows: map[windowID]poison{}, suspectWindows: map[windowID]error{},
		fetchLog: logEvery{every: 30 * time.Second}}
	for _, o := range opts {
		o(s)
	}
	s.log = s.log.With("stage", cfg.Stage, "txn_id", cfg.TransactionalID())
	s.initReady()
	s.metrics.bind(cfg.Stage)
	s.metrics.start(s.cfg.Input, s.Ready)
	s.metrics.WatchBrokers(s.ready.Brokers.LastAnswer)
	s.lag = newLagTracker(s.metrics, cfg.Input)
	s.step = newStatefulStep(cfg.Stage, s.pipeline)
	if s.step != nil && cfg.Guarantee != ExactlyOnce {
		return nil, fmt.Errorf("stage %q: %w", cfg.Stage, &fault.ConfigError{Err: fmt.Errorf("the %s step needs guarantee %s: its state changes commit in the stage's transactions", s.step.about().kind, ExactlyOnce)})
	}
	s.stageName, s.inputName = []byte(cfg.Stage), []byte(cfg.Input)
	s.passJSON = cfg.InputFormat == serde.JSON && cfg.OutputFormat == serde.JSON && (s.pipeline == nil || s.pipeline.Len() == 0) && s.step == nil
	return s, nil
}

// Config returns the stage's configuration with defaults applied.
func (s *Stage) Config() Config { return s.cfg }

// Stats returns a snapshot of the stage's counters.
func (s *Stage) Stats() Stats {
	return Stats{
		Consumed: s.consumed.Load(), Produced: s.produced.Load(), DeadLettered: s.deadLettered.Load(), Filtered: s.filtered.Load(),
		Deduplicated: s.deduplicated.Load(),
		Committed:    s.committed.Load(), Aborted: s.aborted.Load(), Rebuilds: s.rebuilds.Load(),
	}
}

// topicGoneWait caps the wait between looks for a deleted input topic:
// one metadata request per wait, and a recreated topic is read soon.
const topicGoneWait = 2 * time.Second

// Run processes records until ctx is canceled, then commits the open
// transaction, leaves the group and returns nil. A session that fails (a
// fenced producer, a broker that went away, a failed EndTxn) is closed and
// rebuilt with exponential backoff; the new session resumes from the
// offsets committed in the last committed transaction. Run returns an error
// only for faults that a rebuild cannot mend (see kafkaconn.IsFatal), failpoint.ErrCrashed,
// or a *ResumeError when the group lost its offsets but the stage's outputs
// remain (see guard.go).
func (s *Stage) Run(ctx context.Context) error {
	s.log.Info("stage starting", "input", s.cfg.Input, "output", s.cfg.Output, "group", s.cfg.Group())
	// The admin client looks up the input topic's ID and offsets (see
	// identity.go); it lives as long as Run.
	admCl, err := kgo.NewClient(append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), append(s.kopts, kgo.WithLogger(kafkaconn.KafkaLogger(s.log)))...)...)
	if err != nil {
		return fmt.Errorf("stage %q: %w", s.cfg.Stage, &fault.ConfigError{Err: fmt.Errorf("kafka client: %w", err)})
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	lagCtx, stopLag := context.WithCancel(ctx)
	defer s.lag.stop()
	defer stopLag()
	go s.lag.run(lagCtx, adm, s.cfg.Group())
	if err := s.checkStart(ctx, adm); err != nil {
		return fmt.Errorf("stage %q: %w", s.cfg.Stage, err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	s.watchOutputTimes(watchCtx, adm)
	if err := s.openState(); err != nil {
		return fmt.Errorf("stage %q: %w", s.cfg.Stage, err)
	}
	defer s.closeState()
	// After the start check: the guard reads the output and dead-letter
	// topics, which the check has found to exist.
	if err := s.checkResume(ctx); err != nil {
		return fmt.Errorf("stage %q: %w", s.cfg.Stage, err)
	}
	backoff := backoff.NewBackoff(100*time.Millisecond, 10*time.Second)
	rebuildLog := logEvery{every: 30 * time.Second}
	for {
		progressed, err := s.runSession(ctx, adm)
		if errp := s.fenced.Load(); errp != nil {
			err = *errp
		} else if err != nil {
			err = group.AsFenced(err, s.cfg.Group(), s.cfg.TransactionalID())
		}
		err = s.afterFence(ctx, adm, err)
		if ctx.Err() != nil && err == nil {
			s.log.Info("stage stopped")
			return nil
		}
		if errors.Is(err, failpoint.ErrCrashed) || kafkaconn.IsFatal(err) {
			return fmt.Errorf("stage %q: %w", s.cfg.Stage, err)
		}
		if progressed {
			backoff.Reset()
		}
		s.rebuilds.Add(1)
		s.metrics.rebuild()
		s.ready.Rebuilding(err)
		wait := backoff.Next()
		var changed *partpos.TopicChangedError
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &changed) && changed.New == ([16]byte{}):
			// Operators delete and recreate topics: wait for it, not
			// ready, saying so once per 30 s.
			wait = min(wait, topicGoneWait)
			if rebuildLog.ok(err.Error()) {
				s.log.Warn("input topic is gone; waiting for it", "topic", s.cfg.Input, "err", err, "retry_in", wait)
			}
		default:
			s.log.Warn("kafka session failed; rebuilding", "topic", s.cfg.Input, "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}
