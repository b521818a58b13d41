package pgsink

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
)

// EventIDs reads the event IDs of a sink's input records as the sink
// does, and compares them as its table's event ID column does, for
// exactly verify: Of is the text the sink writes for a record's event ID,
// Keys and RowKeys give equal values of the column's type one key (1 and
// 1.0 in numeric, a UUID in either case; an ID a row equals by the
// column's = takes that row's key: citext, interval, a nondeterministic
// collation).
type EventIDs struct {
	s    *Sink
	conn *pgx.Conn
	key  *colType // the event ID column's type; nil: compared as text
}

// NewEventIDs returns the event IDs of the sink cfg. It does no I/O.
func NewEventIDs(cfg Config) (*EventIDs, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &EventIDs{s: s}, nil
}

// Of returns the event ID the sink writes for r, as text, read as the
// sink reads it: of json input only the event ID's field is decoded, so
// a field no column maps (a lone surrogate, say) changes nothing. ok is
// false for a record that has no event ID, or whose value does not decode,
// which the sink dead-letters, and for a tombstone it skips.
func (e *EventIDs) Of(r *kgo.Record) (string, bool) {
	id, ok := e.of(r)
	// A copy: a row's text may share the record's bytes (recordText),
	// and a caller may keep the ID longer than the record.
	return strings.Clone(id), ok
}

func (e *EventIDs) of(r *kgo.Record) (string, bool) {
	s := e.s
	if s.cfg.Envelope == topology.EnvelopeDebezium || s.isTombstone(r) {
		// The event ID of a change event is in after or before.
		o, ok, err := s.toOp(r)
		return o.id, ok && err == nil
	}
	src := s.cfg.Columns[s.eventIDIndex].Source
	var obj map[string]any
	if !strings.HasPrefix(src, "$") {
		var err error
		if _, obj, err = s.decode(r, []string{src}); err != nil {
			return "", false
		}
	}
	var t colType
	if e.key != nil {
		t = *e.key
	}
	if _, found := obj[src]; !found && obj != nil && s.passJSON {
		// A row inside Connect's {"schema", "payload"} wrapper: read as
		// the sink reads it.
		o, ok, err := s.toOp(r)
		return o.id, ok && err == nil
	}
	id, err := s.columnText(r, obj, src, t, nil)
	text, _ := id.(string)
	return text, err == nil && text != ""
}

