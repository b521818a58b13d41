package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/topology"
)

// checkCatalog checks, at set-up and before the sink reports ready, what
// the first batch would otherwise find out (stages.md, "What is checked, and when"):
//   - a unique index or primary key on exactly the event ID column, that
//     ON CONFLICT (event_id) can infer: not partial, not on an
//     expression, not deferrable, valid;
//   - no mapped column is generated (GENERATED ALWAYS AS (...) STORED or
//     GENERATED ALWAYS AS IDENTITY), which INSERT refuses (428C9);
//   - the sink's role may INSERT every mapped column, UPDATE the others in
//     upsert mode, DELETE (and read the event ID) under the delete
//     tombstone policy; SELECT, INSERT and UPDATE the positions table;
//     and create the staging TEMPORARY table.
//
// Every problem is reported, as one *fault.ConfigError; a failed query is
// returned as it is, for the caller's retry. Tables the sink created
// itself pass: it owns them.
func (s *Sink) checkCatalog(ctx context.Context, conn *pgx.Conn) error {
	o := s.cfg.Origin
	pg := func(rel string) string { return o.Field("postgres." + rel) }
	var errs []error

	var unique bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
	JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = $2 AND NOT a.attisdropped
	WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indimmediate AND i.indisvalid
		AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum)`,
		s.table.String(), s.cfg.EventID).Scan(&unique)
	if err != nil {
		return fmt.Errorf("read indexes of %s: %w", s.table, err)
	}
	if !unique {
		errs = append(errs, fmt.Errorf("%s: table %s has no unique index or primary key on exactly column %s: ON CONFLICT needs one (e.g. ALTER TABLE %s ADD PRIMARY KEY (%s))",
			pg("event_id"), s.table, strconv.Quote(s.cfg.EventID), s.table, pgx.Identifier{s.cfg.EventID}.Sanitize()))
	}

	names := make([]string, len(s.cfg.Columns))
	for i, c := range s.cfg.Columns {
		names[i] = c.Name
	}
	rows, err := conn.Query(ctx, `SELECT attname, attgenerated <> '' FROM pg_attribute
	WHERE attrelid = $1::regclass AND attname = ANY($2) AND NOT attisdropped AND (attgenerated <> '' OR attidentity = 'a')
	ORDER BY attnum`, s.table.String(), names)
	if err != nil {
		return fmt.Errorf("read columns of %s: %w", s.table, err)
	}
	var col string
	var stored bool
	_, err = pgx.ForEachRow(rows, []any{&col, &stored}, func() error {
		what := "GENERATED ALWAYS AS IDENTITY"
		if stored {
			what = "a generated column"
		}
		errs = append(errs, fmt.Errorf("%s: column %s of table %s is %s, which INSERT cannot write; remove it from columns",
			pg("columns."+col), strconv.Quote(col), s.table, what))
		return nil
	})
	if err != nil {
		return fmt.Errorf("read columns of %s: %w", s.table, err)
	}

	if s.orderHidden, err = orderHidden(ctx, conn, s.table); err != nil {
		return err
	}

	missing, err := s.missingPrivileges(ctx, conn)
	if err != nil {
		return err
	}
	for _, m := range missing {
		errs = append(errs, fmt.Errorf("%s: the sink's role has no %s privilege on %s (GRANT it)", pg(m.field), m.priv, m.on))
	}
	if len(errs) > 0 {
		return &fault.ConfigError{Err: errors.Join(errs...)}
	}
	return nil
}

// orderHiddenSQL tells whether nothing on a table (or its partitions)
// could tell the order in which one statement inserted its rows: no
// trigger other than the system's own (a foreign key's), no rule, and no
// column that draws a sequence (an identity, or a default calling
// nextval, as serial's does).
const orderHiddenSQL = `WITH rels AS (SELECT $1::regclass AS oid UNION SELECT relid FROM pg_partition_tree($1::regclass))
SELECT NOT EXISTS (SELECT 1 FROM pg_trigger t JOIN rels r ON t.tgrelid = r.oid WHERE NOT t.tgisinternal)
	AND NOT EXISTS (SELECT 1 FROM pg_rewrite w JOIN rels r ON w.ev_class = r.oid WHERE w.rulename <> '_RETURN')
	AND NOT EXISTS (SELECT 1 FROM pg_attribute a JOIN rels r ON a.attrelid = r.oid WHERE a.attnum > 0 AND NOT a.attisdropped AND a.attidentity <> '')
	AND NOT EXISTS (SELECT 1 FROM pg_attrdef d JOIN rels r ON d.adrelid = r.oid WHERE pg_get_expr(d.adbin, d.adrelid) ILIKE '%nextval(%')`

// orderHidden reads orderHiddenSQL for t.
func orderHidden(ctx context.Context, conn *pgx.Conn, t table) (bool, error) {
	var hidden bool
	if err := conn.QueryRow(ctx, orderHiddenSQL, t.String()).Scan(&hidden); err != nil {
		return false, fmt.Errorf("read triggers and defaults of %s: %w", t, err)
	}
	return hidden, nil
}

// privilege is one privilege the sink needs: on what, which, and the
// field of the topology that asks for it.
type privilege struct{ on, priv, field, sql string }

// missingPrivileges returns the privileges of neededPrivileges the
// sink's role does not hold.
func (s *Sink) missingPrivileges(ctx context.Context, conn *pgx.Conn) ([]privilege, error) {
	var missing []privilege
	for _, p := range s.neededPrivileges() {
		var ok bool
		if err := conn.QueryRow(ctx, p.sql).Scan(&ok); err != nil {
			return nil, fmt.Errorf("read privileges: %w", err)
		}
		if !ok {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// neededPrivileges are the privileges the write path uses, each with the
// query that tells whether the role holds it.
func (s *Sink) neededPrivileges() []privilege {
	lit := func(v string) string { return "'" + escapeLiteral(v) + "'" }
	tbl, pos := lit(s.table.String()), lit(s.positions.String())
	column := func(c, priv, field string) privilege {
		return privilege{on: fmt.Sprintf("column %s of %s", strconv.Quote(c), s.table), priv: priv, field: field,
			sql: fmt.Sprintf("SELECT has_column_privilege(%s, %s, '%s')", tbl, lit(c), priv)}
	}
	var ps []privilege
	for _, c := range s.cfg.Columns {
		ps = append(ps, column(c.Name, "INSERT", "columns."+c.Name))
		if s.cfg.Mode == topology.ModeUpsert && c.Name != s.cfg.EventID {
			ps = append(ps, column(c.Name, "UPDATE", "mode"))
		}
	}
	if s.cfg.Tombstones == topology.TombstonesDelete {
		ps = append(ps, privilege{on: "table " + s.table.String(), priv: "DELETE", field: "tombstones",
			sql: "SELECT has_table_privilege(" + tbl + ", 'DELETE')"},
			column(s.cfg.EventID, "SELECT", "tombstones"))
	}
	if s.cfg.AutoColumns {
		// ALTER TABLE ... ADD COLUMN needs the table's owner role.
		ps = append(ps, privilege{on: "table " + s.table.String(), priv: "owner-role (for ALTER TABLE ... ADD COLUMN)", field: "auto_columns",
			sql: "SELECT pg_has_role((SELECT relowner FROM pg_class WHERE oid = " + tbl + "::regclass), 'USAGE')"})
	}
	for _, priv := range []string{"SELECT", "INSERT", "UPDATE"} {
		ps = append(ps, privilege{on: "positions table " + s.positions.String(), priv: priv, field: "positions_table",
			sql: "SELECT has_table_privilege(" + pos + ", '" + priv + "')"})
	}
	return append(ps, privilege{on: "the database (for its staging table)", priv: "TEMPORARY", field: "dsn",
		sql: "SELECT has_database_privilege(current_database(), 'TEMPORARY')"})
}

// escapeLiteral doubles the single quotes of v for a SQL string literal.
// Identifiers here passed topology's and New's checks; this is a second
// fence.
func escapeLiteral(v string) string {
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, v[i])
	}
	return string(out)
}

// checkKafka checks, before the sink joins its group, what the broker
// tells about its configuration: the input and dead-letter topics exist,
// and the session timeout is within the broker's group limits. A
// misconfiguration is a *fault.ConfigError; a failed request is returned as
// it is, for the caller's retry. Limits the broker does not let the sink
// read (no DescribeConfigs ACL) are logged and skipped.
func (s *Sink) checkKafka(ctx context.Context) error {
	o := s.cfg.Origin
	need := []reader.NeededTopic{{Role: "input", Name: s.cfg.Input, Field: o.Field("input.topic")}}
	if s.cfg.DeadLetter != "" {
		need = append(need, reader.NeededTopic{Role: "dead-letter", Name: s.cfg.DeadLetter, Field: o.Field("dead_letter.topic")})
	}
	err := reader.CheckTopicsExist(ctx, s.adm, o, need...)
	if err != nil {
		return err
	}
	lim, err := reader.ReadBrokerLimits(ctx, s.adm)
	if err != nil {
		reader.WarnLimitsUnread(s.log, err)
		return nil
	}
	return lim.CheckSessionTimeout(s.cfg.SessionTimeout, o.Field("session_timeout"))
}
