package pgsink

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/exactly-io/exactly/topology"
)

// The upsert's fast statement. The staged load's INSERT (buildLoadSQL)
// keeps one row per key with DISTINCT ON over a materialized CTE of the
// cast rows: two sorts of the batch's whole rows, which spill to disk at
// the default work_mem for a batch of 1 KiB rows, and most of an upsert
// batch's time in PostgreSQL. Most batches hold no key twice, and then
// DISTINCT ON keeps every row and the CTE casts no row that the INSERT
// would not: the INSERT of every staged row, in record order, stores the
// same rows and affects the same count.
//
// A batch that does hold a key twice fails the fast statement with
// SQLSTATE 21000: ON CONFLICT DO UPDATE refuses to affect a row a second
// time in one statement, whether the first row inserted it or updated it,
// and it checks that before the update's WHERE. The fast statement runs
// under its own savepoint; on 21000 it is rolled back and the batch's
// staged rows take the full INSERT, whose outcome is the staged load's.
//
// With a version column it is the same write: at most one row per key
// passes the version guard, or the statement fails (21000). If none of a
// key's rows is greater than the stored version, none is written, as the
// greatest one would not be; if exactly one is, it is the greatest, which
// DISTINCT ON keeps. A record without a version never reaches the
// staging table (dead letter reason version), so NULL sorts nowhere.
//
// Only DO UPDATE refuses a key twice: with no column to update (the event
// ID alone) the conflict is DO NOTHING, which would keep the first of two
// rows where the staged load keeps the last, so that table takes the
// full INSERT only.
//
// What a rolled-back fast statement leaves is what a rolled-back direct
// COPY leaves (direct.go): drawn sequence values, and a trigger's effects
// outside the database.

// After a batch with a key twice, the fast statement rests for 1, 2, 4,
// ... up to maxDirectRest batches, as the direct path does, so that a
// stream whose batches mostly repeat keys pays for a failed fast
// statement on one batch in maxDirectRest at most.

// fastRest is the fast statement's rest, in batches.
type fastRest struct {
	off  bool // FastUpsert(false)
	rest int  // batches still to skip it
	next int  // the rest after the next fallback
}

// FastUpsert turns the fast upsert statement on, the default, or off,
// for every upsert batch to take the full INSERT: to compare the two.
func FastUpsert(on bool) Option { return func(s *Sink) { s.upsertRest.off = !on } }

// skip reports whether this batch skips the fast statement.
func (f *fastRest) skip() bool {
	if f.off {
		return true
	}
	if f.rest > 0 {
		f.rest--
		return true
	}
	return false
}

// done records an attempt: a key twice doubles the rest, up to
// maxDirectRest; a success ends it.
func (f *fastRest) done(ok bool) {
	if ok {
		f.next = 0
		return
	}
	f.next = min(max(1, 2*f.next), maxDirectRest)
	f.rest = f.next
}

// fastSavepoint is the savepoint of the fast upsert statement.
const fastSavepoint = "exactly_upsert"

// upsertWorkMem is the work_mem of an upsert batch's transaction, unless
// the session's is larger: the statements sort a batch's rows by their
// ordinal (and, in the full INSERT, by key), about a batch's bytes, in
// memory rather than in temporary files.
const upsertWorkMem = "64MB"

// upsertWorkMemSQL raises work_mem for the transaction to upsertWorkMem,
// unless the session's is larger.
const upsertWorkMemSQL = `SELECT set_config('work_mem', CASE WHEN pg_size_bytes(current_setting('work_mem')) < pg_size_bytes('` +
	upsertWorkMem + `') THEN '` + upsertWorkMem + `' ELSE current_setting('work_mem') END, true)`

// cardinalityViolation is ON CONFLICT DO UPDATE meeting one key twice.
const cardinalityViolation = "21000"

