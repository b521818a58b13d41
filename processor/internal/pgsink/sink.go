// Package pgsink is the exactly-once Kafka→Postgres sink.
//
// A Sink consumes one topic with isolation.level=read_committed and writes
// each batch of records, and the position after the last record it read in
// each partition, in one Postgres transaction. The stored positions, not
// the consumer group's Kafka offsets, say where to resume: on every
// assignment the sink reads them back and seeks there (a partition with no
// stored row starts at the earliest offset). A crash at any instant loses
// nothing, and the replayed records add nothing, because rows are keyed on
// an event ID with ON CONFLICT DO NOTHING (or DO UPDATE in upsert mode).
//
// # Write path
//
// One batch is one transaction:
//
//  0. LOCK TABLE target IN ROW EXCLUSIVE MODE (an INSERT's own lock), and
//     the mapped columns' types read again (checkTable): a table altered
//     or recreated while the sink runs is written with its new types'
//     casts and checks, never with the old ones (which Postgres's
//     assignment cast would round to fit).
//  1. The guarded position upsert, per partition: it only moves a stored
//     position forward from the value the batch started at. It runs first
//     so that it takes the position row's lock before any row is written:
//     two instances that both think they own a partition serialize there,
//     and the second finds the position moved and rolls back (fencing).
//  2. COPY into a session-local staging table (text columns, but a jsonb
//     one staged as jsonb: stagedType), then INSERT ... SELECT
//     with a cast per column (every row's, in a materialized CTE), one row
//     per event ID as the column's type compares it (DISTINCT ON), ... ON CONFLICT (event_id) DO NOTHING (DO
//     UPDATE in upsert mode); a tombstone under the delete policy becomes
//     a DELETE by event ID. Runs of the same kind are applied in record
//     order. SET CONSTRAINTS ALL IMMEDIATE then checks what was deferred
//     to COMMIT.
//     In insert mode, a batch of inserts is first tried as one COPY
//     straight into the table under a savepoint (the direct path,
//     direct.go); on any error it is rolled back and takes this load.
//     Where no record can be a delete, the records are decoded inside
//     the direct COPY's reader, or in upsert mode the staging COPY's
//     (loadStream, loadStreamStaged), rather than all before the load.
//  3. If Postgres rejects the data of a row (ClassRow: a constraint, a
//     cast, a value out of range, a trigger that raised, at statement time
//     or at the deferred check), the load is split in halves under
//     savepoints until the bad rows are isolated; they become dead letters
//     with their SQLSTATE and the rest loads. An error of no known class
//     (ClassUnknown) is split the same way, and its records dead-lettered
//     only if it follows them (see Classify's classes).
//  4. The dead letters (undecodable records, records without an event ID,
//     rows Postgres rejected) are inserted into the dead-letter table,
//     when the sink has one, in this transaction (ON CONFLICT DO NOTHING
//     on the record's topic, topic ID, partition and offset). Or they are
//     produced to the dead-letter topic and
//     acknowledged by Kafka. One the broker refuses as a fault of the
//     record (too large for the topic's max.message.bytes, say) is replaced
//     by its size-bounded envelope (dlq.Envelope) in the same attempt; an
//     envelope refused too stops Run (see produceDeadLetters).
//  5. COMMIT.
//
// While one batch is written, the next is polled beside it (up to
// fetch_max_bytes of records), and written only once the one before has
// committed, starting from the positions it stored (prefetch.go).
//
// # Dead letters and the order of the two systems
//
// With a dead-letter table, a dead letter commits with the position that
// skips its record, or neither does: each is recorded exactly once. With
// a dead-letter topic, a dead letter is durable in Kafka before the
// position that skips its record commits in Postgres, so it is never
// lost. A crash (or a
// lost connection during COMMIT, or a fenced batch) after step 4 and before
// the commit is known replays the batch and produces its dead letters
// again: dead letters are at least once. Each carries its source topic,
// partition and offset (kit.HeaderSource*), a unique key for
// deduplicating them.
//
// # Tombstones
//
// A record with a null value is skipped by default. Under the delete policy
// its key is the event ID, as text, of the row to delete: the key a stage
// with key: event_id writes. A tombstone without a key is a dead letter.
//
// # Versions and change streams
//
// With Config.Version (upsert mode), DO UPDATE applies only where the
// stored row's version is lower, and a batch keeps per key the greatest
// version, the first read of equal ones: an older record read later
// changes nothing. With EnvelopeDebezium, a record is a change event: c, u
// and r upsert the row mapped from its after, d deletes by the event ID in
// its before (see changeOp); tombstones are skipped.
//
// # Failures
//
// Classify sorts a write error by its SQLSTATE class. Postgres down,
// restarting, refusing connections, out of disk, a serialization failure
// or a deadlock is transient: the batch is retried with backoff, holding
// the records and blocking the consumer group's rebalances
// (kgo.BlockRebalanceOnPoll), and nothing is dead-lettered. A
// configuration Postgres rejects (class 42, 28, ...) stops Run with an
// error. An error of no known class is bisected like a row's: records
// that fail with it alone, while the rest of the batch is written, are
// dead-lettered. One that follows no record is retried maxUnexplained
// times for one batch, then stops Run with a *stuckError naming the
// batch's offsets.
package pgsink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/health"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/readiness"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
	"github.com/exactly-io/exactly/serde"
)

