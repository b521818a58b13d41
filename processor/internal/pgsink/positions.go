package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// StoredPosition is one row of a sink's positions table: where the sink
// resumes in a partition, the incarnation of the topic that offset belongs
// to, and which instance wrote it last.
type StoredPosition struct {
	Partition  int32
	NextOffset int64
	// TopicID is the Kafka topic ID (KIP-516, base64 as kadm prints it)
	// of the topic the offset was read from; "" for a row written before
	// topic IDs were stored.
	TopicID   string
	Owner     string // instance ID of the writer
	UpdatedAt time.Time
}

// querier is what reading positions needs: a *pgx.Conn, a pgx.Tx or a
// *pgxpool.Pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryPositions is the one reader of a positions table: the rows of tbl
// that sink stored for topic, ordered by partition, only those of parts
// when parts is not nil. A position is keyed by (sink, topic, partition):
// two sinks reading one topic into one positions table never share one.
// A missing table is an error here (IsUndefinedTable), and so is a table
// in the format of before the sink column (IsUndefinedColumn): the sink
// creates and migrates it before it reads.
func queryPositions(ctx context.Context, q querier, tbl table, sink, topic string, parts []int32) ([]StoredPosition, error) {
	sql := `SELECT partition, next_offset, topic_id, owner, updated_at FROM ` + tbl.String() + ` WHERE sink = $1 AND topic = $2`
	args := []any{sink, topic}
	if parts != nil {
		sql += ` AND partition = ANY($3)`
		args = append(args, parts)
	}
	return collectPositions(q.Query(ctx, sql+` ORDER BY partition`, args...))
}

// queryLegacyPositions reads a positions table that no sink of this
// version has migrated yet (no sink column): the rows of topic, which
// the sink claims when it starts if they are unambiguously its own (see
// Sink).
func queryLegacyPositions(ctx context.Context, q querier, tbl table, topic string) ([]StoredPosition, error) {
	return collectPositions(q.Query(ctx, `SELECT partition, next_offset, '', owner, updated_at FROM `+tbl.String()+
		` WHERE topic = $1 ORDER BY partition`, topic))
}

func collectPositions(rows pgx.Rows, err error) ([]StoredPosition, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredPosition, error) {
		var p StoredPosition
		err := r.Scan(&p.Partition, &p.NextOffset, &p.TopicID, &p.Owner, &p.UpdatedAt)
		return p, err
	})
}

// ReadPositions connects to the sink's database and returns the positions
// the sink stored for its input topic, ordered by partition; none if the
// positions table does not exist yet (the sink never ran). A table that
// no sink of this version has migrated yet is read in its old format. It
// is read-only. Errors never show the DSN.
func ReadPositions(ctx context.Context, cfg Config) ([]StoredPosition, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	conn, err := Connect(ctx, cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tbl, _ := parseTable(cfg.PositionsTable)
	out, err := queryPositions(ctx, conn, tbl, cfg.Sink, cfg.Input, nil)
	if IsUndefinedColumn(err) {
		out, err = queryLegacyPositions(ctx, conn, tbl, cfg.Input)
	}
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
// positions of the partitions in positions (Partition, NextOffset and
// TopicID, the base64 topic ID as kadm prints it, are read; Owner becomes
// ResetOwner) for the sink's input topic, in one transaction: all or
// none. Unlike the sink's guarded upsert it moves a position in either
// direction, so it must run only while no instance of the sink is running
// (the caller checks the consumer group). A missing positions table is
// ErrNoPositionsTable: the sink creates it when it first starts. Errors
// never show the DSN.
func ResetPositions(ctx context.Context, cfg Config, positions []StoredPosition) error {
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	conn, err := Connect(ctx, cfg.DSN)
	if err != nil {
		return fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tbl, _ := parseTable(cfg.PositionsTable)
	sql := `INSERT INTO ` + tbl.String() + ` AS p (sink, topic, partition, next_offset, topic_id, target, owner, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
ON CONFLICT (sink, topic, partition) DO UPDATE
SET next_offset = EXCLUDED.next_offset, topic_id = EXCLUDED.topic_id, target = EXCLUDED.target, owner = EXCLUDED.owner, updated_at = EXCLUDED.updated_at`
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, p := range positions {
			if _, err := tx.Exec(ctx, sql, cfg.Sink, cfg.Input, p.Partition, p.NextOffset, p.TopicID, cfg.Table, ResetOwner); err != nil {
				return err
			}
		}
		return nil
	})
	if IsUndefinedTable(err) {
		return fmt.Errorf("sink %q: %w (%s)", cfg.Sink, ErrNoPositionsTable, tbl)
	}
	if IsUndefinedColumn(err) {
		return fmt.Errorf("sink %q: positions table %s is in the format of an older version: start the sink once to migrate it: %w", cfg.Sink, tbl, err)
	}
	if err != nil {
		return fmt.Errorf("sink %q: reset positions: %w", cfg.Sink, err)
	}
	return nil
}
