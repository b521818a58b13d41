package pgsink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
)

// The direct path writes a batch once: a batch of inserts only is COPYed
// straight into the target table, under a savepoint. Most insert-mode
// batches, and most upsert-mode batches of new keys (a snapshot, a table
// that rows are mostly added to), have no event ID already stored, none
// twice and no bad row, and the COPY then does what the staged load (COPY
// into the staging table, INSERT ... SELECT ... ON CONFLICT DO NOTHING or
// DO UPDATE) would do, at about two thirds of the cost. When anything
// fails (23505 on the event ID: a duplicate in the table or in the batch;
// a bad value; a constraint; a trigger) the savepoint is rolled back and
// the batch takes the staged load, whose outcome (rows, duplicates, dead
// letters and their reasons) is then exactly today's. The direct path
// never decides a record's fate; it only writes batches that the staged
// load would write whole.
//
// It is the same write only where COPY reads a value as the cast of the
// staged load does, and stores the rows INSERT would:
//   - every mapped column is of a directType: castExpr is a plain cast
//     (text::T, an I/O conversion that calls T's input function with no
//     type modifier), and COPY calls the same input function, with the
//     column's modifier, which these columns have none of. Types with a
//     check in castExpr (numeric(p,s), floats, times, varchar(n), ...) or
//     a domain keep the staged load;
//   - the values go as their text (copyText), so the server parses them,
//     as the cast does; pgx's binary COPY would encode them in Go. Where
//     every column is of a binaryTextType, they go in COPY's binary
//     format, whose receive functions read text as the input functions
//     do (copyformat.go);
//   - a unique index on exactly the event ID (the one checkCatalog
//     requires) must exist when the COPY has ended, and the table must
//     have no rule: COPY ignores rules, where INSERT applies them. The
//     check runs after the COPY, in its transaction, which then holds a
//     ROW EXCLUSIVE lock on the table: dropping the index or creating a
//     rule needs a lock that conflicts with it, so neither can change
//     before the commit. DROP INDEX CONCURRENTLY first marks the index
//     invalid, which the check sees, and waits for this transaction
//     before the index stops taking inserts;
//   - no mapped column is GENERATED ALWAYS AS IDENTITY, which COPY
//     writes and INSERT refuses (428C9);
//   - no CHECK constraint calls a function that is not immutable: COPY
//     buffers rows and checks each before the ones ahead of it are in the
//     table, INSERT ... SELECT after, so a check that reads the table
//     tells them apart. COPY inserts row by row where the table has
//     BEFORE row triggers or volatile defaults (PostgreSQL's copyfrom.c),
//     so those read what INSERT's would;
//   - in upsert mode, the table has no statement-level UPDATE trigger,
//     which ON CONFLICT DO UPDATE fires even when no row conflicts, and
//     COPY does not (row-level UPDATE triggers fire only on a conflict,
//     which fails the COPY); and the role holds UPDATE on the columns
//     the upsert sets, which COPY does not need;
//   - these are checked after the COPY as the index is: changing them
//     takes a lock that conflicts with ROW EXCLUSIVE, or, a REVOKE after
//     the check, came after the write as it would after an INSERT;
//   - row triggers (BEFORE and AFTER INSERT), statement triggers on
//     INSERT, transition tables, check and foreign key constraints,
//     defaults and identity columns act on COPY as on INSERT (PostgreSQL
//     docs, COPY: "COPY FROM will invoke any triggers and check
//     constraints on the destination table"). A row a BEFORE trigger
//     skips is not counted as written, as INSERT does not count it.
//
// What a rolled-back direct attempt leaves: sequence values it drew (a
// serial column's default) stay drawn, as those of a duplicate's INSERT
// ... ON CONFLICT do, and a trigger's effects outside the database (none
// in the database survive the rollback) happen twice.
//
// After a fallback, the direct path rests for 1, 2, 4, ... up to
// maxDirectRest batches, so that a stream full of duplicates (a replay)
// pays for a failed COPY on one batch in maxDirectRest at most.

