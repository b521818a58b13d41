package pgsink

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// typedState is what the sink keeps for Avro input: the types derived
// from the schema and the columns schema evolution adds (see
// checkSchema and evolve).
type typedState struct {
	avro      bool // the input is Avro
	needValue bool // a column maps $value: the record as JSON text
	// derived are the types of the fields of the schema the table was
	// created from, by field name (Types from_schema).
	derived map[string]string
	// seen are the schema IDs whose fields were checked against the
	// columns (0: a raw Avro codec's one schema).
	seen map[int]bool
	// tableCols are the table's columns as read at start, by name: a
	// field that no column maps and that names one of them is loaded
	// into it, with no ALTER (AutoColumns).
	tableCols map[string]colType
	// pending are the columns added to Config.Columns that the table may
	// not have yet: each transaction adds them until one commits.
	pending []pendingColumn
	// keepSQL are the load's INSERTs for runs that keep columns
	// (insertKeepSQL), by the kept columns' indexes; buildLoadSQL empties
	// it.
	keepSQLMu sync.Mutex
	keepSQL   map[string]string
	// connect are the Connect logical types of an Avro change event's
	// row fields, by writer schema ID and record (avroConnectSchemas).
	connectMu sync.Mutex
	connect   map[string]map[string]connectSchema
	// keyCodec reads Avro change event keys' schemas, and keyFields are
	// their fields by schema ID (checkChangeKey).
	keyMu     sync.Mutex
	keyCodec  serde.Codec
	keyFields map[uint32][]string
	// schemas are the Connect schemas of JSON values (schemas.enable).
	schemas schemaCache
	// keeps is set once a record kept a stored value (op.keep): the
	// input carries placeholders, and batches are no longer streamed.
	keeps atomic.Bool
}

// pendingColumn is a column to add: its index in Config.Columns, and the
// type derived from the field, with the schema ID that brought it.
type pendingColumn struct {
	index    int
	typ      string
	schemaID int
}

// inputCodec is InputCodec completed with the input's format and topic.
func (cfg *Config) inputCodec() serde.Config {
	c := cfg.InputCodec
	c.Format, c.Topic = cfg.InputFormat, cfg.Input
	return c
}

// validateTypes checks the typed-table settings.
func (cfg *Config) validateTypes() []error {
	var errs []error
	switch cfg.Types {
	case topology.TypesDeclared:
	case topology.TypesFromSchema:
		if cfg.InputFormat != serde.Avro {
			errs = append(errs, fault.NewConfigError("types from_schema needs avro input, not %s", cfg.InputFormat))
		}
		if cfg.Envelope == topology.EnvelopeDebezium {
			errs = append(errs, fault.NewConfigError("types from_schema is not supported with envelope debezium (declare the column types)"))
		}
	default:
		errs = append(errs, fault.NewConfigError("types %q: want declared or from_schema", cfg.Types))
	}
	if cfg.AutoColumns && cfg.Types != topology.TypesFromSchema {
		errs = append(errs, fault.NewConfigError("auto columns need types from_schema"))
	}
	for name, t := range cfg.ColumnTypes {
		if !slices.ContainsFunc(cfg.Columns, func(c Column) bool { return c.Name == name }) {
			errs = append(errs, fault.NewConfigError("column type of %q: no such column", name))
		} else if !topology.ValidColumnType(t) {
			errs = append(errs, fault.NewConfigError("column %q: invalid type %q", name, t))
		}
	}
	return errs
}

func (s *Sink) initTyped() {
	s.typed.avro = s.cfg.InputFormat == serde.Avro
	s.typed.needValue = slices.ContainsFunc(s.cfg.Columns, func(c Column) bool { return c.Source == topology.SourceValue })
	s.typed.seen = map[int]bool{}
}

