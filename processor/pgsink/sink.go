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
//  1. The guarded position upsert, per partition: it only moves a stored
//     position forward from the value the batch started at. It runs first
//     so that it takes the position row's lock before any row is written:
//     two instances that both think they own a partition serialize there,
//     and the second finds the position moved and rolls back (fencing).
//  2. COPY into a session-local text staging table, then INSERT ... SELECT
//     with a cast per column, one row per event ID as the column's type
//     compares it (DISTINCT ON), ... ON CONFLICT (event_id) DO NOTHING (DO
//     UPDATE in upsert mode); a tombstone under the delete policy becomes
//     a DELETE by event ID. Runs of the same kind are applied in record
//     order. SET CONSTRAINTS ALL IMMEDIATE then checks what was deferred
//     to COMMIT.
//  3. If Postgres rejects the data of a row (ClassRow: a constraint, a
//     cast, a value out of range, a trigger that raised, at statement time
//     or at the deferred check), the load is split in halves under
//     savepoints until the bad rows are isolated; they become dead letters
//     with their SQLSTATE and the rest loads.
//  4. The dead letters (undecodable records, records without an event ID,
//     rows Postgres rejected) are produced to the dead-letter topic and
//     acknowledged by Kafka.
//  5. COMMIT.
//
// # Dead letters and the order of the two systems
//
// A dead letter is durable in Kafka before the position that skips its
// record commits in Postgres, so a dead letter is never lost. A crash (or a
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
// # Failures
//
// Classify sorts a write error by its SQLSTATE class. Postgres down,
// restarting, refusing connections, out of disk, a serialization failure
// or a deadlock is transient: the batch is retried with backoff, holding
// the records and blocking the consumer group's rebalances
// (kgo.BlockRebalanceOnPoll), and nothing is dead-lettered. A
// configuration Postgres rejects (class 42, 28, ...) stops Run with an
// error. An error of no known class is retried maxUnexplained times for
// one batch, then stops Run with a *stuckError naming the batch's offsets.
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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/audit"
	"github.com/exactly-io/exactly/processor/kit"
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
}

// Sink is one instance of a Postgres sink.
type Sink struct {
	cfg       Config
	codec     serde.Codec
	jsonCodec serde.Codec
	log       *slog.Logger
	kopts     []kgo.Opt
	fp        kit.Failpoints

	pgcfg            *pgxpool.Config
	table, positions table
	eventIDIndex     int
	fieldSources     []string // columns' source fields of the value ($-sources excluded)
	passJSON         bool     // json input: check it and decode only fieldSources
	types            []string // target column types, in Columns order
	sql              struct{ staging, insert, truncate, delete, guard string }

	pool *pgxpool.Pool
	cl   *kgo.Client

	mu  sync.Mutex
	pos map[int32]position // owned partitions and where the next batch starts

	commits int // database commits attempted, for failpoints

	metrics sinkMetrics
	// Readiness, read by Ready from other goroutines.
	brokers     *kit.BrokerHealth
	joined      atomic.Bool
	batchOpened atomic.Int64 // Unix nanoseconds of the open batch's first record; 0 when none
	failing     atomic.Pointer[error]

	consumed, rows, deleted, duplicates, deadLettered atomic.Int64
	committed, fenced, retries                        atomic.Int64
}

