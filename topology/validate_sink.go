package topology

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/exactly-io/exactly/serde"
)

var (
	// identifier is a Postgres identifier as the sink accepts it: it is
	// always quoted in SQL, so case is kept as written.
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	// fieldFormats are the input formats whose values have fields.
	fieldFormats = []string{"json", "avro"}
	sources      = []string{SourceValue, SourceKey, SourceTopic, SourcePartition, SourceOffset, SourceTimestamp}
)

func (v *validator) sinks(declared map[string]bool) {
	first := make(map[string]int)
	for i, s := range v.f.Sinks {
		p := fmt.Sprintf("sinks[%d]", i)
		v.uniqueName(p, "sink", s.Name, i, first)
		for j, st := range v.f.Stages {
			// Stage groups are exactly-<stage>, sink groups
			// exactly-sink-<sink>: one group would split the partitions
			// between a stage and a sink.
			if s.Name != "" && st.Name == "sink-"+s.Name {
				np := p + ".name"
				v.report(np, "sink %s and stage %s (line %d) would share consumer group exactly-sink-%s (rename one)",
					v.q(np, s.Name), st.Name, v.at(fmt.Sprintf("stages[%d].name", j)).Line, s.Name)
			}
		}

		v.endpoint(p+".input", s.Input, declared, "orders.clean")
		v.sinkDeadLetter(p+".dead_letter", i, declared)

		v.fetchSizes(p, s.FetchMaxBytes, s.MaxPartitionFetchBytes)
		v.postgres(p+".postgres", s)
	}
}

// sinkDeadLetter checks the dead_letter mapping of sink s at path: a
// topic or a table, not both. A table in the sink's database records each
// dead letter exactly once, a topic at least once (see pgsink), and two
// places for one dead letter would say two things when they disagree.
func (v *validator) sinkDeadLetter(path string, i int, declared map[string]bool) {
	s := v.f.Sinks[i]
	dl, tp, tb := s.DeadLetter, path+".topic", path+".table"
	hasTopic, hasTable := v.has(tp) || dl.Topic != "", v.has(tb) || dl.Table != ""
	switch {
	case !v.has(path):
		v.report(path, "required (e.g. dead_letter: { table: raw.dead_letters }, exactly once, or dead_letter: { topic: orders.sink-dlq }, at least once)")
		return
	case hasTopic && hasTable:
		v.report(tb, "set either topic or table, not both (table: exactly once, in the sink's database; topic: at least once)")
	case !hasTopic && !hasTable:
		v.report(path, "needs a topic or a table (e.g. dead_letter: { table: raw.dead_letters })")
		return
	}
	if hasTopic {
		v.topicRef(tp, dl.Topic, declared)
		if dl.Topic != "" && dl.Topic == s.Input.Topic {
			v.report(tp, "dead letter topic %s is also the sink's input topic", v.q(tp, dl.Topic))
		}
	}
	if hasTable {
		v.qualified(tb, dl.Table, "raw.dead_letters")
		switch pg := s.Postgres; {
		case dl.Table == "":
		case dl.Table == pg.Table:
			v.report(tb, "dead letter table %s is also the sink's table (postgres.table)", v.q(tb, dl.Table))
		case dl.Table == pg.PositionsTable:
			v.report(tb, "dead letter table %s is also the sink's positions table", v.q(tb, dl.Table))
		}
		// Another sink's table in the same database (same DSN text): its
		// rows and these dead letters would mix, and one of the two sinks
		// would stop at start on the other's columns.
		for j, o := range v.f.Sinks {
			if j == i || dl.Table == "" || o.Postgres.DSN != s.Postgres.DSN {
				continue
			}
			which := ""
			switch dl.Table {
			case o.Postgres.Table:
				which = "table"
			case o.Postgres.PositionsTable:
				which = "positions table"
			}
			if which != "" {
				v.report(tb, "dead letter table %s is also the %s of sink %s (line %d)", v.q(tb, dl.Table), which, o.Name, v.at(fmt.Sprintf("sinks[%d].name", j)).Line)
			}
		}
	}
}

