package verify

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// readPositions reads the sink's stored positions; none if the sink never
// ran.
func (c *SinkCheck) readPositions(ctx context.Context, f *topology.File) error {
	stored, err := pgsink.ReadPositions(ctx, pgsink.SinkConfig(f, &c.cfg, "verify"))
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, p := range stored {
		c.positions[p.Partition] = p.NextOffset
	}
	return nil
}

func (c *SinkCheck) readRows(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, string(c.cfg.Postgres.DSN))
	if err != nil {
		return fmt.Errorf("verify: sink %s: connect to postgres: %w", c.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	col := pgx.Identifier{c.cfg.Postgres.EventID}.Sanitize()
	rows, err := conn.Query(ctx, "SELECT "+col+"::text FROM "+ident(c.Table))
	if err != nil {
		if pgsink.IsUndefinedTable(err) || pgsink.IsUndefinedColumn(err) {
			return nil // the sink never ran, or the table is not its
		}
		return fmt.Errorf("verify: sink %s: read table: %w", c.Name, err)
	}
	defer rows.Close()
	var rec [idSize]byte
	for rows.Next() {
		var id *string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("verify: sink %s: read table: %w", c.Name, err)
		}
		c.Rows++
		if id == nil {
			continue
		}
		d := sha(*id)
		if err := c.ids.add(int(d[0]), idRecord(rec[:], d, idRow)); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: sink %s: read table: %w", c.Name, err)
	}
	return nil
}