// Stats are counters of one Sink since it was built.
type Stats struct {
	Consumed     int64 // data records polled (control records excluded)
	Rows         int64 // rows inserted or updated by committed batches
	Deleted      int64 // rows deleted by committed batches
	Duplicates   int64 // staged rows that committed batches found already present
	DeadLettered int64 // dead letters of committed batches
	Committed    int64 // database transactions committed
	Fenced       int64 // batches rolled back by the position guard
	Retries      int64 // batches retried after a transient error
	// DirectCopies are batch loads done by a COPY straight into the
	// table; DirectFallbacks, such COPYs rolled back to their savepoint,
	// the batch then taking the staged load (direct.go). Both count
	// attempts, whether or not their transaction then commits.
	DirectCopies, DirectFallbacks int64
}

// Sink is one instance of a Postgres sink.
type Sink struct {
	cfg       Config
	codec     serde.Codec
	jsonCodec serde.Codec
	log       *slog.Logger
	kopts     []kgo.Opt
	// logPositions is the positions table as the topology file names it
	// ("" for the default): exactly-resets entries name the sink by it.
	logPositions string
	fp           failpoint.Failpoints

	pgcfg            *pgxpool.Config
	table, positions table
	// tableOID is the target table's OID as the last batch found it (0
	// before the first): another is a table dropped and created again.
	tableOID     uint32
	deadLetters  table // the dead-letter table, when Config.DeadLetterTable is set
	eventIDIndex int
	versionIndex int // the version column's index in Columns; -1 for none
	// orderHidden: the table has no trigger, rule or sequence default that
	// could tell in which order a statement's rows were inserted
	// (checkCatalog), so the fast upsert needs no sort (upsert.go).
	orderHidden  bool
	memLimit     memLimit   // memlimit.go
	fieldSources []string   // columns' source fields of the value ($-sources excluded)
	passJSON     bool       // json input: check it and decode only fieldSources
	types        []colType  // target column types, in Columns order
	typed        typedState // avro input: derived types, added columns (typed.go)
	sql          struct {
		staging, insert, fast, truncate, delete, guard, deadLetters, direct, directCheck string
		// stagingName is the staging table of the columns' shape
		// (schema.go).
		stagingName string
		// The formats of the direct COPY and of the staging COPY
		// (copyformat.go).
		directFormat, stagingFormat copyFormat
	}
	// direct is the choice of the direct path (direct.go); noDirect
	// turns it off (DirectCopy(false)).
	direct   directPath
	noDirect bool
	// upsertRest is the fast upsert statement's rest after it met a key
	// twice (upsert.go).
	upsertRest fastRest

	pool *pgxpool.Pool
	cl   *kgo.Client
	adm  *kadm.Client // of its own client: topic IDs and offsets of the input

	mu   sync.Mutex
	pos  map[int32]position // owned partitions and where the next batch starts
	ends map[int32]ends     // owned partitions' last known log start and last stable offsets
	lag  lagHold            // partitions whose lag series outlive their ownership (see lag.go)

	// topicTrouble is the input topic missing or recreated while
	// running; logged once, then at most every topicLogEvery.
	topicTrouble struct {
		gone     atomic.Pointer[error] // readiness: set while the topic does not exist
		loggedAt time.Time
		last     string
	}

	commits int // database commits attempted, for failpoints

	metrics sinkMetrics
	// Readiness, read by Ready from other goroutines: the rule stages
	// and sinks share, with the sink's input topic and PostgreSQL step.
	ready readiness.Rule
	// step is where the running attempt at a PostgreSQL call is, for
	// /readyz and the timeout's error; nil between attempts.
	step atomic.Pointer[attemptStep]
	// isolating is set while the batch being written keeps timing out
	// (see timeoutsBeforeIsolating); only the loop reads or writes it.
	isolating bool
	// fatal is an error found in a group callback (adjust), returned by
	// the loop.
	fatal         atomic.Pointer[error]
	abort         atomic.Pointer[context.CancelFunc] // ends the current client's loop, after fatal is set
	fences        group.FenceHistory                 // whether Run rejoins after a fence or stops
	targetChecked atomic.Bool                        // checkTarget passed since the last assignment

	consumed, rows, deleted, duplicates, deadLettered atomic.Int64
	committed, fenced, retries                        atomic.Int64
	directCopies, directFallbacks                     atomic.Int64
}

// position is what the sink believes is stored for a partition (the
// guard's expected value) and where this instance reads it from.
type position struct {
	stored  bool   // a row exists
	next    int64  // its next_offset
	topicID string // its topic_id ("" for a row stored without one)
	current string // the topic ID of the incarnation being read, written by the next batch
	from    int64  // the first offset read after the last seek; records below it were buffered before it
	rewind  bool   // the next batch may store a position below next: the topic was recreated or truncated
}

// ends are a partition's offsets as last seen, and when, for the lag
// metric and its age.
type ends struct {
	logStart, lastStable int64
	at                   time.Time
}

func (p position) expected() *int64 {
	if !p.stored {
		return nil
	}
	n := p.next
	return &n
}