func (v *validator) postgres(p string, s Sink) {
	if !v.has(p) {
		v.report(p, "required (e.g. postgres: { dsn: ${PG_DSN}, table: raw.events, event_id: event_id, columns: {event_id: event_id, body: $value} })")
		return
	}
	pg := s.Postgres
	// The DSN is never quoted in a message: it may hold a password even
	// when written literally.
	switch dp := p + ".dsn"; {
	case pg.DSN == "" && v.has(dp):
		v.report(dp, "must not be empty")
	case pg.DSN == "":
		v.report(dp, "required (write it as ${PG_DSN}: it holds credentials)")
	case v.d.offline && v.d.src[dp] != "":
		// From the environment: a secret that validate need not have.
	default:
		// What the sink parses at start; reads no network, but may read
		// sslrootcert and the like, as the sink would.
		if _, err := pgxpool.ParseConfig(string(pg.DSN)); err != nil {
			v.report(dp, "not a valid connection string (want postgres://user@host:port/db?sslmode=... or key=value pairs)")
		}
	}
	v.literalDSN(p+".dsn", pg.DSN)
	v.qualified(p+".table", pg.Table, "raw.events")
	if v.has(p+".positions_table") || pg.PositionsTable != "" {
		v.qualified(p+".positions_table", pg.PositionsTable, "raw.stream_positions")
	}
	if pg.PositionsTable != "" && pg.PositionsTable == pg.Table {
		v.report(p+".positions_table", "must differ from table")
	}

	cp := p + ".columns"
	if len(pg.Columns) == 0 {
		v.report(cp, "at least one column is required (e.g. columns: { event_id: event_id, body: $value })")
	}
	for _, c := range pg.ColumnOrder {
		src, path := pg.Columns[c], cp+"."+c
		if !identifier.MatchString(c) {
			v.report(path, "invalid column name %s (want a letter or '_', then letters, digits or '_', at most 63)", strconv.Quote(truncate(c)))
		}
		switch {
		case src == "":
			v.report(path, "must name a field or one of %s", strings.Join(sources, ", "))
		case strings.HasPrefix(src, "$") && !slices.Contains(sources, src):
			v.report(path, "unknown source %s (valid: a field name, %s)", v.q(path, src), strings.Join(sources, ", "))
		case !strings.HasPrefix(src, "$") && !slices.Contains(fieldFormats, s.Input.Format) && slices.Contains(formats, s.Input.Format):
			v.report(path, "field %s needs input format json or avro (input format is %s; use $value or $key)", v.q(path, src), v.q(strings.TrimSuffix(p, ".postgres")+".input.format", s.Input.Format))
		}
		if t, ok := pg.ColumnTypes[c]; ok {
			v.columnType(path+".type", t)
		}
	}
	v.schemaTypes(p, s)
	v.columnsInSchema(p, s)

	ep := p + ".event_id"
	switch _, ok := pg.Columns[pg.EventID]; {
	case pg.EventID == "" && v.has(ep):
		v.report(ep, "must not be empty")
	case pg.EventID == "":
		v.report(ep, "required (the primary key column, one of columns)")
	case len(pg.Columns) > 0 && !ok:
		v.report(ep, "column %s is not in columns (add it, e.g. %s: %s)", v.q(ep, pg.EventID), pg.EventID, pg.EventID)
	}
	v.version(p, pg)
	v.envelope(p, s)
}

// version checks the version column of a sink's postgres block at p.
func (v *validator) version(p string, pg Postgres) {
	vp := p + ".version"
	_, isColumn := pg.Columns[pg.Version]
	switch {
	case pg.Version == "" && v.has(vp):
		v.report(vp, "must not be empty")
	case pg.Version == "":
	case pg.Mode != ModeUpsert:
		v.report(vp, "needs mode upsert (mode is %s; a version only decides which record overwrites a row)", v.q(p+".mode", pg.Mode))
	case pg.Version == pg.EventID:
		v.report(vp, "must differ from event_id %s", v.q(vp, pg.Version))
	case len(pg.Columns) > 0 && !isColumn:
		v.report(vp, "column %s is not in columns (add it, e.g. %s: %s)", v.q(vp, pg.Version), pg.Version, pg.Version)
	}
}

