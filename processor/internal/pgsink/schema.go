package pgsink

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// schemaLockKey is the pg_advisory_xact_lock key that serializes schema
// set-up between sink instances starting at once: CREATE ... IF NOT EXISTS
// alone races (two creators can both pass the check, and one then fails on
// the catalog's unique index).
const schemaLockKey int64 = 0x65786163746c79 // "exactly"

// stagingTable is the prefix of the session-local temporary table each
// connection COPYs a batch into, with columns c0, c1, ... (stagedType),
// then ord and keep. Its full name ends in a hash of its columns' types
// (stagingName), so that a connection whose table has another shape
// (created before a column was added or changed type) never COPYs into
// it: each shape has its own table, created where missing.
const stagingTable = "exactly_sink_staging"

// stagedType is the type of the staging column x of column col of type
// t: t itself where castExpr is a plain cast with no check, and COPY's
// own reading of the value (the type's input function) is therefore the
// cast's, so that Postgres parses the value once, during the COPY, and
// the INSERT casts nothing; text otherwise, for castExpr to check and
// cast. Only jsonb for now: its input is the text's parse, and pgx's
// binary COPY sends a string as the JSON text it is. A value such a
// column refuses (not JSON, \u0000) fails the COPY with a data error,
// which load bisects to its record as it does a cast's (nameField).
func stagedType(x, col string, t colType) string {
	if t.base == "jsonb" && !t.domain && t.full == "jsonb" && castExpr(x, col, t) == x+"::jsonb" {
		return "jsonb"
	}
	return "text"
}