// DerivedType is the Postgres type of a column that holds an Avro field of
// type t, for types from_schema: long → bigint, int → integer, boolean →
// boolean, float → real, double → double precision, string and enum →
// text, bytes and fixed → bytea, record, array and map → jsonb; decimal(p,s)
// → numeric(p,s) (numeric beyond Postgres's 1000 digits), uuid → uuid,
// date → date, time-* → time, timestamp-* → timestamptz,
// local-timestamp-* → timestamp. A union of null and one type is that
// type; any other union is text.
func DerivedType(t serde.FieldType) string {
	switch t.Logical {
	case "decimal":
		if t.Precision > 1000 {
			return "numeric"
		}
		return fmt.Sprintf("numeric(%d,%d)", t.Precision, t.Scale)
	case "uuid":
		return "uuid"
	case "date":
		return "date"
	case "time-millis", "time-micros":
		return "time"
	case "timestamp-millis", "timestamp-micros", "timestamp-nanos":
		return "timestamptz"
	case "local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos":
		return "timestamp"
	}
	switch t.Kind {
	case "boolean":
		return "boolean"
	case "int":
		return "integer"
	case "long":
		return "bigint"
	case "float":
		return "real"
	case "double":
		return "double precision"
	case "bytes", "fixed":
		return "bytea"
	case "record", "array", "map":
		return "jsonb"
	}
	return "text"
}

// derivedBase is the base type (as format_type names it) and numeric
// precision and scale (-1 when unconstrained) of a DerivedType.
func derivedBase(t string) (base string, prec, scale int) {
	switch t {
	case "timestamptz":
		return "timestamp with time zone", -1, -1
	case "timestamp":
		return "timestamp without time zone", -1, -1
	case "time":
		return "time without time zone", -1, -1
	}
	if rest, ok := strings.CutPrefix(t, "numeric("); ok {
		p, sc, _ := strings.Cut(strings.TrimSuffix(rest, ")"), ",")
		prec, _ = strconv.Atoi(p)
		scale, _ = strconv.Atoi(sc)
		return "numeric", prec, scale
	}
	return t, -1, -1
}

// holds reports whether a column of type col holds every value of a field
// whose DerivedType is t exactly: the same type, or a wider one (integer
// into bigint, numeric or double precision; real into double precision; a
// numeric with fewer digits either side of the point into one with more;
// anything into text; a number or boolean into jsonb).
func holds(col colType, t string) bool {
	base, prec, scale := derivedBase(t)
	cb := col.base
	if cb == base && base != "numeric" {
		return true
	}
	switch cb {
	case "text":
		return true
	case "bigint":
		return base == "integer"
	case "double precision":
		return base == "real" || base == "integer"
	case "jsonb", "json":
		return slices.Contains([]string{"jsonb", "bigint", "integer", "boolean", "real", "double precision", "numeric"}, base)
	case "numeric":
		return numericHolds(col, base, prec, scale)
	}
	return false
}

// numericHolds is holds for a numeric column col, and a field of base
// type base (with prec and scale when numeric).
func numericHolds(col colType, base string, prec, scale int) bool {
	cp, cs := -1, -1
	if col.mod >= 4 { // atttypmod of numeric(p,s) is (p<<16 | s) + 4
		cp, cs = int((col.mod-4)>>16&0xffff), int((col.mod-4)&0xffff)
	}
	switch base {
	case "numeric":
		return cp < 0 || (prec >= 0 && cs >= scale && cp-cs >= prec-scale)
	case "integer":
		return cp < 0 || cp-cs >= 10
	case "bigint":
		return cp < 0 || cp-cs >= 19
	}
	return false
}

// errIncompatibleField is the cause of a stop on a schema whose field a
// column cannot hold.
var errIncompatibleField = errors.New("a field's type changed in a way its column cannot hold")