// envelope checks the envelope of a sink s's postgres block at p.
func (v *validator) envelope(p string, s Sink) {
	pg, ep := s.Postgres, p+".envelope"
	if pg.Envelope != EnvelopeDebezium {
		return
	}
	if pg.Mode != ModeUpsert {
		v.report(ep, "debezium needs mode upsert (mode is %s; an update event overwrites its row)", v.q(p+".mode", pg.Mode))
	}
	if pg.Tombstones == TombstonesDelete {
		v.report(p+".tombstones", "must be skip with envelope debezium (a delete event deletes the row; the tombstone after it is a no-op)")
	}
	if !slices.Contains(fieldFormats, s.Input.Format) {
		v.report(ep, "debezium needs input format json or avro (input format is %s)", v.q(strings.TrimSuffix(p, ".postgres")+".input.format", s.Input.Format))
	}
	for _, c := range pg.ColumnOrder {
		if src := pg.Columns[c]; strings.HasPrefix(src, "$") && src != SourceKey && c == pg.EventID {
			v.report(p+".event_id", "with envelope debezium the event id must be a field of before/after or $key (column %s is %s)", c, src)
		}
	}
}

// qualified checks a schema-qualified table name at path.
func (v *validator) qualified(path, name, example string) {
	if name == "" {
		if v.has(path) {
			v.report(path, "must not be empty")
		} else {
			v.report(path, "required (schema-qualified, e.g. %s)", example)
		}
		return
	}
	schema, table, ok := strings.Cut(name, ".")
	if !ok || !identifier.MatchString(schema) || !identifier.MatchString(table) {
		v.report(path, "invalid table %s (want schema.table, each a letter or '_' then letters, digits or '_', e.g. %s)", v.q(path, name), example)
	}
}

// typeWords are the words a column type may hold after its name
// ("double precision", "character varying(3)", "timestamp(3) with time
// zone"). The type is written into CREATE TABLE as it is, so nothing else
// (a constraint, a default, a collation) may ride along.
var (
	typeWords = []string{"precision", "varying", "with", "without", "time", "zone"}
	typeName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
	typeMod   = regexp.MustCompile(`^\(\s*[0-9]{1,4}\s*(,\s*-?[0-9]{1,4}\s*)?\)$`)
)

// ValidColumnType reports whether t reads as a Postgres type name: a name
// (optionally schema-qualified), the words of a multi-word type, one
// modifier "(n)" or "(p,s)", and "[]" suffixes. It checks the form only;
// whether the type exists is Postgres's answer at start.
func ValidColumnType(t string) bool {
	if len(t) == 0 || len(t) > 100 {
		return false
	}
	t = strings.TrimSpace(t)
	for strings.HasSuffix(t, "[]") {
		t = strings.TrimSpace(strings.TrimSuffix(t, "[]"))
	}
	if i := strings.IndexByte(t, '('); i >= 0 {
		j := strings.IndexByte(t, ')')
		if j < i || !typeMod.MatchString(t[i:j+1]) {
			return false
		}
		t = t[:i] + " " + t[j+1:]
	}
	words := strings.Fields(t)
	if len(words) == 0 || !typeName.MatchString(words[0]) {
		return false
	}
	for _, w := range words[1:] {
		if !slices.Contains(typeWords, strings.ToLower(w)) {
			return false
		}
	}
	return true
}

// columnType checks a column's declared type at path.
func (v *validator) columnType(path, t string) {
	switch {
	case t == "":
		v.report(path, "must name a Postgres type (e.g. type: numeric(12,2))")
	case !ValidColumnType(t):
		v.report(path, "invalid type %s (want a Postgres type name such as bigint, numeric(12,2), timestamptz, double precision, character varying(40), text[]; no constraints or defaults)", v.q(path, t))
	}
}