// stagingName is the name of the staging table whose column definitions
// are cols: stagingTable and a hash of them.
func stagingName(cols []string) string {
	h := fnv.New32a()
	for _, c := range cols {
		h.Write([]byte(c))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%s_%08x", stagingTable, h.Sum32())
}

// columnType is the type of a column the sink creates for a source.
func (s *Sink) columnType(src string) string {
	switch src {
	case topology.SourceValue:
		switch s.cfg.InputFormat {
		case serde.JSON, serde.Avro:
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
		typ := s.createType(c)
		if c.Name == s.cfg.Version && typ == "text" {
			// A version read from a field is a number (a counter, an
			// LSN, epoch milliseconds): compared as text, 10 < 9.
			typ = "bigint"
		}
		def := pgx.Identifier{c.Name}.Sanitize() + " " + typ
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
	if s.deadLettersToTable() && !slices.Contains(schemas, s.deadLetters.schema) {
		schemas = append(schemas, s.deadLetters.schema)
	}
	for _, sc := range schemas {
		// CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even
		// when the schema exists; a sink given only its schema must not.
		stmts = append(stmts, fmt.Sprintf(`DO $exactly$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '%s') THEN CREATE SCHEMA %s; END IF; END $exactly$`,
			strings.ReplaceAll(sc, "'", "''"), pgx.Identifier{sc}.Sanitize()))
	}
	if s.deadLettersToTable() {
		stmts = append(stmts, createDeadLetterTableSQL(s.deadLetters))
	}
	return append(stmts,
		`CREATE TABLE IF NOT EXISTS `+s.positions.String()+` (
	sink        text        NOT NULL,
	topic       text        NOT NULL,
	partition   integer     NOT NULL,
	next_offset bigint      NOT NULL,
	topic_id    text        NOT NULL DEFAULT '',
	target      text        NOT NULL DEFAULT '',
	owner       text        NOT NULL DEFAULT '',
	updated_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (sink, topic, partition)
)`,
		migratePositionsSQL(s.positions),
		"CREATE TABLE IF NOT EXISTS "+s.table.String()+" (\n\t"+strings.Join(cols, ",\n\t")+"\n)",
	)
}

// legacySink is the sink column of a row that a positions table of before
// the sink column held (its rows were keyed by topic and partition only).
// ambiguousSink marks such rows that no sink could claim for sure; no sink
// name can start with '?', so none ever reads them.
const (
	legacySink    = ""
	ambiguousSink = "?unclaimed"
)

// migratePositionsSQL returns the statement that brings a positions table
// created before positions were keyed by sink (columns topic, partition,
// next_offset, owner, updated_at; primary key (topic, partition)) to
// today's format, keeping its rows: it adds sink (legacy rows get ""),
// topic_id ("": unknown) and target (the sink's table; "": unknown) and
// makes the primary key (sink, topic,
// partition). It checks the catalog first, so a table already in today's
// format needs no privilege beyond what the sink writes with.
func migratePositionsSQL(t table) string {
	return fmt.Sprintf(`DO $exactly$
DECLARE
	rel regclass := '%s'::regclass;
	pk name;
	pkcols text[];
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = rel AND attname = 'sink' AND NOT attisdropped) THEN
		EXECUTE format('ALTER TABLE %%s ADD COLUMN sink text NOT NULL DEFAULT %%L', rel, '%s');
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = rel AND attname = 'topic_id' AND NOT attisdropped) THEN
		EXECUTE format('ALTER TABLE %%s ADD COLUMN topic_id text NOT NULL DEFAULT %%L', rel, '');
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = rel AND attname = 'target' AND NOT attisdropped) THEN
		EXECUTE format('ALTER TABLE %%s ADD COLUMN target text NOT NULL DEFAULT %%L', rel, '');
	END IF;
	SELECT c.conname, ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(n, i)
		JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i)
	INTO pk, pkcols FROM pg_constraint c WHERE c.conrelid = rel AND c.contype = 'p';
	IF pkcols IS DISTINCT FROM ARRAY['sink', 'topic', 'partition'] THEN
		IF pk IS NOT NULL THEN
			EXECUTE format('ALTER TABLE %%s DROP CONSTRAINT %%I', rel, pk);
		END IF;
		EXECUTE format('ALTER TABLE %%s ADD PRIMARY KEY (sink, topic, partition)', rel);
	END IF;
END $exactly$`, strings.ReplaceAll(t.String(), "'", "''"), legacySink)
}

// claimLegacy gives the sink the positions of its input topic that a
// positions table of before the sink column held (sink ""), when they can
// only be its own: it has no positions of its own for the topic, and no
// other sink of its topology file reads the topic into this positions
// table (Config.Peers). Such rows were shared by every sink reading the
// topic into the table, and the old guard let only one of them load each
// record; when that sink cannot be told, none claims them: every sink
// loads the topic from its start (rows already loaded are skipped by
// their event IDs), and the rows are kept under the sink name
// "?unclaimed" so that no sink added later claims them. The owner column
// cannot tell either: it held the bare instance ID, which all sinks of a
// process share. It runs in the set-up transaction, under the advisory
// lock, so two sinks never both claim.
func (s *Sink) claimLegacy(ctx context.Context, tx pgx.Tx) error {
	var legacy, own int
	err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sink = $1), count(*) FILTER (WHERE sink = $2) FROM `+
		s.positions.String()+` WHERE topic = $3`, legacySink, s.cfg.Sink, s.cfg.Input).Scan(&legacy, &own)
	if err != nil || legacy == 0 {
		return err
	}
	to, msg := s.cfg.Sink, "claimed positions stored before positions were keyed by sink"
	switch {
	case own > 0:
		s.log.Warn("positions stored before positions were keyed by sink are left alone: the sink has its own", "topic", s.cfg.Input, "legacy_rows", legacy)
		return nil
	case len(s.cfg.Peers) > 0:
		to, msg = ambiguousSink, "positions stored before positions were keyed by sink were shared with other sinks of the file; none claims them, and this sink loads the topic from its start"
	}
	if _, err := tx.Exec(ctx, `UPDATE `+s.positions.String()+` SET sink = $1 WHERE sink = $2 AND topic = $3`, to, legacySink, s.cfg.Input); err != nil {
		return err
	}
	s.log.Warn(msg, "topic", s.cfg.Input, "positions_table", s.cfg.PositionsTable, "rows", legacy, "peers", s.cfg.Peers)
	return nil
}

// warnIfEmpty warns when the target table, which existed, holds no row
// while the sink's stored positions are past records it loaded: a table
// dropped and created again by hand, or truncated, while the sink was
// stopped. The sink resumes after the stored positions, so the rows
// loaded before are not in it. A table emptied by the stream itself (every
// record a dead letter, or deleted by tombstones) looks the same, hence a
// warning, not a stop. A role that may not read the table (the sink needs
// no SELECT on it) skips the check.
func (s *Sink) warnIfEmpty(ctx context.Context, conn *pgx.Conn, loaded int64) {
	var empty bool
	if err := conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT 1 FROM `+s.table.String()+`)`).Scan(&empty); err != nil {
		s.log.Debug("could not check whether the target table is empty", "table", s.table.String(), "err", err)
		return
	}
	if empty {
		s.log.Warn("the target table is empty, but the sink's stored positions are past records it loaded: if the table was dropped and created again, or truncated, while the sink was stopped, those rows are not in it (the sink resumes after its positions); `exactly reset --sink NAME --to-earliest --execute` loads them again. A stream whose records were all dead-lettered or deleted by tombstones leaves it empty too",
			"table", s.table.String(), "positions_table", s.positions.String(), "topic", s.cfg.Input, "partitions_with_positions", loaded)
	}
}

// guardArgs are the arguments of the guard statement for partition p of
// batch b.
func (s *Sink) guardArgs(b *batch, p int32) []any {
	st := b.start[p]
	return []any{s.cfg.Sink, s.cfg.Input, p, b.next[p], st.current, s.cfg.InstanceID, st.expected(), st.topicID, st.rewind, s.cfg.Table}
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
	if err := s.prepareCreate(ctx, conn); err != nil {
		return err
	}
	if err := s.createTables(ctx, conn); err != nil {
		return err
	}
	// The types with their modifiers: castExpr checks that a value reads
	// the same in its column's type as without it (numeric(10,2) rounds,
	// varchar(3) trims trailing spaces in a cast).
	types, err := readColumnTypes(ctx, conn, s.table)
	if err != nil {
		return err
	}
	s.typed.tableCols = types
	if err := s.matchColumns(types); err != nil {
		return err
	}
	if err := s.checkVersionType(); err != nil {
		return err
	}
	if err := s.checkCatalog(ctx, conn); err != nil {
		return err
	}
	if err := s.checkDeadLetterTable(ctx, conn); err != nil {
		return err
	}
	s.buildSQL()
	s.chooseDirect()
	return nil
}

// createTables creates the schemas and tables that are missing, claims
// the positions of an older positions table, and warns when the stored
// positions are past rows the target table does not hold.
func (s *Sink) createTables(ctx context.Context, conn *pgx.Conn) error {
	var existed bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.table.String()).Scan(&existed); err != nil {
		return fmt.Errorf("look up table %s: %w", s.table, err)
	}
	var loaded int64 // partitions whose stored position is past offset 0
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := s.execSetupSQL(ctx, tx); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+s.positions.String()+` WHERE sink = $1 AND topic = $2 AND next_offset > 0`,
			s.cfg.Sink, s.cfg.Input).Scan(&loaded); err != nil {
			return err
		}
		return s.claimLegacy(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	if !existed && loaded > 0 {
		// The table was dropped while the sink was stopped (or it is new
		// but the positions are an old table's): the rows loaded before
		// are not in it, and the sink resumes after them.
		s.log.Warn("the target table did not exist and was created empty, but the sink's stored positions are past records it loaded: those rows are not in the new table; `exactly reset --sink NAME --to-earliest --execute` loads them again",
			"table", s.table.String(), "positions_table", s.positions.String(), "topic", s.cfg.Input, "partitions_with_positions", loaded)
	}
	if existed && loaded > 0 {
		s.warnIfEmpty(ctx, conn, loaded)
	}
	return nil
}