// New validates cfg and returns a Sink. It does no network I/O; Run
// creates missing tables.
func New(cfg Config, opts ...Option) (*Sink, error) {
	logPositions := cfg.PositionsTable // before the default, as reset names it
	err := cfg.validate()
	var pgcfg *pgxpool.Config
	if cfg.DSN != "" {
		var perr error
		// The parse error would quote the DSN, password and all.
		if pgcfg, perr = pgxpool.ParseConfig(cfg.DSN); perr != nil {
			err = errors.Join(err, errBadDSN)
		} else {
			withConnectTimeout(cfg.DSN, pgcfg.ConnConfig)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	codec, _ := serde.NewCodec(cfg.inputCodec())
	jsonCodec, _ := serde.New(serde.JSON)
	s := &Sink{cfg: cfg, codec: codec, jsonCodec: jsonCodec, pgcfg: pgcfg,
		log: slog.New(slog.DiscardHandler), fp: failpoint.Failpoints{Crash: failpoint.KillSelf}, pos: map[int32]position{}, ends: map[int32]ends{}}
	s.table, _ = parseTable(cfg.Table)
	s.positions, _ = parseTable(cfg.PositionsTable)
	s.logPositions = logPositions
	s.deadLetters, _ = parseTable(cfg.DeadLetterTable)
	s.eventIDIndex = slices.IndexFunc(cfg.Columns, func(c Column) bool { return c.Name == cfg.EventID })
	s.versionIndex = -1
	if cfg.Version != "" {
		s.versionIndex = slices.IndexFunc(cfg.Columns, func(c Column) bool { return c.Name == cfg.Version })
	}
	s.passJSON = cfg.InputFormat == serde.JSON
	s.initTyped()
	for _, c := range cfg.Columns {
		if !strings.HasPrefix(c.Source, "$") && !slices.Contains(s.fieldSources, c.Source) {
			s.fieldSources = append(s.fieldSources, c.Source)
		}
	}
	for _, o := range opts {
		o(s)
	}
	s.log = s.log.With("sink", cfg.Sink, "instance", cfg.InstanceID)
	s.initReady()
	s.metrics.bind(cfg.Sink)
	s.metrics.start(s.cfg.Input, s.Ready)
	s.metrics.WatchBrokers(s.ready.Brokers.LastAnswer)
	return s, nil
}

// Ready returns nil when the sink is healthy: it holds its partitions in
// its consumer group (health.Membership) and was not fenced out of its group (group.FencedError), Postgres and Kafka answer, and no batch has been open for
// longer than health.StallFactor commit intervals (at least
// health.StallMin). Otherwise the error says why (readiness.Rule.Check).
// It never shows the DSN. It is safe to call from any goroutine, e.g. a
// /readyz handler.
func (s *Sink) Ready() error { return s.ready.Check() }

// initReady sets up the sink's readiness rule: its input topic gone comes
// before Kafka's reasons, and a stalled batch says where it waits.
func (s *Sink) initReady() {
	r := &s.ready
	r.Name, r.Group, r.CommitInterval = "sink "+s.cfg.Sink, s.cfg.Group(), s.cfg.CommitInterval
	r.Failing, r.Open = "retrying", "batch"
	r.Fenced = s.fencedErr
	r.Input = func() error {
		if errp := s.topicTrouble.gone.Load(); errp != nil {
			return *errp
		}
		return nil
	}
	r.Waiting = func() string {
		if st := s.step.Load(); st != nil {
			return st.waiting()
		}
		return ""
	}
	r.Brokers = health.NewBrokerHealth()
}

// Config returns the sink's configuration with defaults applied.
func (s *Sink) Config() Config { return s.cfg }

// Stats returns a snapshot of the sink's counters.
func (s *Sink) Stats() Stats {
	return Stats{
		Consumed: s.consumed.Load(), Rows: s.rows.Load(), Deleted: s.deleted.Load(),
		Duplicates: s.duplicates.Load(), DeadLettered: s.deadLettered.Load(),
		Committed: s.committed.Load(), Fenced: s.fenced.Load(), Retries: s.retries.Load(),
		DirectCopies: s.directCopies.Load(), DirectFallbacks: s.directFallbacks.Load(),
	}
}

// Run creates the tables that are missing, then writes records until ctx is
// canceled, when it commits the batch in hand, leaves the group and returns
// nil. Transient Postgres and Kafka errors are retried with backoff; Run
// returns an error for a fatal one (see IsFatal for Postgres and
// kafkaconn.IsFatal for Kafka), or failpoint.ErrCrashed.
func (s *Sink) Run(ctx context.Context) error {
	s.log.Info("sink starting", "input", s.cfg.Input, "table", s.cfg.Table, "group", s.cfg.Group())
	if err := s.retry(ctx, "set up schema", s.bounded("PostgreSQL: set up the tables", s.setup)); err != nil {
		return s.startErr(ctx, err)
	}
	s.startMemoryLimit()
	pool, err := s.newPool(ctx)
	if err != nil {
		return fmt.Errorf("sink %q: postgres pool: %w", s.cfg.Sink, err)
	}
	defer pool.Close()
	s.pool = pool

	admCl, err := kgo.NewClient(append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), s.kopts...)...)
	if err != nil {
		return fmt.Errorf("sink %q: kafka client: %w", s.cfg.Sink, &fault.ConfigError{Err: err})
	}
	defer admCl.Close()
	s.adm = kadm.NewClient(admCl)
	lagCtx, stopLag := context.WithCancel(ctx)
	defer stopLag()
	go s.watchLag(lagCtx)
	if err := s.retry(ctx, "check kafka", s.checkKafka); err != nil {
		return s.startErr(ctx, err)
	}
	// Credentials the schema registry refuses stop the sink now, not at
	// its first record (serde.ErrRegistryRefused); a registry that does
	// not answer is left to the records, which wait for it.
	if err := serde.CheckRegistry(ctx, s.codec); serde.IsRegistryRefused(err) {
		return fmt.Errorf("sink %q: %w", s.cfg.Sink, &fault.ConfigError{Err: fmt.Errorf("input registry: %w", err)})
	} else if err != nil {
		s.log.Warn("schema registry check failed; records wait for the registry", "err", err)
	}
	cl, err, startErr := s.consume(ctx)
	if cl == nil {
		return startErr
	}
	return s.stop(ctx, cl, err)
}