// position is what the sink believes is stored for a partition: the
// guard's expected value.
type position struct {
	stored bool  // a row exists
	next   int64 // its next_offset
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
	err := cfg.validate()
	var pgcfg *pgxpool.Config
	if cfg.DSN != "" {
		var perr error
		// The parse error would quote the DSN, password and all.
		if pgcfg, perr = pgxpool.ParseConfig(cfg.DSN); perr != nil {
			err = errors.Join(err, errBadDSN)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	codec, _ := serde.New(cfg.InputFormat)
	jsonCodec, _ := serde.New(serde.JSON)
	s := &Sink{cfg: cfg, codec: codec, jsonCodec: jsonCodec, pgcfg: pgcfg,
		log: slog.New(slog.DiscardHandler), fp: kit.Failpoints{Crash: kit.KillSelf}, pos: map[int32]position{},
		brokers: kit.NewBrokerHealth()}
	s.table, _ = parseTable(cfg.Table)
	s.positions, _ = parseTable(cfg.PositionsTable)
	s.eventIDIndex = slices.IndexFunc(cfg.Columns, func(c Column) bool { return c.Name == cfg.EventID })
	s.passJSON = cfg.InputFormat == serde.JSON
	for _, c := range cfg.Columns {
		if !strings.HasPrefix(c.Source, "$") && !slices.Contains(s.fieldSources, c.Source) {
			s.fieldSources = append(s.fieldSources, c.Source)
		}
	}
	for _, o := range opts {
		o(s)
	}
	s.log = s.log.With("sink", cfg.Sink, "instance", cfg.InstanceID)
	s.metrics.sink = cfg.Sink
	return s, nil
}

// Ready returns nil when the sink is healthy: it has been assigned its
// partitions, Postgres and Kafka answer, and no batch has been open for
// longer than kit.StallFactor commit intervals (at least
// kit.StallMin). Otherwise the error says why. It never shows the
// DSN. It is safe to call from any goroutine, e.g. a /readyz handler.
func (s *Sink) Ready() error {
	if errp := s.failing.Load(); errp != nil && *errp != nil {
		return fmt.Errorf("sink %s: retrying: %w", s.cfg.Sink, *errp)
	}
	if !s.joined.Load() {
		return fmt.Errorf("sink %s: no partitions assigned yet in group %s", s.cfg.Sink, s.cfg.Group())
	}
	if err := s.brokers.Check(kit.BrokerSilenceLimit); err != nil {
		return fmt.Errorf("sink %s: %w", s.cfg.Sink, err)
	}
	if err := kit.CheckStall("batch", s.batchOpened.Load(), s.cfg.CommitInterval); err != nil {
		return fmt.Errorf("sink %s: %w", s.cfg.Sink, err)
	}
	return nil
}

// Config returns the sink's configuration with defaults applied.
func (s *Sink) Config() Config { return s.cfg }

// Stats returns a snapshot of the sink's counters.
func (s *Sink) Stats() Stats {
	return Stats{
		Consumed: s.consumed.Load(), Rows: s.rows.Load(), Deleted: s.deleted.Load(),
		Duplicates: s.duplicates.Load(), DeadLettered: s.deadLettered.Load(),
		Committed: s.committed.Load(), Fenced: s.fenced.Load(), Retries: s.retries.Load(),
	}
}

// Run creates the tables that are missing, then writes records until ctx is
// canceled, when it commits the batch in hand, leaves the group and returns
// nil. Transient Postgres and Kafka errors are retried with backoff; Run
// returns an error for a fatal one (see IsFatal for Postgres and
// kit.IsFatal for Kafka), or kit.ErrCrashed.
func (s *Sink) Run(ctx context.Context) error {
	s.log.Info("sink starting", "input", s.cfg.Input, "table", s.cfg.Table, "group", s.cfg.Group())
	if err := s.retry(ctx, "set up schema", s.setup); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("sink %q: %w", s.cfg.Sink, err)
	}
	pcfg := s.pgcfg.Copy()
	pcfg.MaxConns = 4
	if _, set := pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !set {
		// An instance paused inside a batch's transaction (SIGSTOP, a VM
		// freeze) holds its position rows' locks, and the partitions' new
		// owner waits on them. Postgres ends such a transaction after
		// this long; the guard makes either outcome safe.
		pcfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(max(2*s.cfg.SessionTimeout, 30*time.Second).Milliseconds(), 10)
	}
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, s.sql.staging)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("sink %q: postgres pool: %w", s.cfg.Sink, err)
	}
	defer pool.Close()
	s.pool = pool

	cl, err := kgo.NewClient(s.clientOptions()...)
	if err != nil {
		return fmt.Errorf("sink %q: kafka client: %w", s.cfg.Sink, &kit.ConfigError{Err: err})
	}
	s.cl = cl
	err = s.loop(ctx)
	if errors.Is(err, kit.ErrCrashed) {
		// A simulated crash: no flush, no leave.
		go cl.Close()
		return fmt.Errorf("sink %q: %w", s.cfg.Sink, err)
	}
	cl.AllowRebalance()
	cl.Close()
	// A static member does not leave on Close; leave on its behalf so
	// that the group rebalances now, not after the session timeout.
	kit.LeaveStaticGroup(context.WithoutCancel(ctx), s.log, s.cfg.Group(), s.cfg.GroupInstanceID(),
		append(kit.ClientOpts(s.cfg.Brokers, s.cfg.ClientID), s.kopts...)...)
	if err != nil {
		return fmt.Errorf("sink %q: %w", s.cfg.Sink, err)
	}
	s.log.Info("sink stopped")
	return nil
}

func (s *Sink) clientOptions() []kgo.Opt {
	opts := append(kit.GroupConsumerOpts(s.cfg.Brokers, s.cfg.ClientID, s.cfg.Group(), s.cfg.GroupInstanceID(), s.cfg.Input, s.log, s.brokers),
		kit.MetadataOpts(s.cfg.MetadataMaxAge)...)
	opts = append(opts,
		kgo.SessionTimeout(s.cfg.SessionTimeout),
		// Positions live in Postgres; the group's offsets are never
		// committed nor read.
		kgo.DisableAutoCommit(),
		kgo.AdjustFetchOffsetsFn(s.adjust),
		kgo.OnPartitionsRevoked(s.drop),
		kgo.OnPartitionsLost(s.drop),
		// A batch is written whole by the owner that polled it: no revoke
		// runs between a poll and the batch's commit.
		kgo.BlockRebalanceOnPoll(),
	)
	return append(opts, s.kopts...)
}