// checkSchema checks, once per schema ID, the fields of the schema record
// r was read with against the columns (Types from_schema): a column whose
// type cannot hold its field's values stops the sink with a
// *fault.ConfigError naming the column and the schema ID; with AutoColumns,
// a field that no column maps becomes a column of its name, added to the
// table by the next transaction (evolve). Registry failures are returned
// as they are (transient).
func (s *Sink) checkSchema(r *kgo.Record) error {
	rs, err := serde.ValueSchema(s.codec, r.Value)
	if err != nil {
		return err
	}
	if s.typed.seen[rs.ID] {
		return nil
	}
	changed := false
	for _, f := range rs.Fields {
		want := DerivedType(f.Type)
		mapped, err := s.checkMapped(f, want, rs.ID)
		if err != nil {
			return err
		}
		if mapped || !s.cfg.AutoColumns {
			continue
		}
		if err := s.addFieldColumn(f, want, rs.ID); err != nil {
			return err
		}
		changed = true
	}
	if changed {
		s.rebuild()
		if s.pool != nil {
			// Pooled connections hold a staging table of the old
			// shape, which no batch uses any more (stagingTable).
			s.pool.Reset()
		}
	}
	s.typed.seen[rs.ID] = true
	return nil
}

// checkMapped reports whether a column maps field f, whose DerivedType is
// want, of schema id, and checks that each such column without a
// declared type holds its values.
func (s *Sink) checkMapped(f serde.Field, want string, id int) (mapped bool, err error) {
	for i, c := range s.cfg.Columns {
		if c.Source != f.Name {
			continue
		}
		mapped = true
		if s.cfg.ColumnTypes[c.Name] != "" || i >= len(s.types) {
			continue // a declared type: values are cast to it, one by one
		}
		if !holds(s.types[i], want) {
			return true, s.incompatible(c.Name, s.types[i].name, f, want, id)
		}
	}
	return mapped, nil
}

// addFieldColumn maps field f, whose DerivedType is want, of schema id,
// to a column of its name (AutoColumns): the table's column of that name,
// when it holds the field's values, or a column that evolve adds.
func (s *Sink) addFieldColumn(f serde.Field, want string, id int) error {
	if slices.ContainsFunc(s.cfg.Columns, func(c Column) bool { return c.Name == f.Name }) {
		return fault.NewConfigError("field %q of schema id %d has no column: column %q maps %s, not the field (auto_columns loads a field into the column of its name; rename the column)",
			f.Name, id, f.Name, s.sourceOf(f.Name))
	}
	if len(f.Name) > maxIdentifier {
		return errLongField(f.Name, id)
	}
	s.cfg.Columns = append(s.cfg.Columns, Column{Name: f.Name, Source: f.Name})
	s.fieldSources = append(s.fieldSources, f.Name)
	if t, ok := s.typed.tableCols[f.Name]; ok {
		if !holds(t, want) {
			return s.incompatible(f.Name, t.name, f, want, id)
		}
		s.types = append(s.types, t)
	} else {
		s.types = append(s.types, plainType(want))
		s.typed.pending = append(s.typed.pending, pendingColumn{index: len(s.cfg.Columns) - 1, typ: want, schemaID: id})
	}
	s.log.Info("new field: adding its column", "field", f.Name, "type", want, "schema_id", id, "exists", len(s.typed.pending) == 0 || s.typed.pending[len(s.typed.pending)-1].index != len(s.cfg.Columns)-1)
	return nil
}

// maxIdentifier is the longest name Postgres keeps (NAMEDATALEN - 1);
// a longer one it truncates, and the column would not be found again.
const maxIdentifier = 63

func errLongField(name string, id int) error {
	return fault.NewConfigError("field %q of schema id %d: its name is longer than the %d bytes a Postgres column name can have (map it with columns: { short_name: %s })",
		name, id, maxIdentifier, name)
}

func (s *Sink) sourceOf(col string) string {
	for _, c := range s.cfg.Columns {
		if c.Name == col {
			return c.Source
		}
	}
	return ""
}

func (s *Sink) incompatible(col, colType string, f serde.Field, want string, id int) error {
	return fault.NewConfigError("%w: column %q of table %s is %s, which cannot hold field %q of schema id %d (%s, read as %s); "+
		"the sink never changes a column's type: ALTER the column yourself, or load the field into another column",
		errIncompatibleField, col, s.table, colType, f.Name, id, avroTypeName(f.Type), want)
}