// startErr is Run's error for err, a step before consuming that failed:
// none if ctx ended.
func (s *Sink) startErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("sink %q: %w", s.cfg.Sink, err)
}

// newPool opens the sink's pool of Postgres connections.
func (s *Sink) newPool(ctx context.Context) (*pgxpool.Pool, error) {
	pcfg := s.pgcfg.Copy()
	pcfg.MaxConns = 4
	setSessionParams(pcfg.ConnConfig.RuntimeParams)
	nameSessions(pcfg.ConnConfig.RuntimeParams, s.cfg.Sink)
	idle := strconv.FormatInt(max(2*s.cfg.SessionTimeout, 30*time.Second).Milliseconds(), 10)
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		// An instance paused inside a batch's transaction (SIGSTOP, a VM
		// freeze) holds its position rows' locks, and the partitions' new
		// owner waits on them. Postgres ends such a transaction after
		// this long; the guard makes either outcome safe. Only where
		// nothing set one (the DSN, as a parameter or in options=-c, the
		// role or the database): the session's value is 0 then.
		if _, err := c.Exec(ctx, idleTimeoutSQL, idle); err != nil {
			return err
		}
		if _, err := c.Exec(ctx, s.sql.staging); err != nil {
			return err
		}
		return createTempFuncs(ctx, c)
	}
	return pgxpool.NewWithConfig(ctx, pcfg)
}

// consume joins the group and writes records until ctx ends or the loop
// fails, with a new client after a fence that may be spurious or a
// recreated input topic. It returns the last client and the loop's error;
// without a client, startErr is Run's error (nil if ctx ended first).
func (s *Sink) consume(ctx context.Context) (cl *kgo.Client, err, startErr error) {
	for {
		if err := s.retry(ctx, "check consumer group", s.checkGroup); err != nil {
			return nil, nil, s.startErr(ctx, err)
		}
		lctx, abort := context.WithCancel(ctx)
		s.abort.Store(&abort)
		fence := group.NewFenceWatch(s.cfg.Group(), s.cfg.GroupInstanceID(), s.onFenced)
		if cl, err = kgo.NewClient(s.clientOptions(fence)...); err != nil {
			abort()
			return nil, nil, fmt.Errorf("sink %q: kafka client: %w", s.cfg.Sink, &fault.ConfigError{Err: err})
		}
		fence.Attach(cl)
		s.cl = cl
		err = s.loop(lctx)
		abort()
		if errp := s.fatal.Load(); errp != nil {
			err = *errp
		}
		if fenced := (*group.FencedError)(nil); errors.As(err, &fenced) && ctx.Err() == nil && s.fences.Rejoin(time.Now()) {
			// Possibly spurious (see group.FenceHistory): a new client
			// rejoins; a second fence within the window stops. No
			// leave: the group.instance.id may be another process's.
			s.log.Warn("fenced out of the consumer group; rejoining with a new client (fenced again within the window, the sink stops)",
				"group", s.cfg.Group(), "instance_id", s.cfg.GroupInstanceID(), "window", group.FenceRejoinWindow, "err", fenced.Err)
			s.fatal.Store(nil)
			s.ready.Member.Reset()
			cl.AllowRebalance()
			s.holdLag()
			cl.Close()
			s.forget()
			continue
		}
		if !errors.Is(err, errRebuild) {
			return cl, err, nil
		}
		// The input topic was recreated: franz-go never adopts a topic's
		// new ID, so a new client reads the new incarnation, and its
		// assignment applies the start-position rules (adjust). The same
		// static member ID takes the partitions back at once.
		cl.AllowRebalance()
		s.holdLag()
		cl.Close()
		s.forget()
	}
}

// stop closes cl, whose loop ended with err, and leaves the group on the
// instance's behalf unless the instance ID is another process's now.
func (s *Sink) stop(ctx context.Context, cl *kgo.Client, err error) error {
	if errors.Is(err, failpoint.ErrCrashed) {
		// A simulated crash: no flush, no leave.
		go cl.Close()
		return fmt.Errorf("sink %q: %w", s.cfg.Sink, err)
	}
	cl.AllowRebalance()
	cl.Close()
	if s.fencedErr() != nil {
		// The group.instance.id is another process's now: a leave by
		// it would remove that process from the group.
		return fmt.Errorf("sink %q: %w", s.cfg.Sink, err)
	}
	// A static member does not leave on Close; leave on its behalf so
	// that the group rebalances now, not after the session timeout.
	group.LeaveStaticGroup(context.WithoutCancel(ctx), s.log, s.cfg.Group(), s.cfg.GroupInstanceID(),
		append(kafkaconn.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), s.kopts...)...)
	if err != nil {
		return fmt.Errorf("sink %q: %w", s.cfg.Sink, err)
	}
	s.log.Info("sink stopped")
	return nil
}

