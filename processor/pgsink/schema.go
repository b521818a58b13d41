package pgsink

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/kit"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// schemaLockKey is the pg_advisory_xact_lock key that serializes schema
// set-up between sink instances starting at once: CREATE ... IF NOT EXISTS
// alone races (two creators can both pass the check, and one then fails on
// the catalog's unique index).
const schemaLockKey int64 = 0x65786163746c79 // "exactly"

// stagingTable is the session-local temporary table each connection COPYs a
// batch into. Every column is text, named c0, c1, ...
const stagingTable = "exactly_sink_staging"

// columnType is the type of a column the sink creates for a source.
func (s *Sink) columnType(src string) string {
	switch src {
	case topology.SourceValue:
		switch s.cfg.InputFormat {
		case serde.JSON:
			return "jsonb"
		case serde.Bytes:
			return "bytea"
		}
		return "text"
	case topology.SourcePartition:
		return "integer"
	case topology.SourceOffset:
		return "bigint"
	case topology.SourceTimestamp:
		return "timestamptz"
	}
	return "text"
}

// setupSQL returns the statements that create what is missing, in one
// transaction under the advisory lock.
func (s *Sink) setupSQL() []string {
	var cols []string
	for _, c := range s.cfg.Columns {
		def := pgx.Identifier{c.Name}.Sanitize() + " " + s.columnType(c.Source)
		if c.Name == s.cfg.EventID {
			def += " PRIMARY KEY"
		}
		cols = append(cols, def)
	}
	stmts := []string{fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", schemaLockKey)}
	schemas := []string{s.table.schema}
	if s.positions.schema != s.table.schema {
		schemas = append(schemas, s.positions.schema)
	}
	for _, sc := range schemas {
		// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
		// when the schema exists; a sink given only its schema must not.
		stmts = append(stmts, fmt.Sprintf(`DO $exactly$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '%s') THEN CREATE SCHEMA %s; END IF; END $exactly$`,
			strings.ReplaceAll(sc, "'", "''"), pgx.Identifier{sc}.Sanitize()))
	}
	return append(stmts,
		`CREATE TABLE IF NOT EXISTS `+s.positions.String()+` (
	topic       text        NOT NULL,
	partition   integer     NOT NULL,
	next_offset bigint      NOT NULL,
	owner       text        NOT NULL DEFAULT '',
	updated_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (topic, partition)
)`,
		"CREATE TABLE IF NOT EXISTS "+s.table.String()+" (\n\t"+strings.Join(cols, ",\n\t")+"\n)",
	)
}

// setup creates the schemas and tables that are missing, then reads the
// target's column types. It is idempotent and safe to run from many
// instances at once.
func (s *Sink) setup(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.pgcfg.ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, q := range s.setupSQL() {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	types := map[string]string{}
	// The type without its modifier: an explicit cast to varchar(10)
	// silently truncates, while assigning the cast value to the column
	// applies the modifier with an error (22001), as a row error should.
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, NULL)
FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, s.table.String())
	if err != nil {
		return fmt.Errorf("read columns of %s: %w", s.table, err)
	}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return fmt.Errorf("read columns of %s: %w", s.table, err)
		}
		types[name] = typ
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read columns of %s: %w", s.table, err)
	}
	s.types = make([]string, len(s.cfg.Columns))
	for i, c := range s.cfg.Columns {
		t, ok := types[c.Name]
		if !ok {
			return kit.NewConfigError("table %s has no column %q", s.table, c.Name)
		}
		s.types[i] = t
	}
	s.buildSQL()
	return nil
}

// buildSQL prepares the statements of the write path (the load's in
// buildLoadSQL, write.go). Identifiers come
// from the configuration and are quoted; types come from the catalog's
// format_type, which quotes what needs it.
func (s *Sink) buildSQL() {
	s.buildLoadSQL()
	// The guard: a position only moves from the value the batch started
	// at (NULL: the batch started with no stored row, so only the insert
	// path may succeed), and only forward. A stale instance's update finds
	// another value, changes nothing, and its transaction is rolled back.
	s.sql.guard = `INSERT INTO ` + s.positions.String() + ` AS p (topic, partition, next_offset, owner, updated_at)
VALUES ($1, $2, $3, $5, now())
ON CONFLICT (topic, partition) DO UPDATE
SET next_offset = EXCLUDED.next_offset, owner = EXCLUDED.owner, updated_at = EXCLUDED.updated_at
WHERE p.next_offset = $4 AND EXCLUDED.next_offset > p.next_offset`
}