// directSavepoint is the savepoint of a direct attempt.
const directSavepoint = "exactly_direct"

// maxDirectRest is the longest run of batches that skip the direct path
// after it fell back.
const maxDirectRest = 64

// errDirectUnsafe is the reason a COPY that succeeded is rolled back: the
// table is not one where COPY writes what INSERT would (buildDirectSQL).
var errDirectUnsafe = errors.New("the table lost its unique index on the event id, or has a rule, an identity column always generated, a check calling a function that is not immutable, or (upsert) a statement-level update trigger or no update privilege")

// Outcomes of a direct attempt, the outcome label of
// exactly_sink_direct_copies_total.
const (
	directWritten  = "written"
	directFellBack = "fell_back"
)

// directType reports whether COPY reads a value of a column of type t as
// the staged load's cast does: castExpr is a plain cast for it, and the
// type has no modifier and is no domain.
func directType(t colType) bool {
	if t.domain || t.mod >= 0 {
		return false
	}
	switch t.base {
	case "text", "character varying", "json", "jsonb", "bytea", "boolean",
		"smallint", "integer", "bigint", "numeric", "uuid":
		return true
	}
	return false
}

// directEligible reports whether the sink may try the direct path at all,
// and if not, why. In upsert mode too: a COPY that succeeds met no stored
// key and no key twice (the unique index refuses both, 23505), so every
// row is new, and INSERT ... ON CONFLICT would have inserted each of them
// as COPY does, whatever its DO UPDATE and version guard say. The one
// difference left is that ON CONFLICT DO UPDATE fires the table's
// statement-level UPDATE triggers, which COPY does not: the after-COPY
// check refuses a table that has one (buildDirectSQL).
func directEligible(cfg Config, types []colType) (bool, string) {
	for i, t := range types {
		if !directType(t) {
			return false, fmt.Sprintf("column %q is of type %s, which the load checks beyond its input function", cfg.Columns[i].Name, t.name)
		}
	}
	return true, ""
}

// directPath is the sink's choice, batch by batch, of the direct path.
// Only the write loop uses it.
type directPath struct {
	on   bool // the sink may take it (directEligible, DirectCopy)
	rest int  // batches still to skip it
	next int  // the rest after the next fallback
}

// try reports whether to try the direct path for ops: the sink may take
// it, ops are all inserts, and it is not resting.
func (d *directPath) try(ops []op) bool {
	if !d.on || len(ops) == 0 {
		return false
	}
	for _, o := range ops {
		if o.del || o.keep != nil {
			return false
		}
	}
	if d.rest > 0 {
		d.rest--
		return false
	}
	return true
}

// skipped counts down the rest for a batch that skips the direct path
// without asking try: a streamed upsert batch, which streamable sends to
// the staging table while the direct path rests.
func (d *directPath) skipped() {
	if d.on && d.rest > 0 {
		d.rest--
	}
}

// done records the outcome of an attempt: a fallback doubles the rest,
// up to maxDirectRest; a success ends it.
func (d *directPath) done(ok bool) {
	if ok {
		d.next = 0
		return
	}
	d.next = min(max(1, 2*d.next), maxDirectRest)
	d.rest = d.next
}

