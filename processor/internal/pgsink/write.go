package pgsink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/topology"
)

// result counts what one attempt at a batch did.
type result struct {
	rows, deleted, duplicates int64
	// unmatched counts the deletes that matched no stored row.
	unmatched int64
	dead      []deadLetter
	// unclassified counts the ops dead-lettered by the load for an error
	// of no known class (ClassUnknown) that they fail with alone; first
	// is the first such error.
	unclassified int
	first        error
	// timedOut counts the ops whose rows timed out alone while
	// isolating (see timeoutsBeforeIsolating).
	timedOut int
}

// attemptStep is where an attempt at a PostgreSQL call is, and since when.
type attemptStep struct {
	name  string
	since time.Time
}

// waiting says where the attempt is, for /readyz.
func (st *attemptStep) waiting() string {
	return fmt.Sprintf("its write has been at %s for %s", st.name, time.Since(st.since).Round(time.Second))
}

// The steps of a batch's attempt (write), named in /readyz and in the
// error of an attempt past the timeout.
const (
	stepDecode  = "decode the records"
	stepConnect = "PostgreSQL: take a connection"
	stepBegin   = "PostgreSQL: BEGIN"
	stepLock    = "PostgreSQL: lock the target table"
	stepGuard   = "PostgreSQL: check the stored positions"
	stepEvolve  = "PostgreSQL: add columns"
	stepLoad    = "PostgreSQL: write the rows"
	stepDead    = "record the dead letters"
	stepCommit  = "PostgreSQL: COMMIT"
	// stepPositions reads the stored positions at an assignment, or after
	// the position guard failed.
	stepPositions = "PostgreSQL: read the stored positions"
)

// at records that the running attempt has reached step name.
func (s *Sink) at(name string) { s.step.Store(&attemptStep{name: name, since: time.Now()}) }

// attemptTimeoutError is an attempt at a PostgreSQL call that the sink
// cancelled at cfg.Timeout: the server stopped answering, or the work
// needs longer than the timeout allows. It has no SQLSTATE, so it is
// transient (Classify): the attempt is retried with backoff. An attempt
// cancelled at COMMIT may have committed; the retry's position guard
// finds out (ErrFenced, then the positions are read again).
type attemptTimeoutError struct {
	step    string
	timeout time.Duration
	err     error
}

func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("no answer within postgres.timeout %s, at %s: the attempt was cancelled and is retried (raise timeout if the work needs longer): %v", e.timeout, e.step, e.err)
}

func (e *attemptTimeoutError) Unwrap() error { return e.err }

// attempt runs f, one attempt at writing a batch whose first step is
// first, under cfg.Timeout; s.step says where it is until it returns, for
// /readyz and the timeout's error.
func (s *Sink) attempt(ctx context.Context, first string, f func(context.Context) error) error {
	return s.attemptAt(ctx, &s.step, s.cfg.Timeout, first, f)
}

// attemptAt is attempt under timeout, for an attempt whose steps slot
// holds.
func (s *Sink) attemptAt(ctx context.Context, slot *atomic.Pointer[attemptStep], timeout time.Duration, first string, f func(context.Context) error) error {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	slot.Store(&attemptStep{name: first, since: time.Now()})
	defer slot.Store(nil)
	err := f(actx)
	if err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		step := first
		if st := slot.Load(); st != nil {
			step = st.name
		}
		return &attemptTimeoutError{step: step, timeout: timeout, err: err}
	}
	return err
}

// bounded is f, a call of one step (name) that is no batch's write (the
// set-up, a read of the positions at an assignment, which runs beside a
// batch's write), as attempts under cfg.Timeout, for retry.
func (s *Sink) bounded(name string, f func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var own atomic.Pointer[attemptStep]
		return s.attemptAt(ctx, &own, s.cfg.Timeout, name, f)
	}
}

// A batch whose rows keep timing out is isolated (write, load): after
// timeoutsBeforeIsolating attempts in a row that timed out writing its
// rows, while a probe shows that PostgreSQL answers, the fault follows
// the batch's data (a trigger that sleeps on one record, a row lock a
// record waits on): a fault that recurs for ever is not transient. Each
// attempt then loads the rows with the staged load under a statement
// timeout of cfg.Timeout (or the session's own, when shorter), which
// cancels a statement where the client deadline would close the
// connection, and bisects the timeouts (SQLSTATE 57014) like an error of
// no known class: a record whose rows time out alone while the rest of
// the batch is written is dead-lettered with the error (reason postgres);
// more than maxIsolatedTimeouts of them in one attempt, or every record,
// and the timeouts follow no record. Every failed attempt while isolating
// counts towards maxUnexplained, after which the sink stops naming the
// batch's offsets. The attempt's deadline is cfg.Timeout times
// isolateTimeoutFactor, for the bisection's statements.
const (
	timeoutsBeforeIsolating = 3
	maxIsolatedTimeouts     = 3
	isolateTimeoutFactor    = 40
)