func (s *Sink) clientOptions(fence *group.FenceWatch) []kgo.Opt {
	opts := append(kafkaconn.GroupConsumerOpts(s.cfg.Brokers, s.cfg.ClientID, group.RoleSink, s.cfg.Group(), s.cfg.GroupInstanceID(), s.cfg.Input, s.log, s.ready.Brokers, fence),
		kafkaconn.MetadataOpts(s.cfg.MetadataMaxAge)...)
	opts = append(opts, kafkaconn.FetchOpts(s.cfg.FetchMaxBytes, s.cfg.MaxPartitionFetchBytes)...)
	opts = append(opts,
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		// Positions live in Postgres; the group's offsets are never
		// committed nor read.
		kgo.DisableAutoCommit(),
		kgo.AdjustFetchOffsetsFn(s.adjust),
		// A batch is written whole by the owner that polled it: no revoke
		// runs between a poll and the batch's commit.
		kgo.BlockRebalanceOnPoll(),
	)
	// A sink assigned partitions is ready once their positions are read
	// (adjust); one assigned none (more instances than partitions) is a
	// member with nothing to do, and ready: a StatefulSet's rollout waits
	// for every pod to be ready.
	opts = append(opts, s.ready.Member.Opts(s.cfg.Input, s.assignedNone, s.drop, s.lose)...)
	// The role's client.id goes after the injected options, whose own
	// client ID (the file's) would otherwise hide the role from the start
	// check of another process (group.CheckGroup).
	return append(append(opts, s.kopts...), kgo.ClientID(group.RoleClientID(s.cfg.ClientID, group.RoleSink)))
}

// adjust replaces the offsets the group would resume from with the
// positions stored in Postgres, on every assignment, after checking each
// against the topic as the broker has it now (decideStart): the topic's
// ID, log start offset and high watermark.
func (s *Sink) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	parts := make([]int32, 0, len(offsets[s.cfg.Input]))
	for p := range offsets[s.cfg.Input] {
		parts = append(parts, p)
	}
	var stored map[int32]StoredPosition
	var ts topicState
	err := s.retry(ctx, "read positions", s.bounded(stepPositions, func(ctx context.Context) (err error) {
		if stored, err = s.readPositions(ctx, parts); err != nil {
			return err
		}
		if err = s.checkTarget(ctx); err != nil {
			return err
		}
		ts, err = s.readTopic(ctx, parts)
		return err
	}))
	if err != nil {
		if IsFatal(err) {
			s.fatal.Store(&err)
			s.endLoop() // Run returns the error
		}
		return nil, err
	}
	s.targetChecked.Store(false)
	s.mu.Lock()
	defer s.mu.Unlock()
	resume := map[int32]int64{}
	for _, p := range parts {
		row, ok := stored[p]
		at := decideStart(row, ok, ts.id, ts.start[p], ts.end[p])
		pos := position{stored: ok, next: row.NextOffset, topicID: row.TopicID, current: ts.id,
			rewind: at.reason == ReasonRecreated || at.reason == ReasonTruncated}
		if at.offset < 0 {
			offsets[s.cfg.Input][p] = kgo.NewOffset().AtStart()
		} else {
			offsets[s.cfg.Input][p] = kgo.NewOffset().At(at.offset).WithEpoch(-1)
			pos.from = at.offset
		}
		resume[p] = max(at.offset, ts.start[p])
		s.lag.assigned(p)
		s.pos[p] = pos
		s.ends[p] = ends{logStart: ts.start[p], lastStable: ts.lastStb[p], at: time.Now()}
		s.publishLag(p)
		s.logStart(p, row, at, ts)
	}
	slices.Sort(parts)
	s.lag.dropHeld(s)
	s.ready.Member.Assigned()
	s.metrics.Rebalance()
	s.log.Info("partitions assigned; resuming from stored positions", "topic", s.cfg.Input, "topic_id", ts.id,
		"partitions", parts, "stored", len(stored), "resume_at", resume)
	return offsets, nil
}

// logStart logs and counts a start position that is not the stored one.
func (s *Sink) logStart(p int32, row StoredPosition, at startAt, ts topicState) {
	args := []any{"topic", s.cfg.Input, "partition", p, "stored_offset", row.NextOffset, "stored_topic_id", row.TopicID,
		"topic_id", ts.id, "log_start", ts.start[p], "high_watermark", ts.end[p]}
	switch at.reason {
	case ReasonRecreated:
		s.metrics.Recreated(s.cfg.Input, at.reason)
		s.log.Warn("input topic was recreated since the position was stored; reading the new topic from its first offset", args...)
	case ReasonTruncated:
		s.metrics.Recreated(s.cfg.Input, at.reason)
		s.log.Error("stored position is above the partition's high watermark (the log was truncated, or the row edited); "+
			"reading the partition from its log start so that no record appended since is skipped (event IDs absorb the re-read)", args...)
	case reasonRetention:
		s.log.Warn("stored position is below the log start offset: retention deleted records the sink never read; resuming at the log start", args...)
	}
}

// readPositions returns the stored positions of the partitions parts.
func (s *Sink) readPositions(ctx context.Context, parts []int32) (map[int32]StoredPosition, error) {
	if parts == nil {
		parts = []int32{} // none, not all
	}
	rows, err := queryPositions(ctx, s.pool, s.positions, s.cfg.Sink, s.cfg.Input, parts)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]StoredPosition, len(rows))
	for _, r := range rows {
		out[r.Partition] = r
	}
	return out, nil
}

func (s *Sink) drop(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.dropParts(lost, false)
}

// lose forgets the partitions of a lost membership; their lag series
// stay until the next assignment (see lagHold).
func (s *Sink) lose(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.dropParts(lost, true)
}

func (s *Sink) dropParts(lost map[string][]int32, hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range lost[s.cfg.Input] {
		s.lag.gone(s, p, hold)
		delete(s.pos, p)
		delete(s.ends, p)
	}
	if len(lost[s.cfg.Input]) > 0 {
		s.metrics.Rebalance()
		s.log.Info("partitions revoked", "topic", s.cfg.Input, "partitions", lost[s.cfg.Input])
	}
}