// buildDirectSQL prepares the statements of the direct path.
func (s *Sink) buildDirectSQL() {
	cols := make([]string, len(s.cfg.Columns))
	for i, c := range s.cfg.Columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	s.sql.directFormat = binaryFormat(s.types, false)
	s.sql.direct = fmt.Sprintf("COPY %s (%s) FROM STDIN%s", s.table, strings.Join(cols, ", "), s.sql.directFormat.option())
	// The index as checkCatalog requires it, and taking inserts; no
	// rule; no mapped column GENERATED ALWAYS AS IDENTITY ($3, the mapped
	// columns: COPY writes such a column, INSERT refuses it, 428C9); no
	// CHECK constraint, on the table or a partition, calling a function
	// that is not immutable, which could read the table: COPY checks a
	// row before the rows buffered ahead of it are in the table, INSERT
	// after (pg_depend records a constraint's functions, other than
	// built-in ones). In upsert mode, also no statement-level UPDATE
	// trigger that is not disabled (pg_trigger.tgtype: bit 0 row, bit 4
	// update), and the UPDATE privilege on every column the upsert sets
	// ($4), which INSERT ... ON CONFLICT DO UPDATE needs and COPY does
	// not.
	upsert := ""
	if s.cfg.Mode == topology.ModeUpsert {
		upsert = `
	AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND t.tgtype & 1 = 0 AND t.tgtype & 16 <> 0 AND t.tgenabled <> 'D')
	AND NOT EXISTS (SELECT 1 FROM unnest($4::text[]) AS u(col) WHERE NOT has_column_privilege(c.oid, u.col, 'UPDATE'))`
	}
	s.sql.directCheck = `SELECT NOT c.relhasrules AND EXISTS (SELECT 1 FROM pg_index i
	JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = $2 AND NOT a.attisdropped
	WHERE i.indrelid = c.oid AND i.indisunique AND i.indimmediate AND i.indisvalid AND i.indisready AND i.indislive
		AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum)
	AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = ANY($3::text[]) AND NOT a.attisdropped AND a.attidentity = 'a')
	AND NOT EXISTS (SELECT 1 FROM pg_constraint k
		JOIN pg_depend d ON d.classid = 'pg_constraint'::regclass AND d.objid = k.oid AND d.refclassid = 'pg_proc'::regclass
		JOIN pg_proc f ON f.oid = d.refobjid
		WHERE k.contype = 'c' AND (k.conrelid = c.oid OR k.conrelid IN (SELECT relid FROM pg_partition_tree(c.oid))) AND f.provolatile <> 'i')` + upsert + `
FROM pg_class c WHERE c.oid = $1::regclass`
}

// loadBatch loads ops: by the direct path when it may and it succeeds,
// else by load.
func (s *Sink) loadBatch(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	if s.direct.try(ops) {
		n, err := s.copyDirect(ctx, tx, ops)
		var fb *directFallback
		switch {
		case err == nil:
			s.direct.done(true)
			s.directCopies.Add(1)
			s.metrics.directCopy(directWritten)
			res.rows += n
			res.duplicates += int64(len(ops)) - n
			return nil
		case errors.As(err, &fb):
			s.direct.done(false)
			s.directFallbacks.Add(1)
			s.metrics.directCopy(directFellBack)
			s.log.Debug("direct copy rolled back; the batch takes the staged load", "rows", len(ops), "sqlstate", sqlState(fb.err), "err", fb.err)
		default:
			return err
		}
	}
	return s.load(ctx, tx, ops, res)
}

// How write loads a batch: prepare, then loadBatch (streamNone); or
// decoding its records inside a COPY, straight into the table
// (streamDirect, loadStream) or into the staging table (streamStaged,
// loadStreamStaged).
const (
	streamNone = iota
	streamDirect
	streamStaged
)

// streamable says how batch b is loaded. It streams only when no record
// of the input can become a delete (tombstones are skipped, and values
// are rows, not change events), so that every op the batch decodes to is
// an insert (or upsert); directly when the direct path would be tried
// now; else into the staging table in upsert mode. An insert-mode batch
// that the direct path skips takes prepare and the staged load, as before
// either path existed.
func (s *Sink) streamable(b *batch) int {
	switch {
	case len(b.recs) == 0 || s.cfg.Tombstones == topology.TombstonesDelete || s.cfg.Envelope == topology.EnvelopeDebezium:
		return streamNone
	case s.typed.keeps.Load():
		// A stream with placeholders (op.keep) would stop at each one
		// and decode its batch again: once met, batches are prepared.
		return streamNone
	case s.cfg.AutoColumns:
		// A record may add a column in the middle of the batch, which
		// widens the rows before it (padRows) and the table before the
		// load: known only once the whole batch is decoded.
		return streamNone
	case s.direct.on && s.direct.rest == 0:
		return streamDirect
	case s.cfg.Mode == topology.ModeUpsert:
		return streamStaged
	}
	return streamNone
}