// Open connects to the sink's database, with the sink's session settings
// (TimeZone UTC: a time without a zone is read as the sink reads it), and
// reads the event ID column's type. A table that does not exist yet
// compares event IDs as text.
func (e *EventIDs) Open(ctx context.Context) error {
	var err error
	if e.conn, err = Connect(ctx, e.s.cfg.DSN); err != nil {
		return err
	}
	types, err := readColumnTypes(ctx, e.conn, e.s.table)
	if IsUndefinedTable(err) {
		return nil
	}
	if err != nil {
		return err
	}
	t, ok := types[e.s.cfg.EventID]
	if ok && textKey(t) {
		// text under a nondeterministic collation (ICU, case- or
		// accent-insensitive; PostgreSQL 12+) equals other texts.
		var nondet bool
		err := e.conn.QueryRow(ctx, `SELECT coalesce((SELECT NOT c.collisdeterministic FROM pg_attribute a
			JOIN pg_collation c ON c.oid = a.attcollation WHERE a.attrelid = $1::regclass AND a.attname = $2), false)`,
			e.s.table.String(), e.s.cfg.EventID).Scan(&nondet)
		if err != nil {
			return fmt.Errorf("read the collation of %s: %w", e.s.cfg.EventID, err)
		}
		ok = nondet
	}
	if ok {
		e.key = &t
		if err := createTempFuncs(ctx, e.conn); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the connection of Open.
func (e *EventIDs) Close(ctx context.Context) {
	if e.conn != nil {
		_ = e.conn.Close(ctx)
	}
}

// AsText reports whether event IDs compare as their text, so that Keys
// would return each as it is.
func (e *EventIDs) AsText() bool { return e.key == nil }

// textKey reports whether the values of t are equal only when their text
// is: text and varchar (char(n) ignores trailing spaces).
func textKey(t colType) bool {
	return !t.domain && (t.base == "text" || t.base == "character varying")
}

// keyText is the SQL text of v, a value of the event ID column's type t,
// that every value equal to it in the type shares: the type's text, but a
// numeric without its trailing zeros (1.0 = 1) and a float's zero without
// its sign (-0 = 0).
func keyText(v string, t colType) string {
	switch t.base {
	case "numeric":
		return fmt.Sprintf("trim_scale(%s)::text", v)
	case "real", "double precision":
		return fmt.Sprintf("(CASE WHEN %s = 0 THEN '0' ELSE %s::text END)", v, v)
	}
	return v + "::text"
}

// Keys returns the key of each of ids, event ID texts as Of returns them:
// the text that the values equal to it in the event ID column's type
// share, or ok false for one the type cannot read (the sink dead-letters
// it). A failed cast of a batch is split in halves down to the ID.
func (e *EventIDs) Keys(ctx context.Context, ids []string) (keys []string, ok []bool, err error) {
	keys, ok = make([]string, len(ids)), make([]bool, len(ids))
	if e.key == nil {
		copy(keys, ids)
		for i := range ok {
			ok[i] = true
		}
		return keys, ok, nil
	}
	// Read by the sink's checked cast: an ID the column cannot hold
	// exactly is ok false, as the sink dead-letters it. An ID that a row
	// equals by the column's own = (eqOp: citext's, an interval's, a
	// nondeterministic collation's) takes that row's key, so that equal
	// values whose texts differ ('Abc' and 'aBC' in citext, '1 day' and
	// '24 hours') match; keyText alone makes the common types' equal
	// values one key.
	cast := "(" + castExpr("u.x", e.s.cfg.EventID, *e.key) + ")"
	col := "t." + pgx.Identifier{e.s.cfg.EventID}.Sanitize()
	q := "SELECT coalesce(r.k, " + keyText(cast, *e.key) + ") FROM unnest($1::text[]) WITH ORDINALITY AS u(x, n)" +
		" LEFT JOIN LATERAL (SELECT " + keyText(col, *e.key) + " AS k FROM " + e.s.table.String() + " t WHERE " +
		col + " " + eqOp(*e.key) + " " + cast + " LIMIT 1) r ON true ORDER BY u.n"
	var run func(lo, hi int) error
	run = func(lo, hi int) error {
		rows, _ := e.conn.Query(ctx, q, ids[lo:hi])
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		switch {
		case err == nil && len(got) == hi-lo:
			copy(keys[lo:hi], got)
			for i := lo; i < hi; i++ {
				ok[i] = true
			}
			return nil
		case err == nil:
			return fmt.Errorf("event id keys: %d of %d", len(got), hi-lo)
		case !IsDataError(err):
			return fmt.Errorf("event id keys: %w", err)
		case hi-lo == 1:
			return nil // not a value of the type
		}
		mid := (lo + hi) / 2
		if err := run(lo, mid); err != nil {
			return err
		}
		return run(mid, hi)
	}
	if len(ids) > 0 {
		err = run(0, len(ids))
	}
	return keys, ok, err
}

// RowKeys calls fn with the key of each row's event ID (null for NULL),
// as Keys gives the key of an input's: the sink's rows, as Postgres holds
// them.
func (e *EventIDs) RowKeys(ctx context.Context, fn func(key string, null bool) error) error {
	col := pgx.Identifier{e.s.cfg.EventID}.Sanitize()
	expr := col + "::text"
	if e.key != nil {
		expr = keyText(col, *e.key)
	}
	rows, err := e.conn.Query(ctx, "SELECT "+expr+" FROM "+e.s.table.String())
	if err != nil {
		return err
	}
	defer rows.Close()
	var key *string
	for rows.Next() {
		if err := rows.Scan(&key); err != nil {
			return err
		}
		if key == nil {
			err = fn("", true)
		} else {
			err = fn(*key, false)
		}
		if err != nil {
			return err
		}
	}
	return rows.Err()
}