// writeTimeout is the deadline of one attempt at a batch.
func (s *Sink) writeTimeout() time.Duration {
	if s.isolating {
		return isolateTimeoutFactor * s.cfg.Timeout
	}
	return s.cfg.Timeout
}

// timedOutWriting reports whether err, an attempt's, is a timeout while
// the batch's rows were written: the client's deadline at stepLoad, or a
// statement cancelled by statement_timeout (57014).
func timedOutWriting(err error) bool {
	var te *attemptTimeoutError
	if errors.As(err, &te) {
		return te.step == stepLoad
	}
	return sqlState(err) == "57014"
}

// probe asks PostgreSQL the least it can answer, to tell a server that
// does not answer from work that takes too long.
func (s *Sink) probe(ctx context.Context) error {
	return s.attempt(ctx, "PostgreSQL: probe", func(ctx context.Context) error {
		var one int
		return s.pool.QueryRow(ctx, "SELECT 1").Scan(&one)
	})
}

// statementTimeoutSQL sets the statement timeout of an isolating
// attempt's transaction to $1 (milliseconds), unless the session's own is
// shorter.
const statementTimeoutSQL = `SELECT set_config('statement_timeout', CASE WHEN current_setting('statement_timeout') = '0'
	OR current_setting('statement_timeout')::interval > ($1 || ' ms')::interval THEN $1 ELSE current_setting('statement_timeout') END, true)`

// write runs one attempt at batch b in one database transaction (see the
// package documentation for its steps).
func (s *Sink) write(ctx context.Context, b *batch) error {
	stream, ops, dead, err := s.decodeFirst(b)
	if err != nil {
		return err
	}
	s.at(stepConnect)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	s.at(stepBegin)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		// A no-op after Commit. Bounded too: after a fault outside
		// Postgres (the dead-letter topic's), the connection is still
		// open, and the server may have stopped answering meanwhile.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}()
	if err := s.beginBatch(ctx, tx, b); err != nil {
		return err
	}
	res, err := s.loadRows(ctx, tx, b, stream, ops, dead)
	if err != nil {
		return err
	}
	return s.commitBatch(ctx, tx, b, res)
}

// decodeFirst chooses how write loads batch b, and decodes it now unless
// it streams: a streamable batch is decoded inside its COPY (loadStream,
// loadStreamStaged); any other before the transaction starts.
func (s *Sink) decodeFirst(b *batch) (stream int, ops []op, dead []deadLetter, err error) {
	stream = s.streamable(b)
	if s.isolating {
		stream = streamNone // the staged load bisects; see timeoutsBeforeIsolating
	}
	if stream == streamNone {
		if ops, dead, err = s.prepare(b); err != nil {
			return 0, nil, nil, err
		}
	}
	return stream, ops, dead, nil
}

// beginBatch runs the steps of write's transaction before the rows: the
// statement timeout while isolating, the lock and check of the target
// table, the position guard and the columns to add.
func (s *Sink) beginBatch(ctx context.Context, tx pgx.Tx, b *batch) error {
	if s.isolating {
		if _, err := tx.Exec(ctx, statementTimeoutSQL, strconv.FormatInt(s.cfg.Timeout.Milliseconds(), 10)); err != nil {
			return err
		}
	}
	s.at(stepLock)
	if err := s.checkTable(ctx, tx); err != nil {
		return err
	}
	s.at(stepGuard)
	if err := s.guard(ctx, tx, b); err != nil {
		return err
	}
	s.at(stepEvolve)
	return s.evolve(ctx, tx) // typed.go
}

