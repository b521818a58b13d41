package pgsink

import (
	"context"
	"fmt"
	"time"

	"github.com/exactly-io/exactly/processor/kit"
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

// ReadPositions connects to the sink's database and returns the positions
// stored for its input topic, ordered by partition; none if the positions
// table does not exist yet. It is read-only. Errors never show the DSN.
func ReadPositions(ctx context.Context, cfg Config) ([]StoredPosition, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, err)
	}
	pgcfg, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		// The parse error would quote the DSN.
		return nil, fmt.Errorf("sink %q: %w", cfg.Sink, kit.NewConfigError("postgres dsn is not a valid connection string"))
	}
	conn, err := pgx.ConnectConfig(ctx, pgcfg)
	if err != nil {
		return nil, fmt.Errorf("sink %q: connect to postgres: %w", cfg.Sink, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tbl, _ := parseTable(cfg.PositionsTable)
	var out []StoredPosition
	rows, err := conn.Query(ctx, `SELECT partition, next_offset, owner, updated_at FROM `+tbl.String()+` WHERE topic = $1 ORDER BY partition`, cfg.Input)
	if err == nil {
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredPosition, error) {
			var p StoredPosition
			err := r.Scan(&p.Partition, &p.NextOffset, &p.Owner, &p.UpdatedAt)
			return p, err
		})
	}
	if sqlState(err) == "42P01" { // undefined_table: the sink never ran
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sink %q: read positions: %w", cfg.Sink, err)
	}
	return out, nil
}