// idleTimeoutSQL sets idle_in_transaction_session_timeout to $1
// (milliseconds) for the session when it has none.
const idleTimeoutSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, false)
	WHERE current_setting('idle_in_transaction_session_timeout') = '0'`

// forget drops every partition, before a new client is assigned them.
func (s *Sink) forget() {
	s.mu.Lock()
	parts := make([]int32, 0, len(s.pos))
	for p := range s.pos {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	s.drop(context.Background(), nil, map[string][]int32{s.cfg.Input: parts})
	s.ready.Member.Reset()
}

// publishLag sets partition p's lag metric from what the sink knows: the
// last stable offset last seen and the stored position. It is the
// definition `exactly status` uses (partpos.Lag), so the two agree whenever
// their last stable offsets do, also while a batch is retried. s.mu is
// held.
func (s *Sink) publishLag(p int32) {
	e, ok := s.ends[p]
	pos, owned := s.pos[p]
	if !ok || !owned {
		return
	}
	s.metrics.SetLag(s.cfg.Input, p, partpos.Lag(e.lastStable, e.logStart, pos.next, pos.stored), e.at)
}

// markStored records that batch b committed: its partitions' positions
// are stored, with the topic ID they were read under.
func (s *Sink) markStored(b *batch) {
	s.evolved()
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, n := range b.next {
		if pos, owned := s.pos[p]; owned {
			s.pos[p] = position{stored: true, next: n, topicID: pos.current, current: pos.current, from: n}
			s.publishLag(p)
		}
	}
}

// refreshLag reads the input's last stable and log start offsets from
// the broker and republishes the lag of the owned partitions: while a
// batch is retried nothing is polled, and new records still add lag.
func (s *Sink) refreshLag(ctx context.Context) {
	ts, err := s.readTopic(ctx, nil)
	if err != nil {
		return // the metric keeps its last value; the retry logs the batch's error
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.pos {
		if _, ok := ts.lastStb[p]; ok {
			s.ends[p] = ends{logStart: ts.start[p], lastStable: ts.lastStb[p], at: time.Now()}
			s.publishLag(p)
		}
	}
	s.lag.refresh(s, ts)
}

// loop polls batches and writes them until ctx ends. While a batch is
// written, the next one is polled beside it (prefetch.go), one ahead at
// most.
func (s *Sink) loop(ctx context.Context) error {
	b := newBatch()
	var w *inflight
	drained := time.Now() // the last AllowRebalance
	for {
		fetches := s.pollBeside(ctx, b, w)
		if w.finished() {
			var err error
			if b, fetches, err = s.landed(w, b, fetches); err != nil {
				return err
			}
			w = nil
		}
		fatal, topicErr := s.fetchErrors(fetches)
		if fatal != nil {
			s.await(w)
			return group.AsFenced(fatal, s.cfg.Group(), s.cfg.GroupInstanceID())
		}
		if err := s.fencedErr(); err != nil {
			// Another process holds our group.instance.id: what was
			// polled is its to write, not ours.
			s.await(w)
			return err
		}
		s.addFetches(b, fetches)
		if ctx.Err() != nil || topicErr != nil || b.full(s.cfg) || (w != nil && b.bytes >= int(s.cfg.FetchMaxBytes)) {
			// The batch beside lands first: the next one's positions
			// start where it ends, if it committed.
			var err error
			if b, err = s.settle(w, b); err != nil {
				return err
			}
			w = nil
		}
		if ctx.Err() != nil {
			return s.writeAtShutdown(ctx, b)
		}
		if topicErr != nil {
			// Write what was read of the old incarnation first: its
			// positions are stored under the old topic ID.
			if b.open {
				if err := s.writeBatch(ctx, b); err != nil {
					return err
				}
				b = newBatch()
				s.ready.Closed()
				s.cl.AllowRebalance()
				drained = time.Now()
			}
			if err := s.checkTopic(ctx, topicErr); err != nil {
				return err
			}
			continue
		}
		if b.full(s.cfg) {
			if time.Since(drained) < prefetchSpan(s.cfg) {
				w = s.writeBeside(ctx, b)
				b = nextBeside(w)
				continue
			}
			if err := s.writeBatch(ctx, b); err != nil {
				return err
			}
			b = newBatch()
			s.ready.Closed()
		}
		if !b.open && w == nil {
			s.cl.AllowRebalance()
			drained = time.Now()
		}
	}
}

// poll polls at most the records left under b's cap, until b's commit
// interval ends if it is open.
func (s *Sink) poll(ctx context.Context, b *batch) kgo.Fetches {
	if !b.open {
		return s.cl.PollRecords(ctx, s.cfg.MaxRecords-b.records)
	}
	pollCtx, cancel := context.WithDeadline(ctx, b.started.Add(s.cfg.CommitInterval))
	defer cancel()
	return s.cl.PollRecords(pollCtx, s.cfg.MaxRecords-b.records)
}

// fetchErrors sorts the errors of fetches: fatal ends the sink, topicErr
// says the input topic is gone or recreated; others are logged.
func (s *Sink) fetchErrors(fetches kgo.Fetches) (fatal, topicErr error) {
	fetches.EachError(func(topic string, p int32, err error) {
		switch {
		case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		case errors.Is(err, kgo.ErrClientClosed), kafkaconn.IsFatal(err):
			fatal = err
		case topic == s.cfg.Input && (errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)):
			topicErr = err
		default:
			s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
		}
	})
	return fatal, topicErr
}

// addFetches puts the polled records into b, and notes the log start and
// last stable offsets of each owned partition, for its lag.
func (s *Sink) addFetches(b *batch, fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		s.findDeleted(b, p)
		for _, r := range p.Records {
			s.add(b, r)
		}
		if len(p.Records) > 0 {
			s.mu.Lock()
			if _, owned := s.pos[p.Partition]; owned {
				s.ends[p.Partition] = ends{logStart: p.LogStartOffset, lastStable: p.LastStableOffset, at: time.Now()}
				s.publishLag(p.Partition)
			}
			s.mu.Unlock()
		}
	})
}

// writeAtShutdown writes what was polled if Postgres answers soon;
// otherwise the next owner reads it again.
func (s *Sink) writeAtShutdown(ctx context.Context, b *batch) error {
	if !b.open {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err := s.attempt(wctx, stepDecode, func(ctx context.Context) error { return s.write(ctx, b) })
	cancel()
	if errors.Is(err, failpoint.ErrCrashed) || IsFatal(err) {
		return err
	}
	if err != nil {
		s.log.Warn("batch not written at shutdown; it will be read again", "err", err)
	}
	return nil
}

// add puts a polled record into the batch.
func (s *Sink) add(b *batch, r *kgo.Record) {
	start, ok := b.start[r.Partition]
	if !ok {
		s.mu.Lock()
		start, ok = s.pos[r.Partition]
		s.mu.Unlock()
		if !ok || r.Offset < start.from {
			return // not ours, or buffered before a seek
		}
		b.start[r.Partition] = start
		b.order = append(b.order, r.Partition)
	}
	if !b.open {
		b.open, b.started = true, time.Now()
		if !b.beside {
			s.ready.Opened(b.started)
		}
	}
	b.records++
	b.bytes += len(r.Key) + len(r.Value)
	if _, ok := b.first[r.Partition]; !ok {
		b.first[r.Partition] = r.Offset
	}
	b.next[r.Partition] = r.Offset + 1
	if r.Attrs.IsControl() || audit.IsMarker(r) {
		return // a transaction marker or an audit marker: no event
	}
	s.consumed.Add(1)
	s.metrics.consumedRecord(r.Topic)
	b.recs = append(b.recs, r)
}

// prepare turns the batch's records into ops and dead letters. It runs at
// each attempt: a codec's transient failure (serde.ErrTransient, say a
// schema registry that is down) fails the attempt, to be retried, and
// never makes a dead letter.
func (s *Sink) prepare(b *batch) (ops []op, dead []deadLetter, err error) {
	ops = make([]op, 0, len(b.recs))
	for _, r := range b.recs {
		if ops, dead, err = s.prepareRecord(r, ops, dead); err != nil {
			return nil, nil, err
		}
	}
	s.padRows(ops)
	return ops, dead, nil
}

// prepareRecord is prepare's step for one record r: it appends r's op to
// ops, or its dead letter to dead, or neither (a skipped tombstone), or
// fails for a codec's transient failure.
func (s *Sink) prepareRecord(r *kgo.Record, ops []op, dead []deadLetter) ([]op, []deadLetter, error) {
	o, ok, err := s.toOp(r)
	switch {
	case serde.IsTransient(err), IsFatal(err):
		return ops, dead, fmt.Errorf("decode %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	case err != nil:
		var re *dlq.RecordError
		errors.As(err, &re)
		s.log.Debug("dead-lettering record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", re.Reason, "err", re.Err)
		dead = append(dead, s.newDeadLetter(r, re))
	case ok:
		ops = append(ops, o)
	}
	return ops, dead, nil
}

// maxUnexplained bounds the attempts at one batch that fail with an error
// that is neither transient nor found in a row (ClassUnknown that follows
// no single record, or a row's error outside the load: at COMMIT after the
// deferred check, say).
const maxUnexplained = 6

// writeBatch writes b, retrying transient errors with backoff until it commits,
// ctx ends (nil: the records are read again by whoever owns them next) or
// a fatal error. A fenced batch is dropped after re-seeking to the stored
// positions. Rows Postgres rejects are dead-lettered inside write; an
// error that recurs maxUnexplained times without an explanation stops the
// sink with a *stuckError naming the batch's offsets, rather than spin.
func (s *Sink) writeBatch(ctx context.Context, b *batch) error {
	s.growMemoryLimit(b)
	bo := backoff.NewBackoff(100*time.Millisecond, 5*time.Second)
	var f batchFailures
	defer func() { s.isolating = false }()
	for {
		err := s.attemptBatch(ctx, b)
		if done, err := s.attemptEnds(ctx, b, err); done {
			return err
		}
		class := Classify(err)
		if err := s.countFailure(ctx, b, &f, err, class); err != nil {
			return err
		}
		s.ready.Fail(err)
		s.retries.Add(1)
		s.metrics.Retry(RetryWrite)
		s.refreshLag(ctx)
		wait := bo.Next()
		s.log.Warn("batch failed; retrying", "topic", s.cfg.Input, "partitions", b.order, "err", err, "class", class.String(), "retry_in", wait, "records", b.records)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// attemptBatch is one attempt at writing b, then, once, the check of the
// target table after the first commit.
func (s *Sink) attemptBatch(ctx context.Context, b *batch) error {
	if err := s.recordDeleted(ctx, b); err != nil {
		return err
	}
	err := s.attemptAt(ctx, &s.step, s.writeTimeout(), stepDecode, func(ctx context.Context) error { return s.write(ctx, b) })
	if err == nil && !s.targetChecked.Load() {
		if err = s.attempt(ctx, "PostgreSQL: check the target table", s.checkTarget); err == nil {
			s.targetChecked.Store(true)
		}
	}
	return err
}

// attemptEnds reports whether err, the outcome of an attempt at b, ends
// writeBatch, and with what: success, a fatal error, a fenced batch
// (re-seeking to the stored positions) or the end of ctx.
func (s *Sink) attemptEnds(ctx context.Context, b *batch, err error) (bool, error) {
	switch {
	case err == nil:
		s.ready.Fail(nil)
		return true, nil
	case errors.Is(err, failpoint.ErrCrashed), IsFatal(err), kafkaconn.IsFatal(err):
		return true, err
	case errors.Is(err, ErrFenced):
		s.fenced.Add(1)
		s.metrics.fence()
		partition := int32(-1)
		if fe := (*fencedError)(nil); errors.As(err, &fe) {
			partition = fe.partition
		}
		s.log.Warn("position guard failed: another instance wrote the partition; re-reading positions",
			"topic", s.cfg.Input, "partition", partition, "err", err)
		return true, s.reseek(ctx, b)
	case ctx.Err() != nil:
		return true, nil
	}
	return false, nil
}

// batchFailures counts the failed attempts at one batch.
type batchFailures struct {
	unexplained int // errors with no explanation (see maxUnexplained)
	timeouts    int // timeouts writing the rows, in a row
}

// countFailure counts err, of class, the error of an attempt at b: it
// returns a *stuckError once maxUnexplained of them had no explanation,
// and starts isolating the batch when its rows keep timing out while
// PostgreSQL answers.
func (s *Sink) countFailure(ctx context.Context, b *batch, f *batchFailures, err error, class Class) error {
	if class != ClassTransient || s.isolating {
		// While isolating, the batch's timeouts are its records'
		// (the probe answered): they count as unexplained too.
		if f.unexplained++; f.unexplained >= maxUnexplained {
			return &stuckError{topic: s.cfg.Input, ranges: b.ranges(), attempts: f.unexplained, err: err}
		}
	}
	if timedOutWriting(err) {
		f.timeouts++
	} else {
		f.timeouts = 0
	}
	if f.timeouts >= timeoutsBeforeIsolating && !s.isolating && s.probe(ctx) == nil {
		s.isolating = true
		s.log.Warn("the batch's rows keep timing out while PostgreSQL answers other work: looking for the records they follow, one statement timeout each",
			"topic", s.cfg.Input, "partitions", b.order, "attempts", f.timeouts, "statement_timeout", s.cfg.Timeout, "err", err)
	}
	return nil
}

// reseek re-reads the stored positions of the batch's partitions and
// moves consumption there, with the rules of an assignment (decideStart).
func (s *Sink) reseek(ctx context.Context, b *batch) error {
	var stored map[int32]StoredPosition
	var ts topicState
	err := s.retry(ctx, "read positions", s.bounded(stepPositions, func(ctx context.Context) (err error) {
		if stored, err = s.readPositions(ctx, b.order); err != nil {
			return err
		}
		ts, err = s.readTopic(ctx, b.order)
		return err
	}))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	seek := map[int32]kgo.EpochOffset{}
	s.mu.Lock()
	for _, p := range b.order {
		if _, owned := s.pos[p]; !owned {
			continue
		}
		row, ok := stored[p]
		at := decideStart(row, ok, ts.id, ts.start[p], ts.end[p])
		pos := position{stored: ok, next: row.NextOffset, topicID: row.TopicID, current: s.pos[p].current,
			rewind: at.reason == ReasonRecreated || at.reason == ReasonTruncated, from: max(at.offset, 0)}
		s.pos[p] = pos
		// Offset 0 for the log start: out of range when the log starts
		// later, and the reset policy (ConsumeResetOffset) finds the start.
		seek[p] = kgo.EpochOffset{Epoch: -1, Offset: max(at.offset, 0)}
		s.logStart(p, row, at, ts)
	}
	s.mu.Unlock()
	s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{s.cfg.Input: seek})
	return nil
}

// retry runs f until it succeeds, returns a non-transient error, or ctx
// ends.
func (s *Sink) retry(ctx context.Context, what string, f func(context.Context) error) error {
	bo := backoff.NewBackoff(100*time.Millisecond, 5*time.Second)
	for {
		err := f(ctx)
		if err == nil || !IsTransient(err) {
			if err == nil {
				s.ready.Fail(nil)
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.ready.Fail(err)
		s.retries.Add(1)
		s.metrics.Retry(strings.ReplaceAll(what, " ", "_"))
		wait := bo.Next()
		s.log.Warn(what+" failed; retrying", "topic", s.cfg.Input, "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// batch is the records polled for one database transaction.
type batch struct {
	open    bool
	started time.Time
	records int                // records polled, control records included
	bytes   int                // their keys' and values' bytes
	recs    []*kgo.Record      // data records, in poll order
	start   map[int32]position // per partition: the guard's expected position
	next    map[int32]int64    // per partition: offset after the last record read
	first   map[int32]int64    // per partition: the first offset read
	order   []int32            // partitions in first-seen order
	// deleted are the input ranges deleted before the sink read them,
	// recorded in the reset log before the batch commits (deleted.go).
	deleted  []resetlog.Partition
	recorded bool
	// beside: polled while the batch before it is written (prefetch.go),
	// whose next offsets are after; committed: the batch's transaction
	// committed.
	beside    bool
	after     map[int32]int64
	committed bool
}

func newBatch() *batch {
	return &batch{start: map[int32]position{}, next: map[int32]int64{}, first: map[int32]int64{}}
}

// from returns where partition p's batch starts: the stored position, or
// without one the first offset read (the log start, where the reset
// policy seeks).
func (b *batch) from(p int32) (int64, bool) {
	if st, ok := b.start[p]; ok && st.stored {
		return st.next, true
	}
	f, ok := b.first[p]
	return f, ok
}