// loadStream is prepare and loadBatch of b in one pass: the records are
// decoded inside the direct COPY's reader (copyStream), so that Go decodes
// a row while Postgres parses the ones before it, instead of the whole
// batch being decoded before the COPY starts, and a row's values are
// garbage once encoded, instead of the batch's all being held. The
// outcome is prepare's and loadBatch's: the decode dead letters, in
// record order, are appended to res.dead first; the rows are written by
// the COPY or, when it falls back, by the staged load of prepare's ops
// (the batch is decoded again). A codec's transient failure ends the
// attempt with prepare's error. It returns the number of ops and of
// decode dead letters, for followsRecords.
func (s *Sink) loadStream(ctx context.Context, tx pgx.Tx, b *batch, res *result) (int, int, error) {
	st := &copyStream{s: s, recs: b.recs, one: make([]op, 0, 1), f: s.sql.directFormat}
	n, err := s.copyDirectFrom(ctx, tx, st, st.stop)
	if st.failed != nil {
		return 0, 0, st.failed // transient: the attempt fails, as prepare's would
	}
	var fb *directFallback
	switch {
	case err == nil:
		s.direct.done(true)
		if st.ops > 0 {
			s.directCopies.Add(1)
			s.metrics.directCopy(directWritten)
		}
		res.dead = append(res.dead, st.dead...)
		res.rows += n
		res.duplicates += int64(st.ops) - n
		return st.ops, len(st.dead), nil
	case !errors.As(err, &fb):
		return 0, 0, err
	}
	s.direct.done(false)
	s.directFallbacks.Add(1)
	s.metrics.directCopy(directFellBack)
	s.log.Debug("direct copy rolled back; the batch takes the staged load", "rows", st.ops, "sqlstate", sqlState(fb.err), "err", fb.err)
	ops, dead, err := s.prepare(b)
	if err != nil {
		return 0, 0, err
	}
	res.dead = append(res.dead, dead...)
	return len(ops), len(dead), s.load(ctx, tx, ops, res)
}

// loadStreamStaged is prepare and load of b, in upsert mode, with the
// records decoded inside the COPY into the staging table (copyStream,
// with each row's ordinal), for the reasons of loadStream. It is load's
// first step, under load's savepoint: the staging COPY, the INSERT ...
// SELECT and the deferred check. When Postgres rejects the data of a row
// (ClassRow or ClassUnknown, as load splits them), it rolls back to the
// savepoint and the batch takes load with prepare's ops, whose outcome is
// then exactly load's. A codec's transient failure ends the attempt with
// prepare's error. It returns the number of ops and of decode dead
// letters, for followsRecords.
func (s *Sink) loadStreamStaged(ctx context.Context, tx pgx.Tx, b *batch, res *result) (int, int, error) {
	s.direct.skipped()
	if _, err := tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
		return 0, 0, err
	}
	st := &copyStream{s: s, recs: b.recs, one: make([]op, 0, 1), f: s.sql.stagingFormat}
	_, err := tx.Conn().PgConn().CopyFrom(ctx, st, s.stagingCopySQL())
	if serr := st.stop(); serr != nil {
		err = serr
	}
	if st.failed != nil {
		return 0, 0, st.failed // transient: the attempt fails, as prepare's would
	}
	var affected int64
	if err == nil {
		affected, err = s.upsertStaged(ctx, tx) // upsert.go
	}
	if err == nil {
		res.dead = append(res.dead, st.dead...)
		res.rows += affected
		res.duplicates += int64(st.ops) - affected
		return st.ops, len(st.dead), nil
	}
	if class := Classify(err); class != ClassRow && class != ClassUnknown && st.err == nil {
		return 0, 0, err
	}
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); rerr != nil {
		return 0, 0, fmt.Errorf("staged copy: %w (roll back to its savepoint: %w)", err, rerr)
	}
	if _, rerr := tx.Exec(ctx, "RELEASE SAVEPOINT "+savepoint); rerr != nil {
		return 0, 0, rerr
	}
	s.log.Debug("staged copy rolled back; the batch takes the load", "rows", st.ops, "sqlstate", sqlState(err), "err", err)
	ops, dead, err := s.prepare(b)
	if err != nil {
		return 0, 0, err
	}
	res.dead = append(res.dead, dead...)
	return len(ops), len(dead), s.load(ctx, tx, ops, res)
}

