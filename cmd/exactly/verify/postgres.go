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
		c.topicIDs[p.Partition] = p.TopicID
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

// readDeadLetters reads the sink's dead letters from its dead-letter
// table, as readRows reads its rows (after its positions): those of its
// name and input topic, of the topic incarnation its stored position
// names (a re-created topic's older dead letters name other records).
// None if the table does not exist yet.
func (c *SinkCheck) readDeadLetters(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, string(c.cfg.Postgres.DSN))
	if err != nil {
		return fmt.Errorf("verify: sink %s: connect to postgres: %w", c.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT partition, "offset", topic_id, reason FROM `+ident(c.DeadLetterTable)+
		` WHERE sink = $1 AND topic = $2`, c.Name, c.Input)
	if err != nil {
		if pgsink.IsUndefinedTable(err) {
			return nil // the sink never ran
		}
		return fmt.Errorf("verify: sink %s: read dead-letter table: %w", c.Name, err)
	}
	defer rows.Close()
	var rec [linSize]byte
	for rows.Next() {
		var p int32
		var o int64
		var topicID, reason string
		if err := rows.Scan(&p, &o, &topicID, &reason); err != nil {
			return fmt.Errorf("verify: sink %s: read dead-letter table: %w", c.Name, err)
		}
		if id := c.topicIDs[p]; id != "" && topicID != id {
			continue
		}
		c.DeadLettersByReason[reason]++
		if err := c.lineage.add(linBucket(p, o), linRecord(rec[:], p, o, kDLQ, 0, 0, [16]byte{})); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: sink %s: read dead-letter table: %w", c.Name, err)
	}
	return nil
}
