package pgsink

// The dead-letter table: a sink with dead_letter: { table: ... } writes
// its dead letters as rows of a table of its own database, in the
// transaction of the batch's rows and positions. A crash before COMMIT
// loses the rows with the positions, and the replayed batch writes them
// again; a crash after it finds the positions moved past the records.
// Each rejected record is so recorded exactly once, where a dead-letter
// topic, produced before the database commit, is at least once.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
)

// deadLetterColumns are the columns of a dead-letter table as the sink
// creates it, each with its definition. An existing table must have every
// one (checkDeadLetterTable); it may have more.
//
//   - sink, topic, topic_id, partition, offset: where the record was read
//     (topic_id is the KIP-516 topic ID, base64 as kadm prints it: a
//     re-created topic starts its offsets again);
//   - key, value: the record's bytes as they came (NULL for none);
//   - headers: the record's own headers, a JSON array of {"key", "value"}
//     in record order; a value that is no text jsonb can hold (not UTF-8,
//     or holding NUL) is "value": null with "value_base64", a key the
//     same "key": null with "key_base64", and a null value "value": null
//     alone;
//   - record_timestamp: the record's timestamp;
//   - reason: why, as the dead-letter topic's exactly.dlq.reason header;
//   - sqlstate: the SQLSTATE of a row Postgres rejected, else NULL;
//   - message: the error, as the exactly.dlq.error header;
//   - dead_lettered_at: the time of the batch's transaction (now()).
//
// types are the base types (format_type, a domain's base) an existing
// table's column may have: the first is the one the sink creates; any
// other would change a value (bytes as hex text) or fail on some (an
// offset beyond 2^31 in integer).
var deadLetterColumns = []struct {
	name, def string
	types     []string
}{
	{"sink", "text NOT NULL", textTypes},
	{"topic", "text NOT NULL", textTypes},
	{"topic_id", "text NOT NULL DEFAULT ''", textTypes},
	{"partition", "integer NOT NULL", []string{"integer", "bigint"}},
	{"offset", "bigint NOT NULL", []string{"bigint"}},
	{"key", "bytea", []string{"bytea"}},
	{"value", "bytea", []string{"bytea"}},
	{"headers", "jsonb NOT NULL DEFAULT '[]'", []string{"jsonb"}},
	{"record_timestamp", "timestamptz", []string{"timestamp with time zone"}},
	{"reason", "text NOT NULL", textTypes},
	{"sqlstate", "text", textTypes},
	{"message", "text NOT NULL", textTypes},
	{"dead_lettered_at", "timestamptz NOT NULL DEFAULT now()", []string{"timestamp with time zone"}},
}

// textTypes are the types a text column of the dead-letter table may have.
var textTypes = []string{"text", "character varying"}

// deadLetterKey is the dead-letter table's primary key: one row per input
// record, so that a replay (after `exactly reset`, say) never doubles one.
var deadLetterKey = []string{"sink", "topic", "topic_id", "partition", "offset"}

// createDeadLetterTableSQL returns the CREATE TABLE IF NOT EXISTS of
// dead-letter table t.
func createDeadLetterTableSQL(t table) string {
	defs := make([]string, 0, len(deadLetterColumns)+1)
	for _, c := range deadLetterColumns {
		defs = append(defs, pgx.Identifier{c.name}.Sanitize()+" "+c.def)
	}
	defs = append(defs, "PRIMARY KEY ("+quoteColumns(deadLetterKey)+")")
	return "CREATE TABLE IF NOT EXISTS " + t.String() + " (\n\t" + strings.Join(defs, ",\n\t") + "\n)"
}