// loadRows writes the rows of batch b the way stream says (ops and dead
// when decoded before), then its dead letters.
func (s *Sink) loadRows(ctx context.Context, tx pgx.Tx, b *batch, stream int, ops []op, dead []deadLetter) (*result, error) {
	s.at(stepLoad)
	res := &result{dead: dead}
	loaded, decoded := len(ops), len(dead)
	var err error
	switch stream {
	case streamDirect:
		loaded, decoded, err = s.loadStream(ctx, tx, b, res)
	case streamStaged:
		loaded, decoded, err = s.loadStreamStaged(ctx, tx, b, res)
	default:
		err = s.loadBatch(ctx, tx, ops, res)
	}
	if err != nil {
		return nil, err
	}
	if err := s.followsRecords(loaded, res, len(res.dead)-decoded); err != nil {
		return nil, err
	}
	if len(res.dead) > 0 {
		// In the dead-letter table, in this transaction: exactly once.
		// In the topic, durable in Kafka before the position skipping
		// the records commits in Postgres: at least once, never lost.
		s.at(stepDead)
		if err := s.recordDeadLetters(ctx, tx, b, res.dead); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// commitBatch commits write's transaction and counts what it wrote.
func (s *Sink) commitBatch(ctx context.Context, tx pgx.Tx, b *batch, res *result) error {
	s.commits++
	if s.fp.Armed(failpoint.CrashBeforeDBCommit, s.commits) {
		return s.fp.Fire(s.log, failpoint.CrashBeforeDBCommit, s.commits)
	}
	s.at(stepCommit)
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	b.committed = true
	s.committed.Add(1)
	s.metrics.commit(b, res, s.cfg.Input, time.Now())
	s.rows.Add(res.rows)
	s.deleted.Add(res.deleted)
	s.duplicates.Add(res.duplicates)
	s.deadLettered.Add(int64(len(res.dead)))
	s.markStored(b)
	s.log.Debug("batch committed", "records", b.records, "rows", res.rows, "duplicates", res.duplicates, "dead_letters", len(res.dead))
	if s.fp.Armed(failpoint.CrashAfterDBCommit, s.commits) {
		return s.fp.Fire(s.log, failpoint.CrashAfterDBCommit, s.commits)
	}
	return nil
}

// errTableChanged is the error of a batch attempt that found the mapped
// columns' types changed since the sink read them: the attempt is retried
// (an error without a SQLSTATE is transient) with the types read again.
var errTableChanged = errors.New("the target table's columns changed while the sink runs; the batch is retried with their new types")

// checkTable locks the target in ROW EXCLUSIVE mode (the lock an INSERT
// takes, which conflicts with every ALTER TABLE and DROP, and with no
// other writer) and reads its columns' types: a table altered or dropped
// and created again while the sink runs (a column's type changed from
// numeric(10,2) to integer, say) would otherwise be written with the casts
// and checks of the old types, and Postgres's assignment cast would round
// 1.5 into 2 silently. When a mapped column's type changed, the SQL is
// built again for the new types, and the attempt fails with
// errTableChanged. It runs first in the transaction, so that a REPEATABLE
// READ snapshot is taken after the lock.
func (s *Sink) checkTable(ctx context.Context, tx pgx.Tx) error {
	oid, types, err := s.lockTable(ctx, tx)
	if err != nil {
		return err
	}
	pending := map[int]bool{} // columns evolve is about to add (typed.go)
	for _, p := range s.typed.pending {
		pending[p.index] = true
	}
	changed, err := s.changedColumns(types, pending)
	if err != nil {
		return err
	}
	if len(changed) == 0 {
		s.tableOID = oid
		return nil
	}
	if err := s.adoptTypes(types, pending); err != nil {
		return err
	}
	s.tableOID = oid
	s.log.Warn("target table columns changed while running; writing with their new types", "table", s.table, "changed", changed)
	return errTableChanged
}

// lockTable locks the target table and reads its oid and its columns'
// types, in one round trip, and warns when the oid changed: the table was
// dropped and created again.
func (s *Sink) lockTable(ctx context.Context, tx pgx.Tx) (uint32, map[string]colType, error) {
	var pb pgx.Batch
	pb.Queue("LOCK TABLE " + s.table.String() + " IN ROW EXCLUSIVE MODE")
	pb.Queue("SELECT $1::regclass::oid", s.table.String())
	pb.Queue(readTypesSQL, s.table.String())
	// The staging table of the columns' shape, where this connection
	// has none yet (stagingTable): the shape changes with the types.
	// After the lock, which takes no snapshot, as the CREATE would.
	pb.Queue(s.sql.staging)
	br := tx.SendBatch(ctx, &pb)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return 0, nil, fmt.Errorf("lock %s: %w", s.table, err)
	}
	var oid uint32
	if err := br.QueryRow().Scan(&oid); err != nil {
		_ = br.Close()
		return 0, nil, fmt.Errorf("look up %s: %w", s.table, err)
	}
	if s.tableOID != 0 && oid != s.tableOID {
		// The rows written before the drop went with the old table; the
		// positions say they were loaded.
		s.log.Warn("target table was dropped and created again while running: rows loaded before are not in it (exactly reset --sink --to-earliest loads them again)",
			"table", s.table, "old_oid", s.tableOID, "oid", oid)
	}
	rows, err := br.Query()
	var types map[string]colType
	if err == nil {
		types, err = scanColumnTypes(rows, s.table)
	} else {
		err = fmt.Errorf("read columns of %s: %w", s.table, err)
	}
	if err == nil {
		if _, cerr := br.Exec(); cerr != nil {
			err = fmt.Errorf("create the staging table: %w", cerr)
		}
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("read columns of %s: %w", s.table, cerr)
	}
	if err != nil {
		return 0, nil, err
	}
	return oid, types, nil
}

// changedColumns names the mapped columns, other than pending ones, whose
// type is not the one the sink writes with ("name: old -> new"), or
// fails when one is gone.
func (s *Sink) changedColumns(types map[string]colType, pending map[int]bool) ([]string, error) {
	var changed []string
	for i, c := range s.cfg.Columns {
		if pending[i] {
			continue
		}
		t, ok := types[c.Name]
		if !ok {
			return nil, fault.NewConfigError("table %s has no column %q any more (changed while the sink runs)", s.table, c.Name)
		}
		if t != s.types[i] {
			changed = append(changed, fmt.Sprintf("%s: %s -> %s", c.Name, s.types[i].name, t.name))
		}
	}
	return changed, nil
}

// adoptTypes writes with the table's new column types from now on (the
// pending columns keep theirs), unless the version column's new type
// cannot order versions.
func (s *Sink) adoptTypes(types map[string]colType, pending map[int]bool) error {
	old := slices.Clone(s.types)
	for i, c := range s.cfg.Columns {
		if !pending[i] {
			s.types[i] = types[c.Name]
		}
	}
	if err := s.checkVersionType(); err != nil {
		s.types = old
		return err
	}
	if s.typed.tableCols != nil {
		s.typed.tableCols = types
	}
	s.rebuild()
	return nil
}

// guard moves each partition's stored position from where the batch
// started to where it ends, or fails with a *fencedError.
func (s *Sink) guard(ctx context.Context, tx pgx.Tx, b *batch) error {
	var pb pgx.Batch
	for _, p := range b.order {
		pb.Queue(s.sql.guard, s.guardArgs(b, p)...)
	}
	br := tx.SendBatch(ctx, &pb)
	for _, p := range b.order {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("update position of partition %d: %w", p, err)
		}
		if tag.RowsAffected() != 1 {
			_ = br.Close()
			return &fencedError{partition: p, expected: b.start[p].expected()}
		}
	}
	return br.Close()
}