// execSetupSQL runs the statements that create what is missing.
func (s *Sink) execSetupSQL(ctx context.Context, tx pgx.Tx) error {
	for _, q := range s.setupSQL() {
		if _, err := tx.Exec(ctx, q); err != nil {
			// Say which statement: the positions table's creation
			// can be refused where the target table exists.
			what, _, _ := strings.Cut(q, "\n")
			return fmt.Errorf("%s: %w", strings.TrimSuffix(strings.TrimSpace(what), " ("), err)
		}
	}
	return nil
}

// matchColumns sets the type of each configured column from the table's
// types, and refuses the columns the table does not have.
func (s *Sink) matchColumns(types map[string]colType) error {
	s.types = make([]colType, len(s.cfg.Columns))
	var missing []error
	for i, c := range s.cfg.Columns {
		t, ok := types[c.Name]
		if !ok {
			// Every missing column at once, each at its line of the file.
			missing = append(missing, fmt.Errorf("%s: table %s has no column %q (add it, e.g. ALTER TABLE %s ADD COLUMN %s %s; or remove it from columns)",
				s.cfg.Origin.Field("postgres.columns."+c.Name), s.table, c.Name, s.table, pgx.Identifier{c.Name}.Sanitize(), s.createType(c)))
		}
		s.types[i] = t
	}
	if len(missing) > 0 {
		return &fault.ConfigError{Err: errors.Join(missing...)}
	}
	return nil
}