// adjust replaces the offsets the group would resume from with the
// positions stored in Postgres, on every assignment.
func (s *Sink) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	parts := make([]int32, 0, len(offsets[s.cfg.Input]))
	for p := range offsets[s.cfg.Input] {
		parts = append(parts, p)
	}
	var stored map[int32]int64
	err := s.retry(ctx, "read positions", func(ctx context.Context) (err error) {
		stored, err = s.readPositions(ctx, parts)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range parts {
		n, ok := stored[p]
		s.pos[p] = position{stored: ok, next: n}
		if ok {
			offsets[s.cfg.Input][p] = kgo.NewOffset().At(n).WithEpoch(-1)
		} else {
			offsets[s.cfg.Input][p] = kgo.NewOffset().AtStart()
		}
	}
	slices.Sort(parts)
	s.joined.Store(true)
	s.metrics.rebalance()
	s.log.Info("partitions assigned; resuming from stored positions", "topic", s.cfg.Input, "partitions", parts, "positions", stored)
	return offsets, nil
}

// readPositions returns the stored next offsets of the partitions parts.
func (s *Sink) readPositions(ctx context.Context, parts []int32) (map[int32]int64, error) {
	if parts == nil {
		parts = []int32{} // none, not all
	}
	rows, err := queryPositions(ctx, s.pool, s.positions, s.cfg.Input, parts)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(rows))
	for _, r := range rows {
		out[r.Partition] = r.NextOffset
	}
	return out, nil
}

func (s *Sink) drop(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range lost[s.cfg.Input] {
		delete(s.pos, p)
		s.metrics.drop(s.cfg.Input, p)
	}
	if len(lost[s.cfg.Input]) > 0 {
		s.metrics.rebalance()
		s.log.Info("partitions revoked", "topic", s.cfg.Input, "partitions", lost[s.cfg.Input])
	}
}

// loop polls batches and writes them until ctx ends.
func (s *Sink) loop(ctx context.Context) error {
	b := newBatch()
	for {
		pollCtx, cancel := ctx, context.CancelFunc(func() {})
		if b.open {
			pollCtx, cancel = context.WithDeadline(ctx, b.started.Add(s.cfg.CommitInterval))
		}
		fetches := s.cl.PollRecords(pollCtx, s.cfg.MaxRecords-b.records)
		cancel()
		var fatal error
		fetches.EachError(func(topic string, p int32, err error) {
			switch {
			case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
			case errors.Is(err, kgo.ErrClientClosed), kit.IsFatal(err):
				fatal = err
			default:
				s.log.Warn("fetch error", "topic", topic, "partition", p, "err", err)
			}
		})
		if fatal != nil {
			return fatal
		}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				s.add(b, r)
			}
			if len(p.Records) > 0 {
				// The lag is from the stored position, as `exactly
				// status` reads it, not from what was polled: a batch
				// that is not written yet is still lag. write moves it
				// at commit.
				b.lso[p.Partition] = p.LastStableOffset
				if from, ok := b.from(p.Partition); ok {
					s.metrics.setLag(p.Topic, p.Partition, p.LastStableOffset-from)
				}
			}
		})
		if ctx.Err() != nil {
			// Shutdown: write what was polled if Postgres answers soon;
			// otherwise the next owner reads it again.
			if b.open {
				wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err := s.write(wctx, b)
				cancel()
				if errors.Is(err, kit.ErrCrashed) || IsFatal(err) {
					return err
				}
				if err != nil {
					s.log.Warn("batch not written at shutdown; it will be read again", "err", err)
				}
			}
			return nil
		}
		if b.open && (b.records >= s.cfg.MaxRecords || time.Since(b.started) >= s.cfg.CommitInterval) {
			if err := s.writeBatch(ctx, b); err != nil {
				return err
			}
			b = newBatch()
			s.batchOpened.Store(0)
		}
		if !b.open {
			s.cl.AllowRebalance()
		}
	}
}