const savepoint = "exactly_load"

// checkDeferred makes Postgres check, now, every constraint deferred to
// COMMIT (DEFERRABLE INITIALLY DEFERRED unique, foreign key and exclusion
// constraints, and constraint triggers): a row that would fail at COMMIT
// fails here instead, inside the load's savepoint, where it can be found.
// Rolling back to the savepoint restores the deferred mode; after a
// release the rest of the transaction checks at once, which only the
// load's later halves see.
const checkDeferred = "SET CONSTRAINTS ALL IMMEDIATE"

// load applies ops under a savepoint, then checks the deferred
// constraints. When Postgres rejects the data of a row (ClassRow, at
// statement time or at the deferred check), it rolls back to the savepoint
// and loads each half on its own, in order, down to single ops, which
// become dead letters: a batch with k bad records of n costs about
// 2k·log2(n) statements. Two ops on one key that Postgres refuses in one
// statement (21000 in upsert mode, when the key's text differs but its
// value in the column's type does not) load fine once in different
// halves, the later one last.
//
// An error of no known class (ClassUnknown: a trigger raising a
// user-defined SQLSTATE such as U0001, say) is bisected the same way, to
// see whether it follows single records. A load that fails with one while
// none of its ops fails with one alone (it fails only together) returns
// it: it follows no record. Whether the ops that fail alone leave anything
// written is followsRecords' question, once the whole load is done.
func (s *Sink) load(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	if len(ops) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
		return err
	}
	err := s.applyChecked(ctx, tx, ops, res)
	if err == nil {
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT "+savepoint)
		return err
	}
	class, stop := s.loadClass(err, len(ops), res)
	if stop != nil {
		return stop
	}
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); rerr != nil {
		return rerr
	}
	if len(ops) == 1 {
		s.deadLetterOp(ctx, tx, ops[0], class, err, res)
	} else if err := s.bisect(ctx, tx, ops, class, err, res); err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "RELEASE SAVEPOINT "+savepoint)
	return err
}

