package verify

import (
	"context"
	"fmt"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
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

// readRows reads the event ID key of each row of the sink's table (see
// pgsink.EventIDs), first connecting for the keys of the inputs.
func (c *SinkCheck) readRows(ctx context.Context) error {
	if err := c.eventIDs.Open(ctx); err != nil {
		return fmt.Errorf("verify: sink %s: %w", c.Name, err)
	}
	var rec [idSize]byte
	err := c.eventIDs.RowKeys(ctx, func(key string, null bool) error {
		c.Rows++
		if null {
			return nil
		}
		d := sha(key)
		return c.ids.add(int(d[0]), idRecord(rec[:], d, idRow))
	})
	if pgsink.IsUndefinedTable(err) || pgsink.IsUndefinedColumn(err) {
		return nil // the sink never ran, or the table is not its
	}
	if err != nil {
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
	q := `SELECT partition, "offset", topic_id, reason FROM ` + ident(c.DeadLetterTable) + ` WHERE sink = $1 AND topic = $2`
	var p int32
	var o int64
	var topicID, reason string
	var rec [linSize]byte
	return c.eachRow(ctx, "dead-letter table", pgsink.IsUndefinedTable, []any{&p, &o, &topicID, &reason}, func() error {
		if id := c.topicIDs[p]; id != "" && topicID != id {
			return nil
		}
		c.DeadLettersByReason[reason]++
		return c.lineage.add(linBucket(p, o), linRecord(rec[:], p, o, kDLQ, 0, 0, [16]byte{}))
	}, q, c.Name, c.Input)
}

// eachRow runs the query sql with args on the sink's database, scans each
// row into dest and calls fn; what names the table in errors. A query
// that fails with none(err) (the sink never ran) reads no rows.
func (c *SinkCheck) eachRow(ctx context.Context, what string, none func(error) bool, dest []any, fn func() error, sql string, args ...any) error {
	conn, err := pgsink.Connect(ctx, string(c.cfg.Postgres.DSN))
	if err != nil {
		return fmt.Errorf("verify: sink %s: %w", c.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		if none(err) {
			return nil
		}
		return fmt.Errorf("verify: sink %s: read %s: %w", c.Name, what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("verify: sink %s: read %s: %w", c.Name, what, err)
		}
		if err := fn(); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: sink %s: read %s: %w", c.Name, what, err)
	}
	return nil
}