// chooseDirect turns the direct copy path on where the configuration
// and the column types allow it, and logs why not otherwise.
func (s *Sink) chooseDirect() {
	on, why := directEligible(s.cfg, s.types)
	if s.noDirect {
		on, why = false, "turned off"
	}
	s.direct.on = on
	s.log.Info("direct copy path", "on", on, "why_not", why)
}

// orderedTypes are the base types whose order is the order of the values
// they hold, so that a version guard's "stored.v < excluded.v" means
// "older": numbers and times. Text compares as text ("10" < "9"), so a text
// version column would drop newer versions silently.
var orderedTypes = map[string]bool{
	"smallint": true, "integer": true, "bigint": true, "numeric": true,
	"real": true, "double precision": true, "date": true,
	"timestamp without time zone": true, "timestamp with time zone": true,
}

// checkVersionType refuses a version column (Config.Version) whose type
// does not order versions as numbers or times, naming the column and how
// to change it.
func (s *Sink) checkVersionType() error {
	if s.cfg.Version == "" {
		return nil
	}
	for i, c := range s.cfg.Columns {
		if c.Name != s.cfg.Version || orderedTypes[s.types[i].base] {
			continue
		}
		return fault.NewConfigError("%s: version column %q of table %s is %s, whose order is not the versions' (as text, \"10\" < \"9\"): "+
			"make it a number or a time, e.g. ALTER TABLE %s ALTER COLUMN %s TYPE bigint USING %s::bigint",
			s.cfg.Origin.Field("postgres.version"), c.Name, s.table, s.types[i].name, s.table, pgx.Identifier{c.Name}.Sanitize(), pgx.Identifier{c.Name}.Sanitize())
	}
	return nil
}

// buildSQL prepares the statements of the write path (the load's in
// buildLoadSQL, write.go). Identifiers come
// from the configuration and are quoted; types come from the catalog's
// format_type, which quotes what needs it.
func (s *Sink) buildSQL() {
	s.buildLoadSQL()
	s.buildDirectSQL()
	s.sql.deadLetters = insertDeadLettersSQL(s.deadLetters)
	// The guard, on the sink's own row (sink, topic, partition): a
	// position only moves from the value the batch started at, offset
	// and topic ID ($7 NULL: the batch started with no stored row, so
	// only the insert path may succeed), and only forward, unless the
	// topic ID changes (the topic was recreated) or the sink rewound the
	// partition on purpose ($9: recreated, or truncated below the stored
	// offset). A stale instance's update finds another value, changes
	// nothing, and its transaction is rolled back.
	s.sql.guard = `INSERT INTO ` + s.positions.String() + ` AS p (sink, topic, partition, next_offset, topic_id, target, owner, updated_at)
VALUES ($1, $2, $3, $4, $5, $10, $6, now())
ON CONFLICT (sink, topic, partition) DO UPDATE
SET next_offset = EXCLUDED.next_offset, topic_id = EXCLUDED.topic_id, target = EXCLUDED.target, owner = EXCLUDED.owner, updated_at = EXCLUDED.updated_at
WHERE p.next_offset = $7::bigint AND p.topic_id = $8::text
	AND (EXCLUDED.next_offset > p.next_offset OR EXCLUDED.topic_id <> p.topic_id OR $9::boolean)`
}

// checkTarget fails with a *fault.ConfigError when the positions table
// holds a position of this sink's name and input topic written for
// another target table: two sinks of one name (in two topology files,
// say) that share a consumer group, which splits the partitions between
// them, and a position, so neither would load every record. The sink
// checks at each assignment and after its first commit that follows one
// (two such sinks starting at once both find no foreign row before
// either commits).
func (s *Sink) checkTarget(ctx context.Context) error {
	var other string
	err := s.pool.QueryRow(ctx, `SELECT target FROM `+s.positions.String()+
		` WHERE sink = $1 AND topic = $2 AND target <> '' AND target <> $3 LIMIT 1`, s.cfg.Sink, s.cfg.Input, s.cfg.Table).Scan(&other)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	return fault.NewConfigError("positions table %s holds positions of sink %s for topic %s written for table %s, not %s: "+
		"two sinks named %s (in two topology files?) share one consumer group and one position, so neither would load every record; give each its own name",
		s.positions, s.cfg.Sink, s.cfg.Input, other, s.cfg.Table, s.cfg.Sink)
}