// applyChecked applies ops and checks the deferred constraints, and adds
// what they wrote to res when both succeed.
func (s *Sink) applyChecked(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	var r result
	if err := s.apply(ctx, tx, ops, &r); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, checkDeferred); err != nil {
		return err
	}
	res.rows += r.rows
	res.deleted += r.deleted
	res.unmatched += r.unmatched
	res.duplicates += r.duplicates
	return nil
}

// loadClass classifies err, the error of a load of n ops. stop is the
// error that ends the load instead of a bisection: err itself when its
// class is neither ClassRow nor ClassUnknown, or too many records whose
// rows time out alone while isolating.
func (s *Sink) loadClass(err error, n int, res *result) (class Class, stop error) {
	class = Classify(err)
	if s.isolating && sqlState(err) == "57014" {
		// A statement timeout: bisected, to find the records it
		// follows (see timeoutsBeforeIsolating).
		if class = ClassUnknown; n == 1 {
			if res.timedOut++; res.timedOut > maxIsolatedTimeouts {
				return class, fmt.Errorf("more than %d records' rows time out alone: the timeouts follow no record: %w", maxIsolatedTimeouts, err)
			}
		}
	}
	if class != ClassRow && class != ClassUnknown {
		return class, err
	}
	return class, nil
}

// deadLetterOp makes op o, which Postgres rejected alone with err, a
// dead letter.
func (s *Sink) deadLetterOp(ctx context.Context, tx pgx.Tx, o op, class Class, err error, res *result) {
	s.log.Debug("dead-lettering row postgres rejected", "topic", o.rec.Topic, "partition", o.rec.Partition, "offset", o.rec.Offset,
		"class", class.String(), "err", err)
	if class == ClassUnknown {
		if res.unclassified++; res.first == nil {
			res.first = err
		}
	}
	res.dead = append(res.dead, s.newDeadLetter(o.rec, &dlq.RecordError{Reason: deadletter.ReasonPostgres, Err: s.nameField(ctx, tx, o, newRowError(err))}))
}

// bisect loads each half of ops on its own, after their load together
// failed with err; an error of no known class that none of them fails
// with alone follows no record.
func (s *Sink) bisect(ctx context.Context, tx pgx.Tx, ops []op, class Class, err error, res *result) error {
	before := res.unclassified
	h := len(ops) / 2
	if err := s.load(ctx, tx, ops[:h], res); err != nil {
		return err
	}
	if err := s.load(ctx, tx, ops[h:], res); err != nil {
		return err
	}
	if class == ClassUnknown && res.unclassified == before {
		return fmt.Errorf("%d records fail together and none alone: the error follows no record: %w", len(ops), err)
	}
	return nil
}

// followsRecords decides whether the ops the load dead-lettered for an
// error of no known class (res.unclassified of them, failed of the load's
// n ops dead-lettered in all) were that error's cause: only if some op
// of the load was written, so that the error follows single records and
// not the database. When every op failed alone (a batch of one record
// included: one record cannot tell its fault from the database's), it
// returns the first such error, and writeBatch's bounded retry, then a
// loud stop, applies as to any unclassified error.
func (s *Sink) followsRecords(n int, res *result, failed int) error {
	if res.unclassified == 0 {
		return nil
	}
	if failed >= n {
		return fmt.Errorf("every record of the batch (%d) fails alone: the error follows no record: %w", n, res.first)
	}
	s.log.Warn("postgres rejected rows with an unclassified SQLSTATE that follows them (the rest of the batch was written); dead-lettering them",
		"topic", s.cfg.Input, "rows", res.unclassified, "of", n, "sqlstate", sqlState(res.first), "err", res.first)
	return nil
}