// errStreamDelete stops a copyStream at a delete op, which streamable
// should have ruled out: the batch then takes the staged load.
var errStreamDelete = errors.New("direct copy: a record decodes to a delete")

// errStreamKeep stops a copyStream at an op that keeps a stored value
// (op.keep), which only the staged load fills: the batch then takes it.
var errStreamKeep = errors.New("direct copy: a record keeps a stored value")

// errStreamStopped is a copyStream's Read after stop.
var errStreamStopped = errors.New("direct copy: read after the copy ended")

// copyStream decodes recs one at a time, as prepare does, and reads the
// ops' rows as COPY data of format f, keeping only the decode dead
// letters. Its Read runs in pgconn's copy goroutine, which may outlive
// CopyFrom when the connection breaks; stop, called once CopyFrom has
// returned, waits for a Read in progress and ends the stream, so that the
// caller alone owns its fields from then on.
type copyStream struct {
	s    *Sink
	recs []*kgo.Record
	f    copyFormat

	mu      sync.Mutex
	stopped bool
	begun   bool         // the format's header is read or being read
	ended   bool         // its trailer is
	next    int          // recs[next:] are not decoded yet
	ops     int          // the ops of recs[:next], all inserts, read or being read
	dead    []deadLetter // the decode dead letters of recs[:next], as prepare makes them
	failed  error        // prepare's error (transient), which ended the stream
	err     error        // what ended the stream early: failed, errStreamDelete, or appendRow's error
	one     []op         // prepareRecord's ops, one at most
	buf     []byte       // the encoded row being read
	off     int          // read up to here
}

func (c *copyStream) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return 0, errStreamStopped
	}
	if c.err != nil {
		return 0, c.err
	}
	n := 0
	for n < len(p) {
		if c.off == len(c.buf) {
			c.buf, c.off = c.buf[:0], 0
			if !c.begun {
				c.begun, c.buf = true, c.f.header(c.buf)
				continue
			}
			if c.next == len(c.recs) {
				if !c.ended {
					c.ended, c.buf = true, c.f.trailer(c.buf)
					continue
				}
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
			var ops []op
			ops, c.dead, c.failed = c.s.prepareRecord(c.recs[c.next], c.one[:0], c.dead)
			if c.failed != nil {
				c.err = c.failed
				return n, c.err
			}
			c.next++
			if len(ops) == 0 {
				continue // a dead letter, or a skipped tombstone
			}
			if ops[0].del {
				c.err = errStreamDelete
				return n, c.err
			}
			if ops[0].keep != nil {
				c.s.typed.keeps.Store(true)
				c.err = errStreamKeep
				return n, c.err
			}
			c.buf, c.err = c.f.appendRow(c.buf, ops[0].row, c.ops)
			ops[0] = op{} // the row is garbage now
			if c.err != nil {
				return n, c.err
			}
			c.ops++
		}
		m := copy(p[n:], c.buf[c.off:])
		c.off += m
		n += m
	}
	return n, nil
}

// stop ends the stream and returns what ended it early, if anything.
func (c *copyStream) stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	return c.err
}