// insertDeadLettersSQL returns the statement that writes a batch's dead
// letters into table t: $1 the sink, then one array per column of
// deadLetterArgs, unnested together.
func insertDeadLettersSQL(t table) string {
	return `INSERT INTO ` + t.String() + ` (sink, topic, topic_id, partition, "offset", key, value, headers, record_timestamp, reason, sqlstate, message, dead_lettered_at)
SELECT $1, d.topic, d.topic_id, d.partition, d.off, d.key, d.value, d.headers::jsonb, d.ts, d.reason, d.sqlstate, d.message, now()
FROM unnest($2::text[], $3::text[], $4::integer[], $5::bigint[], $6::bytea[], $7::bytea[], $8::text[], $9::timestamptz[], $10::text[], $11::text[], $12::text[])
	AS d(topic, topic_id, partition, off, key, value, headers, ts, reason, sqlstate, message)
ON CONFLICT (` + quoteColumns(deadLetterKey) + `) DO NOTHING`
}

func quoteColumns(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = pgx.Identifier{c}.Sanitize()
	}
	return strings.Join(q, ", ")
}

// deadLettersToTable reports whether the sink's dead letters go to a
// table rather than a topic.
func (s *Sink) deadLettersToTable() bool { return s.cfg.DeadLetterTable != "" }

// recordDeadLetters writes the batch's dead letters inside its
// transaction tx: as rows of the dead-letter table, or produced to the
// dead-letter topic (produceDeadLetters: acknowledged by Kafka before the
// commit, at least once).
func (s *Sink) recordDeadLetters(ctx context.Context, tx pgx.Tx, b *batch, dead []deadLetter) error {
	if !s.deadLettersToTable() {
		return s.produceDeadLetters(ctx, dead)
	}
	if _, err := tx.Exec(ctx, s.sql.deadLetters, s.deadLetterArgs(b, dead)...); err != nil {
		return fmt.Errorf("insert %d dead letters into %s: %w", len(dead), s.deadLetters, err)
	}
	return nil
}

// deadLetterArgs are the arguments of insertDeadLettersSQL for dead: the
// sink, then the columns as arrays, one element per dead letter. Text is
// made valid UTF-8 without NUL (cleanText): Postgres's text holds neither.
func (s *Sink) deadLetterArgs(b *batch, dead []deadLetter) []any {
	n := len(dead)
	topics, ids, reasons, msgs, hdrs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	parts, offs := make([]int32, n), make([]int64, n)
	keys, vals := make([][]byte, n), make([][]byte, n)
	ts := make([]*time.Time, n) // NULL for a record without a timestamp
	states := make([]*string, n)
	for i, d := range dead {
		r := d.src
		topics[i], parts[i], offs[i], keys[i], vals[i], ts[i] = r.Topic, r.Partition, r.Offset, r.Key, r.Value, nil
		if kafkaconn.HasTimestamp(r.Timestamp) {
			ts[i] = &r.Timestamp
		}
		if b != nil {
			ids[i] = b.start[r.Partition].current
		}
		hdrs[i] = headersJSON(r.Headers)
		reasons[i] = cleanText(d.re.Reason)
		msgs[i] = cleanText(d.re.Err.Error())
		if code := sqlState(d.re.Err); code != "" {
			states[i] = &code
		}
	}
	return []any{s.cfg.Sink, topics, ids, parts, offs, keys, vals, hdrs, ts, reasons, states, msgs}
}

// cleanText returns v as Postgres text can hold it: NUL written as the
// four characters \x00, and bytes that are not UTF-8 as U+FFFD.
func cleanText(v string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(v, "\x00", `\x00`), "\uFFFD")
}

// headerJSON is one header in the headers column: Value is null for a
// null value and for one kept as ValueBase64.
type headerJSON struct {
	Key         *string `json:"key"`
	KeyBase64   *string `json:"key_base64,omitempty"`
	Value       *string `json:"value"`
	ValueBase64 *string `json:"value_base64,omitempty"`
}

// jsonbText returns b as text when jsonb can hold it (UTF-8 without NUL),
// else as base64, so that no byte is lost or replaced.
func jsonbText(b []byte) (text, b64 *string) {
	if v := string(b); utf8.ValidString(v) && !strings.ContainsRune(v, 0) {
		return &v, nil
	}
	enc := base64.StdEncoding.EncodeToString(b)
	return nil, &enc
}