// add puts a polled record into the batch.
func (s *Sink) add(b *batch, r *kgo.Record) {
	start, ok := b.start[r.Partition]
	if !ok {
		s.mu.Lock()
		start, ok = s.pos[r.Partition]
		s.mu.Unlock()
		if !ok || (start.stored && r.Offset < start.next) {
			return // not ours, or buffered before a seek
		}
		b.start[r.Partition] = start
		b.order = append(b.order, r.Partition)
	}
	if !b.open {
		b.open, b.started = true, time.Now()
		s.batchOpened.Store(b.started.UnixNano())
	}
	b.records++
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
func (s *Sink) prepare(b *batch) (ops []op, dead []*kgo.Record, err error) {
	ops = make([]op, 0, len(b.recs))
	for _, r := range b.recs {
		o, ok, err := s.toOp(r)
		switch {
		case serde.IsTransient(err):
			return nil, nil, fmt.Errorf("decode %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
		case err != nil:
			var re *kit.RecordError
			errors.As(err, &re)
			s.log.Debug("dead-lettering record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "reason", re.Reason, "err", re.Err)
			dead = append(dead, s.deadLetterOf(r, re))
		case ok:
			ops = append(ops, o)
		}
	}
	return ops, dead, nil
}

// maxUnexplained bounds the attempts at one batch that fail with an error
// that is neither transient nor found in a row (ClassUnknown, or a row's
// error outside the load: at COMMIT after the deferred check, say).
const maxUnexplained = 6

// writeBatch writes b, retrying transient errors with backoff until it commits,
// ctx ends (nil: the records are read again by whoever owns them next) or
// a fatal error. A fenced batch is dropped after re-seeking to the stored
// positions. Rows Postgres rejects are dead-lettered inside write; an
// error that recurs maxUnexplained times without an explanation stops the
// sink with a *stuckError naming the batch's offsets, rather than spin.
func (s *Sink) writeBatch(ctx context.Context, b *batch) error {
	bo := kit.NewBackoff(100*time.Millisecond, 5*time.Second)
	unexplained := 0
	for {
		err := s.write(ctx, b)
		switch {
		case err == nil:
			s.failing.Store(nil)
			return nil
		case errors.Is(err, kit.ErrCrashed), IsFatal(err), kit.IsFatal(err):
			return err
		case errors.Is(err, ErrFenced):
			s.fenced.Add(1)
			s.metrics.fence()
			partition := int32(-1)
			if fe := (*fencedError)(nil); errors.As(err, &fe) {
				partition = fe.partition
			}
			s.log.Warn("position guard failed: another instance wrote the partition; re-reading positions",
				"topic", s.cfg.Input, "partition", partition, "err", err)
			return s.reseek(ctx, b)
		case ctx.Err() != nil:
			return nil
		}
		class := Classify(err)
		if class != ClassTransient {
			if unexplained++; unexplained >= maxUnexplained {
				return &stuckError{topic: s.cfg.Input, ranges: b.ranges(), attempts: unexplained, err: err}
			}
		}
		s.failing.Store(&err)
		s.retries.Add(1)
		s.metrics.retry(RetryWrite)
		wait := bo.Next()
		s.log.Warn("batch failed; retrying", "topic", s.cfg.Input, "partitions", b.order, "err", err, "class", class.String(), "retry_in", wait, "records", b.records)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// reseek re-reads the stored positions of the batch's partitions and
// moves consumption there.
func (s *Sink) reseek(ctx context.Context, b *batch) error {
	var stored map[int32]int64
	err := s.retry(ctx, "read positions", func(ctx context.Context) (err error) {
		stored, err = s.readPositions(ctx, b.order)
		return err
	})
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
		n, ok := stored[p]
		s.pos[p] = position{stored: ok, next: n}
		seek[p] = kgo.EpochOffset{Epoch: -1, Offset: n} // 0 without a row: the reset policy finds the start
	}
	s.mu.Unlock()
	s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{s.cfg.Input: seek})
	return nil
}

// retry runs f until it succeeds, returns a non-transient error, or ctx
// ends.
func (s *Sink) retry(ctx context.Context, what string, f func(context.Context) error) error {
	bo := kit.NewBackoff(100*time.Millisecond, 5*time.Second)
	for {
		err := f(ctx)
		if err == nil || !IsTransient(err) {
			if err == nil {
				s.failing.Store(nil)
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.failing.Store(&err)
		s.retries.Add(1)
		s.metrics.retry(strings.ReplaceAll(what, " ", "_"))
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
	recs    []*kgo.Record      // data records, in poll order
	start   map[int32]position // per partition: the guard's expected position
	next    map[int32]int64    // per partition: offset after the last record read
	first   map[int32]int64    // per partition: the first offset read
	lso     map[int32]int64    // per partition: the last stable offset when last polled
	order   []int32            // partitions in first-seen order
}

func newBatch() *batch {
	return &batch{start: map[int32]position{}, next: map[int32]int64{}, first: map[int32]int64{}, lso: map[int32]int64{}}
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
