package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StoredPosition is one row of a sink's positions table: where the sink
// resumes in a partition, and which instance wrote it last.
type StoredPosition struct {
	Partition  int32
	NextOffset int64
	Owner      string
	UpdatedAt  time.Time
}

// querier is what reading positions needs: a *pgx.Conn or a *pgxpool.Pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryPositions is the one reader of a positions table: the rows of tbl
// for topic, ordered by partition, only those of parts when parts is not
// nil. A missing table is an error here (IsUndefinedTable): the sink
// creates it before it reads.
func queryPositions(ctx context.Context, q querier, tbl table, topic string, parts []int32) ([]StoredPosition, error) {
	sql := `SELECT partition, next_offset, owner, updated_at FROM ` + tbl.String() + ` WHERE topic = $1`
	args := []any{topic}
	if parts != nil {
		sql += ` AND partition = ANY($2)`
		args = append(args, parts)
	}
	rows, err := q.Query(ctx, sql+` ORDER BY partition`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredPosition, error) {
		var p StoredPosition
		err := r.Scan(&p.Partition, &p.NextOffset, &p.Owner, &p.UpdatedAt)
		return p, err
	})
}

// ReadPositions connects to the sink's database and returns the positions
// stored for its input topic, ordered by partition; none if the positions
// table does not exist yet (the sink never ran). It is read-only. Errors
// never show the DSN.
func ReadPositions(ctx context.Context, cfg Config) ([]StoredPosition, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	pgcfg, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		// The parse error would quote the DSN.
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, errBadDSN)
	}
	conn, err := pgx.ConnectConfig(ctx, pgcfg)
	if err != nil {
		return nil, fmt.Errorf("sink %q: connect to postgres: %w", cfg.Sink, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tbl, _ := parseTable(cfg.PositionsTable)
	out, err := queryPositions(ctx, conn, tbl, cfg.Input, nil)
	if IsUndefinedTable(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sink %q: read positions: %w", cfg.Sink, err)
	}
	return out, nil
}

// ResetOwner is the owner recorded on positions that ResetPositions wrote.
const ResetOwner = "exactly reset"

// ResetPositions connects to the sink's database and sets the stored
// positions of the partitions in positions (Partition and NextOffset are
// read; Owner becomes ResetOwner) for the sink's input topic, in one
// transaction: all or none. Unlike the sink's guarded upsert it moves a
// position in either direction, so it must run only while no instance of
// the sink is running (the caller checks the consumer group). A missing
// positions table is ErrNoPositionsTable: the sink creates it when it
// first starts. Errors never show the DSN.
func ResetPositions(ctx context.Context, cfg Config, positions []StoredPosition) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	pgcfg, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return fmt.Errorf("sink %q: %w", cfg.Sink, errBadDSN)
	}
	conn, err := pgx.ConnectConfig(ctx, pgcfg)
	if err != nil {
		return fmt.Errorf("sink %q: connect to postgres: %w", cfg.Sink, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tbl, _ := parseTable(cfg.PositionsTable)
	sql := `INSERT INTO ` + tbl.String() + ` AS p (topic, partition, next_offset, owner, updated_at)
VALUES ($1, $2, $3, $4, now())
ON CONFLICT (topic, partition) DO UPDATE
SET next_offset = EXCLUDED.next_offset, owner = EXCLUDED.owner, updated_at = EXCLUDED.updated_at`
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, p := range positions {
			if _, err := tx.Exec(ctx, sql, cfg.Input, p.Partition, p.NextOffset, ResetOwner); err != nil {
				return err
			}
		}
		return nil
	})
	if IsUndefinedTable(err) {
		return fmt.Errorf("sink %q: %w (%s)", cfg.Sink, ErrNoPositionsTable, tbl)
	}
	if err != nil {
		return fmt.Errorf("sink %q: reset positions: %w", cfg.Sink, err)
	}
	return nil
}