func avroTypeName(t serde.FieldType) string {
	n := t.Kind
	if t.Logical == "decimal" {
		n = fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)
	} else if t.Logical != "" {
		n = t.Logical
	}
	if t.Nullable {
		n = "nullable " + n
	}
	return n
}

// rebuild remakes the statements after the columns or their types
// changed.
func (s *Sink) rebuild() {
	s.buildSQL()
	on, _ := directEligible(s.cfg, s.types)
	s.direct.on = on && !s.noDirect
}

// padRows extends the rows of ops made before a column was added in the
// same prepare with NULLs: every row has one value per column.
func (s *Sink) padRows(ops []op) {
	n := len(s.cfg.Columns)
	for i := range ops {
		if !ops[i].del && len(ops[i].row) < n {
			ops[i].row = append(ops[i].row, make([]any, n-len(ops[i].row))...)
		}
	}
}

// evolve adds the pending columns to the table in tx, the transaction of
// the batch whose records first carry their fields, so that the columns
// commit with the rows and positions or not at all. ADD COLUMN IF NOT
// EXISTS leaves a column another instance added alone; its type, read
// back, must hold the field.
func (s *Sink) evolve(ctx context.Context, tx pgx.Tx) error {
	if len(s.typed.pending) == 0 {
		return nil
	}
	for _, p := range s.typed.pending {
		q := fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s", s.table, pgx.Identifier{s.cfg.Columns[p.index].Name}.Sanitize(), p.typ)
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("add column %q to %s: %w", s.cfg.Columns[p.index].Name, s.table, err)
		}
	}
	types, err := readColumnTypes(ctx, tx, s.table)
	if err != nil {
		return err
	}
	for _, p := range s.typed.pending {
		c := s.cfg.Columns[p.index]
		t, ok := types[c.Name]
		if !ok {
			return fmt.Errorf("column %q of %s is missing after ADD COLUMN", c.Name, s.table)
		}
		if !holds(t, p.typ) {
			return fault.NewConfigError("%w: column %q of table %s is %s, which cannot hold field %q of schema id %d (read as %s)",
				errIncompatibleField, c.Name, s.table, t.name, c.Source, p.schemaID, p.typ)
		}
		s.types[p.index] = t
	}
	s.rebuild()
	return nil
}

// evolved is called after a commit: the pending columns are in the table.
func (s *Sink) evolved() {
	for _, p := range s.typed.pending {
		if s.typed.tableCols != nil {
			s.typed.tableCols[s.cfg.Columns[p.index].Name] = s.types[p.index]
		}
	}
	s.typed.pending = nil
}

// readColumnTypes reads the columns of t and their types.
func readColumnTypes(ctx context.Context, q querier, t table) (map[string]colType, error) {
	rows, err := q.Query(ctx, readTypesSQL, t.String())
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t, err)
	}
	return scanColumnTypes(rows, t)
}

// scanColumnTypes reads the rows of readTypesSQL of table t, and closes
// them.
func scanColumnTypes(rows pgx.Rows, t table) (map[string]colType, error) {
	defer rows.Close()
	types := map[string]colType{}
	for rows.Next() {
		var name string
		var ct colType
		if err := rows.Scan(&name, &ct.name, &ct.base, &ct.full, &ct.mod, &ct.domain, &ct.eq); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", t, err)
		}
		types[name] = ct
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", t, err)
	}
	return types, nil
}