// apply runs ops in order: each run of inserts as one COPY and INSERT ...
// SELECT, each run of deletes as one DELETE.
func (s *Sink) apply(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	for i := 0; i < len(ops); {
		j := i + 1
		for j < len(ops) && ops[j].del == ops[i].del {
			j++
		}
		var err error
		if ops[i].del {
			err = s.deleteRun(ctx, tx, ops[i:j], res)
		} else {
			err = s.insertRun(ctx, tx, ops[i:j], res)
		}
		if err != nil {
			return err
		}
		i = j
	}
	return nil
}

// insertRun stages ops' rows with their ordinals and inserts them; the
// INSERT keeps one row per key as Postgres compares keys (see
// buildLoadSQL).
func (s *Sink) insertRun(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	if kept := keptIndexes(ops); kept != nil {
		return s.insertKeepRun(ctx, tx, ops, kept, res) // unavailable.go
	}
	rows := make([][]any, len(ops))
	for i, o := range ops {
		rows[i] = append(o.row[:len(o.row):len(o.row)], int32(i))
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", s.sql.stagingName}, s.stagingColumns(), pgx.CopyFromRows(rows))
	if err != nil {
		return err
	}
	affected, err := s.insertStaged(ctx, tx, s.sql.truncate) // upsert.go
	if err != nil {
		return err
	}
	res.rows += affected
	res.duplicates += int64(len(ops)) - affected
	return nil
}

func (s *Sink) deleteRun(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	ids := make([]string, len(ops))
	for i, o := range ops {
		ids[i] = o.id
	}
	tag, err := tx.Exec(ctx, s.sql.delete, ids)
	if err != nil {
		return err
	}
	res.deleted += tag.RowsAffected()
	// One statement for the run: a key deleted twice in it matches at
	// most once, as the second of two deletes in turn would match nothing.
	res.unmatched += int64(len(ops)) - tag.RowsAffected()
	return nil
}

// versionTarget is the target table's alias in a version-guarded upsert.
const versionTarget = "stored"

// ordColumn is the staging column holding an op's place in its run.
const ordColumn = "ord"

// stagingColumns returns the staging table's columns in COPY order: c0,
// c1, ... then ordColumn.
func (s *Sink) stagingColumns() []string {
	cols := make([]string, 0, len(s.cfg.Columns)+1)
	for i := range s.cfg.Columns {
		cols = append(cols, fmt.Sprintf("c%d", i))
	}
	return append(cols, ordColumn)
}

// stagingCopySQL is the COPY of loadStreamStaged: the staging table's
// columns, in binary format (copyformat.go).
func (s *Sink) stagingCopySQL() string {
	return fmt.Sprintf("COPY pg_temp.%s (%s) FROM STDIN%s", s.sql.stagingName, strings.Join(s.stagingColumns(), ", "), s.sql.stagingFormat.option())
}

// buildLoadSQL prepares the statements of the load: the staging table,
// the INSERT, the staging TRUNCATE and the DELETE of tombstones.
//
// Each column's value is cast by castExpr (exact.go): a value the column
// cannot hold exactly raises a row error rather than being rounded, cut
// or moved to another time zone.
//
// The INSERT keeps one row per event ID, compared in the column's type as
// the unique index compares it (two UUIDs that differ in case, or 1.0 and
// 1 in numeric, are one key): the first of the run in insert mode, where
// a later one would be skipped anyway, and the last in upsert mode, so
// that the last record wins and ON CONFLICT DO UPDATE never meets a key
// twice in one statement (SQLSTATE 21000). A key that still collides (a
// column collation or type modifier that merges more than the type does)
// is split apart by load's bisection.
//
// With a version column (upsert mode), the run keeps per key the record
// of the greatest version, the first read of equal ones, and DO UPDATE
// applies only WHERE the stored version is lower (or NULL): an older
// record read later, from another partition or a replay, changes nothing.
// castRows is the CTE of the load's cast rows.
const castRows = "exactly_cast_rows"

func (s *Sink) buildLoadSQL() {
	var staging, target, casts, values, updates []string
	// The staging table's columns are text or jsonb: its COPY is binary.
	s.sql.stagingFormat = copyFormat{binary: true, jsonb: make([]bool, len(s.cfg.Columns)), ord: true}
	for i, c := range s.cfg.Columns {
		sc := fmt.Sprintf("c%d", i)
		col := pgx.Identifier{c.Name}.Sanitize()
		st := stagedType(sc, c.Name, s.types[i])
		s.sql.stagingFormat.jsonb[i] = st == "jsonb"
		staging = append(staging, sc+" "+st)
		target = append(target, col)
		casts = append(casts, fmt.Sprintf("%s AS v%d", castExpr(sc, c.Name, s.types[i]), i))
		values = append(values, fmt.Sprintf("v%d", i))
		if c.Name != s.cfg.EventID {
			updates = append(updates, col+" = EXCLUDED."+col)
		}
	}
	staging = append(staging, ordColumn+" integer", keepColumn+" integer[]")
	s.sql.stagingName = stagingName(staging)
	s.typed.keepSQLMu.Lock()
	s.typed.keepSQL = nil
	s.typed.keepSQLMu.Unlock()
	eid := pgx.Identifier{s.cfg.EventID}.Sanitize()
	// One row per event ID, compared in the column's type. Every row's
	// values are cast first, in a materialized CTE (Postgres would
	// otherwise evaluate the casts' volatile refusal only for the rows
	// DISTINCT ON keeps): a value the column cannot hold exactly (castExpr)
	// is refused in a row that an equal event ID earlier in the batch
	// would drop, as it is when the equal ID is stored, so that a record's
	// outcome does not depend on what came before it.
	key := fmt.Sprintf("v%d", s.eventIDIndex)
	s.sql.staging = fmt.Sprintf("CREATE TEMPORARY TABLE IF NOT EXISTS %s (%s) ON COMMIT DELETE ROWS",
		s.sql.stagingName, strings.Join(staging, ", "))
	conflict, keep, into := "DO NOTHING", ordColumn+" ASC", s.table.String()
	if s.cfg.Mode == topology.ModeUpsert {
		keep = ordColumn + " DESC"
		if len(updates) > 0 {
			conflict = "DO UPDATE SET " + strings.Join(updates, ", ")
		}
		if s.versionIndex >= 0 {
			// The greatest version of the run wins, the first read of
			// equal ones; a stored row is replaced only by a greater
			// version (or if it has none).
			vc := pgx.Identifier{s.cfg.Version}.Sanitize()
			keep = fmt.Sprintf("v%d DESC, %s ASC", s.versionIndex, ordColumn)
			into += " AS " + versionTarget
			conflict += fmt.Sprintf(" WHERE %s.%s < EXCLUDED.%s OR %s.%s IS NULL", versionTarget, vc, vc, versionTarget, vc)
		}
	}
	s.sql.insert = fmt.Sprintf("WITH %[1]s AS MATERIALIZED (SELECT %[2]s, %[3]s FROM pg_temp.%[4]s) INSERT INTO %[5]s (%[6]s) SELECT %[7]s FROM (SELECT DISTINCT ON (%[8]s) * FROM %[1]s ORDER BY %[8]s, %[9]s) AS staged ORDER BY %[3]s ON CONFLICT (%[10]s) %[11]s",
		castRows, strings.Join(casts, ", "), ordColumn, s.sql.stagingName, into, strings.Join(target, ", "), strings.Join(values, ", "),
		key, keep, eid, conflict)
	s.sql.fast = s.buildFastUpsertSQL() // upsert.go
	s.sql.truncate = "TRUNCATE pg_temp." + s.sql.stagingName
	// A delete's event ID (a tombstone's key, a change event's before) is
	// read as an inserted one is, by castExpr: a key the column cannot
	// hold exactly raises the row error, so the load's bisection
	// dead-letters that record, rather than being cast to another value
	// (1.005 to 1.01 in numeric(10,2), an offset dropped in timestamp)
	// whose row it would delete.
	// The column type's own = (eqOp): the one its primary key compares
	// with, whatever the search_path.
	s.sql.delete = fmt.Sprintf("DELETE FROM %s WHERE %s %s ANY(ARRAY(SELECT %s FROM unnest($1::text[]) AS u(x)))",
		s.table, eid, eqOp(s.types[s.eventIDIndex]), castExpr("x", s.cfg.EventID, s.types[s.eventIDIndex]))
}

// ranges returns the offsets of b per partition, as "p0 [10, 14), ...",
// for an error that names the batch.
func (b *batch) ranges() string {
	parts := make([]string, 0, len(b.order))
	for _, p := range b.order {
		from, ok := b.from(p)
		if !ok {
			from = b.next[p] - 1
		}
		parts = append(parts, fmt.Sprintf("p%d [%d, %d)", p, from, b.next[p]))
	}
	return strings.Join(parts, ", ")
}
