package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/kit"
	"github.com/exactly-io/exactly/topology"
)

// result counts what one attempt at a batch did.
type result struct {
	rows, deleted, duplicates int64
	dead                      []*kgo.Record
}

// write runs one attempt at batch b in one database transaction (see the
// package documentation for its steps).
func (s *Sink) write(ctx context.Context, b *batch) error {
	ops, dead, err := s.prepare(b)
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	if err := s.guard(ctx, tx, b); err != nil {
		return err
	}
	res := &result{dead: dead}
	if err := s.load(ctx, tx, ops, res); err != nil {
		return err
	}
	if len(res.dead) > 0 {
		// Durable in Kafka before the position skipping the records
		// commits in Postgres: at least once, never lost.
		if err := s.cl.ProduceSync(ctx, res.dead...).FirstErr(); err != nil {
			return fmt.Errorf("produce dead letters: %w", err)
		}
	}
	s.commits++
	if s.fp.Armed(kit.CrashBeforeDBCommit, s.commits) {
		return s.fp.Fire(s.log, kit.CrashBeforeDBCommit, s.commits)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	s.committed.Add(1)
	s.metrics.commit(b, res, s.cfg.Input, time.Now())
	s.rows.Add(res.rows)
	s.deleted.Add(res.deleted)
	s.duplicates.Add(res.duplicates)
	s.deadLettered.Add(int64(len(res.dead)))
	s.markStored(b)
	s.log.Debug("batch committed", "records", b.records, "rows", res.rows, "duplicates", res.duplicates, "dead_letters", len(res.dead))
	if s.fp.Armed(kit.CrashAfterDBCommit, s.commits) {
		return s.fp.Fire(s.log, kit.CrashAfterDBCommit, s.commits)
	}
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

// load applies ops under a savepoint. When Postgres rejects the data of a
// row, it rolls back to the savepoint and loads each half on its own, down
// to single ops, which become dead letters.
func (s *Sink) load(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	if len(ops) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, "SAVEPOINT "+savepoint); err != nil {
		return err
	}
	var r result
	err := s.apply(ctx, tx, ops, &r)
	if err == nil {
		res.rows += r.rows
		res.deleted += r.deleted
		res.duplicates += r.duplicates
		_, err = tx.Exec(ctx, "RELEASE SAVEPOINT "+savepoint)
		return err
	}
	if !IsDataError(err) {
		return err
	}
	if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint); rerr != nil {
		return rerr
	}
	if len(ops) == 1 {
		o := ops[0]
		s.log.Debug("dead-lettering row postgres rejected", "topic", o.rec.Topic, "partition", o.rec.Partition, "offset", o.rec.Offset, "err", err)
		res.dead = append(res.dead, s.deadLetterOf(o.rec, &kit.RecordError{Reason: ReasonPostgres, Err: err}))
	} else {
		h := len(ops) / 2
		if err := s.load(ctx, tx, ops[:h], res); err != nil {
			return err
		}
		if err := s.load(ctx, tx, ops[h:], res); err != nil {
			return err
		}
	}
	_, err = tx.Exec(ctx, "RELEASE SAVEPOINT "+savepoint)
	return err
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

func (s *Sink) insertRun(ctx context.Context, tx pgx.Tx, ops []op, res *result) error {
	rows := dedupe(ops, s.cfg.Mode == topology.ModeUpsert)
	cols := make([]string, len(s.cfg.Columns))
	for i := range cols {
		cols[i] = fmt.Sprintf("c%d", i)
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"pg_temp", stagingTable}, cols, pgx.CopyFromRows(rows))
	if err != nil {
		return err
	}
	var pb pgx.Batch
	pb.Queue(s.sql.insert)
	pb.Queue(s.sql.truncate)
	br := tx.SendBatch(ctx, &pb)
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	res.rows += tag.RowsAffected()
	res.duplicates += int64(len(ops)) - tag.RowsAffected()
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
	return nil
}

// dedupe returns the rows of ops with one row per event ID: the first (an
// insert would skip the later ones anyway) or, for upserts, the last (one
// INSERT ... ON CONFLICT DO UPDATE must not touch a row twice).
func dedupe(ops []op, keepLast bool) [][]any {
	seen := make(map[string]int, len(ops))
	rows := make([][]any, 0, len(ops))
	for _, o := range ops {
		if i, dup := seen[o.id]; dup {
			if keepLast {
				rows[i] = o.row
			}
			continue
		}
		seen[o.id] = len(rows)
		rows = append(rows, o.row)
	}
	return rows
}