// schemaTypes checks types and auto_columns of a sink's postgres block at
// p: both read the Avro schema.
func (v *validator) schemaTypes(p string, s Sink) {
	pg, tp, ap := s.Postgres, p+".types", p+".auto_columns"
	switch {
	case !slices.Contains(specOf("sinks[].postgres.types").enum, pg.Types): // reported by checkSpec
	case pg.Types == TypesFromSchema && s.Input.Format != "avro":
		v.report(tp, "from_schema needs input format avro (input format is %s)", v.q(strings.TrimSuffix(p, ".postgres")+".input.format", s.Input.Format))
	case pg.Types == TypesFromSchema && pg.Envelope == EnvelopeDebezium:
		v.report(tp, "from_schema is not supported with envelope debezium (the schema is the envelope's; declare the column types)")
	}
	if pg.AutoColumns && pg.Types != TypesFromSchema {
		v.report(ap, "needs types: from_schema (each new field's column takes its type from the Avro schema)")
	}
}

// columnsInSchema checks, for an Avro input whose schema is known offline
// (a raw Avro schema file, or a registry's reader_schema), that every
// column mapped to a field names a field of that record schema: a field
// it does not have would be NULL in every row, silently (a typo such as
// amout for amount). A schema from the registry alone is known only at
// run time, and a Debezium envelope's columns name fields of its after
// record.
func (v *validator) columnsInSchema(p string, s Sink) {
	pg := s.Postgres
	if pg.Envelope == EnvelopeDebezium {
		return
	}
	name, fields := v.avroFields(strings.TrimSuffix(p, ".postgres")+".input", s.Input, true)
	if fields == nil {
		return
	}
	for _, c := range pg.ColumnOrder {
		src := pg.Columns[c]
		if src == "" || strings.HasPrefix(src, "$") || slices.Contains(fields, src) {
			continue
		}
		path := p + ".columns." + c
		v.report(path, "field %s is not in the input's Avro schema %s (its fields: %s): the column would be NULL in every row",
			v.q(path, src), name, strings.Join(fields, ", "))
	}
}

// avroFields returns the name and top-level field names of the Avro schema
// that endpoint e (at path) is read with (input) or written with, when the
// file names it: its schema file, or for an input with a registry, its
// reader_schema. fields is nil when that is not known offline (no such
// file, a registry's writer schemas, not a record).
func (v *validator) avroFields(path string, e Endpoint, input bool) (name string, fields []string) {
	if e.Format != "avro" {
		return "", nil
	}
	name = e.Schema // an output's writer schema, with a registry or without
	if input && (e.Registry.URL != "" || v.has(path+".registry")) {
		name = e.Registry.ReaderSchema // the writers' come with the records
	}
	if name == "" {
		return "", nil
	}
	data, err := os.ReadFile(v.f.Resolve(name))
	if err != nil {
		return "", nil // reported with the schema field
	}
	return name, serde.SchemaFieldNames(data)
}

// keyInSchema checks a stage's key against the Avro schemas known offline:
// the output's (the key is a field of the output value, and an Avro
// output value holds only its schema's fields) and, for a stage without
// transform steps (whose output value is its input value), the input's.
// A key that is in neither would dead-letter every record.
func (v *validator) keyInSchema(p string, s Stage) {
	if s.Key == "" {
		return
	}
	kp := p + ".key"
	check := func(endpoint string, e Endpoint, input bool) bool {
		name, fields := v.avroFields(p+"."+endpoint, e, input)
		if fields == nil || slices.Contains(fields, s.Key) {
			return true
		}
		v.report(kp, "field %s is not in the %s's Avro schema %s (its fields: %s): every record would be a dead letter for its missing key",
			v.q(kp, s.Key), endpoint, name, strings.Join(fields, ", "))
		return false
	}
	if !check("output", s.Output, false) {
		return
	}
	if len(s.Transform) == 0 {
		check("input", s.Input, true)
	}
}