// buildFastUpsertSQL prepares the fast statement, or none when the sink
// is not in upsert mode or has no column to update.
func (s *Sink) buildFastUpsertSQL() string {
	if s.cfg.Mode != topology.ModeUpsert {
		return ""
	}
	var target, casts, updates []string
	for i, c := range s.cfg.Columns {
		col := pgx.Identifier{c.Name}.Sanitize()
		target = append(target, col)
		casts = append(casts, castExpr(fmt.Sprintf("c%d", i), c.Name, s.types[i]))
		if c.Name != s.cfg.EventID {
			updates = append(updates, col+" = EXCLUDED."+col)
		}
	}
	if len(updates) == 0 {
		return ""
	}
	into, conflict := s.table.String(), "DO UPDATE SET "+strings.Join(updates, ", ")
	if s.versionIndex >= 0 {
		vc := pgx.Identifier{s.cfg.Version}.Sanitize()
		into += " AS " + versionTarget
		conflict += fmt.Sprintf(" WHERE %s.%s < EXCLUDED.%s OR %s.%s IS NULL", versionTarget, vc, vc, versionTarget, vc)
	}
	// The rows are inserted in the records' order, so that a sequence
	// default draws its values, and a trigger fires, in that order. When
	// nothing on the table can tell the order (orderHidden), the sort is
	// left out: it costs 10–15% of the statement. The outcome is the same
	// either way, since this statement only succeeds when no key is twice
	// in the batch (a key twice takes the full INSERT, which sorts).
	order := " ORDER BY " + ordColumn
	if s.orderHidden {
		order = ""
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM pg_temp.%s%s ON CONFLICT (%s) %s",
		into, strings.Join(target, ", "), strings.Join(casts, ", "), s.sql.stagingName, order,
		pgx.Identifier{s.cfg.EventID}.Sanitize(), conflict)
}

// upsertStaged inserts the staged rows of a streamed upsert batch, then
// checks the deferred constraints and releases the load's savepoint. It
// returns the rows the INSERT affected. The staging table keeps its rows
// until the COMMIT empties it (ON COMMIT DELETE ROWS), in place, which
// costs less than a TRUNCATE's new file: the batch stages nothing else,
// and a rollback to the savepoint empties it too.
func (s *Sink) upsertStaged(ctx context.Context, tx pgx.Tx) (int64, error) {
	return s.insertStaged(ctx, tx, checkDeferred, "RELEASE SAVEPOINT "+savepoint)
}

// insertStaged runs the INSERT of the staged rows, then the statements
// of tail, in one round trip: in upsert mode the fast statement first,
// unless it rests, and the full INSERT after a 21000. It returns the rows
// the INSERT affected.
func (s *Sink) insertStaged(ctx context.Context, tx pgx.Tx, tail ...string) (int64, error) {
	fast := s.sql.fast
	if fast == "" || s.upsertRest.skip() {
		return s.runInsert(ctx, tx, s.sql.insert, fast != "", tail)
	}
	affected, err := s.runInsert(ctx, tx, fast, true, tail)
	if err == nil {
		s.upsertRest.done(true)
		return affected, nil
	}
	if sqlState(err) != cardinalityViolation {
		return 0, err
	}
	s.upsertRest.done(false)
	// A key twice in the batch: the staged rows are still there.
	if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+fastSavepoint); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT "+fastSavepoint); err != nil {
		return 0, err
	}
	return s.runInsert(ctx, tx, s.sql.insert, false, tail)
}

// runInsert sends insert, under the fast statement's savepoint and with
// upsertWorkMem when fast, then tail, in one pipeline, and returns the
// rows insert affected.
func (s *Sink) runInsert(ctx context.Context, tx pgx.Tx, insert string, fast bool, tail []string) (int64, error) {
	var pb pgx.Batch
	if fast {
		pb.Queue(upsertWorkMemSQL)
		pb.Queue("SAVEPOINT " + fastSavepoint)
	}
	at := pb.Len()
	pb.Queue(insert)
	if fast {
		pb.Queue("RELEASE SAVEPOINT " + fastSavepoint)
	}
	for _, q := range tail {
		pb.Queue(q)
	}
	br := tx.SendBatch(ctx, &pb)
	var affected int64
	var err error
	for i := range pb.Len() {
		var tag pgconn.CommandTag
		if tag, err = br.Exec(); err != nil {
			break
		}
		if i == at {
			affected = tag.RowsAffected()
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return affected, err
}