// headersJSON returns the headers column of a record with headers hs (see
// deadLetterColumns): jsonb holds neither NUL nor text that is not
// UTF-8, so such a value is kept as base64.
func headersJSON(hs []kgo.RecordHeader) string {
	out := make([]headerJSON, len(hs))
	for i, h := range hs {
		out[i].Key, out[i].KeyBase64 = jsonbText([]byte(h.Key))
		if h.Value != nil {
			out[i].Value, out[i].ValueBase64 = jsonbText(h.Value)
		}
	}
	j, err := json.Marshal(out)
	if err != nil {
		return "[]" // not reached: strings and booleans always marshal
	}
	return string(j)
}

// checkDeadLetterTable checks, at start, that the dead-letter table has
// every column of deadLetterColumns, a unique index on deadLetterKey (the
// ON CONFLICT target) and that the sink's role may INSERT into it. A
// table that fails is a *fault.ConfigError naming the table and each
// missing column.
func (s *Sink) checkDeadLetterTable(ctx context.Context, conn *pgx.Conn) error {
	if !s.deadLettersToTable() {
		return nil
	}
	field := s.cfg.Origin.Field("dead_letter.table")
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(coalesce(d.typbasetype, a.atttypid), NULL)
FROM pg_attribute a LEFT JOIN pg_type d ON d.oid = a.atttypid AND d.typtype = 'd'
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, s.deadLetters.String())
	if err != nil {
		return fmt.Errorf("read columns of %s: %w", s.deadLetters, err)
	}
	have := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return fmt.Errorf("read columns of %s: %w", s.deadLetters, err)
		}
		have[name] = typ
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read columns of %s: %w", s.deadLetters, err)
	}
	var errs []error
	for _, c := range deadLetterColumns {
		typ, ok := have[c.name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: dead-letter table %s has no column %s (want %s %s; or drop the table and the sink creates it)",
				field, s.deadLetters, strconv.Quote(c.name), pgx.Identifier{c.name}.Sanitize(), c.def))
		case !slices.Contains(c.types, typ):
			errs = append(errs, fmt.Errorf("%s: dead-letter table %s column %s is %s, want %s (ALTER TABLE %s ALTER COLUMN %s TYPE %s; or drop the table and the sink creates it)",
				field, s.deadLetters, strconv.Quote(c.name), typ, strings.Join(c.types, " or "), s.deadLetters, pgx.Identifier{c.name}.Sanitize(), c.types[0]))
		}
	}
	if len(errs) == 0 {
		var unique bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indimmediate
	AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indnkeyatts = cardinality($2::text[])
	AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
		WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey[0:i.indnkeyatts-1])) = (SELECT array_agg(k ORDER BY k) FROM unnest($2::text[]) AS k))`,
			s.deadLetters.String(), deadLetterKey).Scan(&unique)
		if err != nil {
			return fmt.Errorf("read indexes of %s: %w", s.deadLetters, err)
		}
		if !unique {
			errs = append(errs, fmt.Errorf("%s: dead-letter table %s has no primary key or unique index on (%s): ON CONFLICT needs one (ALTER TABLE %s ADD PRIMARY KEY (%s))",
				field, s.deadLetters, strings.Join(deadLetterKey, ", "), s.deadLetters, quoteColumns(deadLetterKey)))
		}
	}
	var insert bool
	if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, 'INSERT')`, s.deadLetters.String()).Scan(&insert); err != nil {
		return fmt.Errorf("read privileges: %w", err)
	}
	if !insert {
		errs = append(errs, fmt.Errorf("%s: the sink's role has no INSERT privilege on dead-letter table %s (GRANT it)", field, s.deadLetters))
	}
	if len(errs) > 0 {
		return &fault.ConfigError{Err: errors.Join(errs...)}
	}
	return nil
}