// directFallback is a direct attempt rolled back to its savepoint, for
// err: the transaction goes on.
type directFallback struct{ err error }

func (e *directFallback) Error() string { return "direct copy rolled back: " + e.err.Error() }
func (e *directFallback) Unwrap() error { return e.err }

// copyDirect COPYs ops' rows into the target table under a savepoint,
// checks that the table still has its event ID's unique index and no
// rule, and checks the deferred constraints. It returns the rows written,
// or a *directFallback when it rolled back to its savepoint, or the error
// that left the transaction unusable (the savepoint's rollback failed: a
// lost connection, a canceled context).
func (s *Sink) copyDirect(ctx context.Context, tx pgx.Tx, ops []op) (int64, error) {
	return s.copyDirectFrom(ctx, tx, &copyText{ops: ops, f: s.sql.directFormat}, nil)
}

// copyDirectFrom is copyDirect of the COPY text that src reads. stop, when
// not nil, is called as soon as the COPY has ended; an error from it
// replaces the COPY's (the server's answer to the CopyFail that src's
// error made pgconn send).
func (s *Sink) copyDirectFrom(ctx context.Context, tx pgx.Tx, src io.Reader, stop func() error) (int64, error) {
	if _, err := tx.Exec(ctx, "SAVEPOINT "+directSavepoint); err != nil {
		return 0, err
	}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, src, s.sql.direct)
	if stop != nil {
		if serr := stop(); serr != nil {
			err = serr
		}
	}
	if err == nil {
		err = s.directChecks(ctx, tx)
	}
	if err == nil {
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT "+directSavepoint); err != nil {
			return 0, err
		}
		return tag.RowsAffected(), nil
	}
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+directSavepoint); rerr != nil {
		return 0, fmt.Errorf("direct copy: %w (roll back to its savepoint: %w)", err, rerr)
	}
	return 0, &directFallback{err: err}
}

// directChecks runs the after-COPY check of the index and rules, and
// checkDeferred, in one round trip.
func (s *Sink) directChecks(ctx context.Context, tx pgx.Tx) error {
	var pb pgx.Batch
	// $3 the mapped columns, $4 those an upsert sets (all but the event ID).
	var mapped, set []string
	for _, c := range s.cfg.Columns {
		mapped = append(mapped, c.Name)
		if c.Name != s.cfg.EventID {
			set = append(set, c.Name)
		}
	}
	args := []any{s.table.String(), s.cfg.EventID, mapped}
	if s.cfg.Mode == topology.ModeUpsert {
		args = append(args, set)
	}
	pb.Queue(s.sql.directCheck, args...)
	pb.Queue(checkDeferred)
	br := tx.SendBatch(ctx, &pb)
	var safe bool
	err := br.QueryRow().Scan(&safe)
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err == nil && !safe {
		err = errDirectUnsafe
	}
	return err
}

// copyText streams ops' rows as COPY data of format f. It encodes one
// row at a time: a batch costs no more memory than its ops.
type copyText struct {
	ops          []op
	f            copyFormat
	begun, ended bool   // the format's header, trailer, is read or being read
	n            int    // rows encoded
	buf          []byte // the encoded row being read
	off          int    // read up to here
}

func (c *copyText) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if c.off == len(c.buf) {
			c.buf, c.off = c.buf[:0], 0
			switch {
			case !c.begun:
				c.begun, c.buf = true, c.f.header(c.buf)
			case len(c.ops) > 0:
				var err error
				if c.buf, err = c.f.appendRow(c.buf, c.ops[0].row, c.n); err != nil {
					return n, err
				}
				c.ops, c.n = c.ops[1:], c.n+1
			case !c.ended:
				c.ended, c.buf = true, c.f.trailer(c.buf)
			case n == 0:
				return 0, io.EOF
			default:
				return n, nil
			}
			continue
		}
		m := copy(p[n:], c.buf[c.off:])
		c.off += m
		n += m
	}
	return n, nil
}