// prepareCreate readies the creation of a missing table from the Avro
// schema (Types from_schema): the latest schema of the input (its reader
// schema, its schema file, or the latest version of its subject) gives the
// types of the field columns, and with AutoColumns a column for each field
// that no column maps. A table that exists is left as it is: its columns
// change only with the batches whose records bring new fields. A subject
// with no schema yet is an error that setup retries.
func (s *Sink) prepareCreate(ctx context.Context, conn *pgx.Conn) error {
	if s.cfg.Types != topology.TypesFromSchema {
		return nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.table.String()).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", s.table, err)
	}
	if exists {
		return nil
	}
	rs, err := serde.LatestSchema(ctx, s.codec)
	if err != nil {
		return fmt.Errorf("table %s is to be created from the avro schema: %w", s.table, err)
	}
	s.typed.derived = map[string]string{}
	for _, f := range rs.Fields {
		s.typed.derived[f.Name] = DerivedType(f.Type)
		if !s.cfg.AutoColumns || slices.ContainsFunc(s.cfg.Columns, func(c Column) bool { return c.Source == f.Name || c.Name == f.Name }) {
			continue
		}
		if len(f.Name) > maxIdentifier {
			return errLongField(f.Name, rs.ID)
		}
		s.cfg.Columns = append(s.cfg.Columns, Column{Name: f.Name, Source: f.Name})
		s.fieldSources = append(s.fieldSources, f.Name)
	}
	s.log.Info("creating the table from the avro schema", "table", s.cfg.Table, "schema_id", rs.ID, "columns", len(s.cfg.Columns))
	return nil
}

// createType is the type setupSQL creates column c with: its declared
// type, else its field's type in the schema (Types from_schema), else the
// type of its source.
func (s *Sink) createType(c Column) string {
	if t := s.cfg.ColumnTypes[c.Name]; t != "" {
		return t
	}
	if t, ok := s.typed.derived[c.Source]; ok && !strings.HasPrefix(c.Source, "$") {
		return t
	}
	return s.columnType(c.Source)
}

// avroValue prepares the decoded Avro record obj for rowOp: $value is the
// whole value v as JSON text (by the conversion rules).
func (s *Sink) avroValue(obj map[string]any, v any) error {
	if !s.typed.needValue || obj == nil {
		return nil
	}
	b, err := s.jsonCodec.Encode(v)
	if err != nil {
		return &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("$value: %w", err)}
	}
	obj[topology.SourceValue] = string(b)
	return nil
}

// bytesText is the text of an Avro bytes or fixed value for its column:
// bytea hex input for a bytea column, else base64, its JSON form.
func bytesText(b []byte, t colType) string {
	if t.base == "bytea" {
		return `\x` + hex.EncodeToString(b)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// avroChangeOp is changeOp for an Avro Debezium change event, decoded:
// a record with op (string), and before and after (nullable records of
// the table's row).
func (s *Sink) avroChangeOp(r *kgo.Record, ev map[string]any) (op, bool, error) {
	if ev == nil {
		return op{}, false, envelopeError("the value is not an avro record")
	}
	raw, found := ev["op"]
	if !found {
		return op{}, false, envelopeError(`no "op" field`)
	}
	kind, _ := raw.(string)
	if err := s.checkChangeKey(r); err != nil {
		return op{}, false, err
	}
	switch kind {
	case opCreate, opUpdate, opRead:
		after, ok := ev["after"].(map[string]any)
		if !ok {
			return op{}, false, envelopeError("op %q needs an \"after\" record (got %s)", kind, shownValue(ev["after"]))
		}
		if err := s.avroValue(after, ev); err != nil {
			return op{}, false, err
		}
		sch := s.avroConnectSchemas(r, "after")
		if err := connectValues(after, sch); err != nil {
			return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("after: %w", err)}
		}
		return s.rowOpSchema(r, after, sch)
	case opDelete:
		sch := s.avroConnectSchemas(r, "before")
		return s.deleteOp(r, func(src string) (map[string]any, error) {
			before, ok := ev["before"].(map[string]any)
			if !ok {
				return nil, envelopeError("op \"d\" needs a \"before\" record holding the event id field %q (got %s)", src, shownValue(ev["before"]))
			}
			if err := connectValues(before, sch); err != nil {
				return nil, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("before: %w", err)}
			}
			return before, nil
		}, sch)
	}
	return op{}, false, envelopeError("unknown op %s (want c, u, r or d)", shownValue(raw))
}

// shownValue is a decoded value for a message, as JSON, cut to 40 bytes.
func shownValue(v any) string {
	if v == nil {
		return "null"
	}
	b, err := serde.AppendJSON(nil, v, "")
	if err != nil {
		return fmt.Sprintf("%T", v)
	}
	return shownJSON(b)
}
