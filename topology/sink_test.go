package topology

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// sinkHead declares topics in, out and dlq on lines 1-7; sinks start on
// line 9.
const sinkHead = head + "sinks:\n"

// sink is a valid sink on lines 9-20.
const sink = `  - name: pg
    input: { topic: out, format: json }
    dead_letter: { topic: dlq }
    postgres:
      dsn: ${PG_DSN}
      table: raw.events
      event_id: event_id
      columns:
        event_id: event_id
        body: $value
        at: $timestamp
    commit: { interval: 200ms, max_records: 20000 }
`

const secretDSN = "postgres://u:hunter2@db/x"

func TestParseSink(t *testing.T) {
	f := check(t, sinkHead+sink, env(map[string]string{"PG_DSN": secretDSN}))
	s, ok := f.Sink("pg")
	if !ok {
		t.Fatal("sink pg not found")
	}
	want := Sink{
		Name:       "pg",
		Input:      Endpoint{Topic: "out", Format: "json"},
		DeadLetter: SinkDeadLetter{Topic: "dlq"},
		Postgres: Postgres{
			DSN:            secretDSN,
			Table:          "raw.events",
			EventID:        "event_id",
			Columns:        map[string]string{"event_id": "event_id", "body": "$value", "at": "$timestamp"},
			ColumnOrder:    []string{"event_id", "body", "at"},
			Types:          TypesDeclared,
			PositionsTable: "raw.exactly_positions",
			Tombstones:     "skip",
			Mode:           "insert",
			Timeout:        Duration{time.Minute},
			// A change event's placeholder for a value it did not capture.
			UnavailableValue: "__debezium_unavailable_value",
		},
		Commit:                 Commit{Interval: Duration{200 * time.Millisecond}, MaxRecords: 20000},
		SessionTimeout:         Duration{45 * time.Second},
		MetadataMaxAge:         Duration{30 * time.Second},
		FetchMaxBytes:          4 << 20,
		MaxPartitionFetchBytes: 1 << 20,
	}
	if !reflect.DeepEqual(*s, want) {
		t.Fatalf("got  %+v\nwant %+v", *s, want)
	}
	if _, ok := f.Sink("nope"); ok {
		t.Error("Sink(nope) found")
	}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, *s); strings.Contains(out, "hunter2") {
			t.Errorf("%s prints the DSN: %s", format, out)
		}
	}
}

func TestParseSinkDefaults(t *testing.T) {
	src := sinkHead + `  - name: pg
    input: { topic: out }
    dead_letter: { topic: dlq }
    postgres: { dsn: "${PG_DSN}", table: a.b, event_id: id, columns: { id: $key } }
`
	f := check(t, src, env(map[string]string{"PG_DSN": "postgres://db/x"}))
	s := f.Sinks[0]
	if s.Commit.Interval.Duration != 200*time.Millisecond || s.Commit.MaxRecords != 10000 ||
		s.SessionTimeout.Duration != 45*time.Second || s.Input.Format != "json" {
		t.Errorf("defaults: %+v", s)
	}
	// A sink holds its batch in memory: 10000 records by default, and
	// fetches of 4 MiB (a stage's are 2 MiB), 1 MiB from one partition.
	if s.Commit.MaxRecords != 10000 || s.FetchMaxBytes != 4<<20 || s.MaxPartitionFetchBytes != 1<<20 {
		t.Errorf("batch and fetch defaults: max_records %d, fetch_max_bytes %d, max_partition_fetch_bytes %d",
			s.Commit.MaxRecords, s.FetchMaxBytes, s.MaxPartitionFetchBytes)
	}
	if pg := s.Postgres; pg.PositionsTable != "a.exactly_positions" || pg.Tombstones != "skip" || pg.Mode != "insert" {
		t.Errorf("postgres defaults: %+v", pg)
	}
}

func TestParseSinkValidation(t *testing.T) {
	withDSN := env(map[string]string{"PG_DSN": secretDSN})
	rep := func(old, new string) string { return sinkHead + strings.Replace(sink, old, new, 1) }
	tests := []struct {
		name   string
		src    string
		lookup func(string) (string, bool)
		want   []string
	}{
		{"name missing", rep("  - name: pg\n    input:", "  - input:"), withDSN,
			[]string{`t.yaml:9:5: sinks[0].name: required`}},
		{"name invalid", rep("name: pg", `name: "p g"`), withDSN,
			[]string{`t.yaml:9:11: sinks[0].name: invalid sink name "p g" (want 1-100 characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit)`}},
		{"duplicate", sinkHead + sink + sink, withDSN,
			[]string{`t.yaml:21:11: sinks[1].name: duplicate sink "pg" (first declared at line 9)`}},
		{"group shared with a stage", head + "stages:\n  - name: sink-pg\n    input: { topic: in }\n    output: { topic: out }\n    dead_letter: { topic: dlq }\nsinks:\n" + sink, withDSN,
			[]string{`t.yaml:14:11: sinks[0].name: sink "pg" and stage sink-pg (line 9) would share consumer group exactly-sink-pg (rename one)`}},
		{"input not declared", rep("topic: out,", "topic: nope,"), withDSN,
			[]string{`t.yaml:10:21: sinks[0].input.topic: topic "nope" is not declared (add it under topics:)`}},
		{"dead letter missing", rep("    dead_letter: { topic: dlq }\n", ""), withDSN,
			[]string{`t.yaml:9:5: sinks[0].dead_letter: required (e.g. dead_letter: { table: raw.dead_letters }, exactly once, or dead_letter: { topic: orders.sink-dlq }, at least once)`}},
		{"dead letter empty", rep("dead_letter: { topic: dlq }", "dead_letter: {}"), withDSN,
			[]string{`t.yaml:11:18: sinks[0].dead_letter: needs a topic or a table (e.g. dead_letter: { table: raw.dead_letters })`}},
		{"dead letter topic and table", rep("dead_letter: { topic: dlq }", "dead_letter: { topic: dlq, table: raw.dead }"), withDSN,
			[]string{`t.yaml:11:39: sinks[0].dead_letter.table: set either topic or table, not both (table: exactly once, in the sink's database; topic: at least once)`}},
		{"dead letter table not qualified", rep("dead_letter: { topic: dlq }", "dead_letter: { table: dead }"), withDSN,
			[]string{`t.yaml:11:27: sinks[0].dead_letter.table: invalid table "dead" (want schema.table, each a letter or '_' then letters, digits or '_', e.g. raw.dead_letters)`}},
		{"dead letter table empty", rep("dead_letter: { topic: dlq }", `dead_letter: { table: "" }`), withDSN,
			[]string{`t.yaml:11:27: sinks[0].dead_letter.table: must not be empty`}},
		{"dead letter table is the table", rep("dead_letter: { topic: dlq }", "dead_letter: { table: raw.events }"), withDSN,
			[]string{`t.yaml:11:27: sinks[0].dead_letter.table: dead letter table "raw.events" is also the sink's table (postgres.table)`}},
		{"dead letter table is the positions table", rep("dead_letter: { topic: dlq }", "dead_letter: { table: raw.exactly_positions }"), withDSN,
			[]string{`t.yaml:11:27: sinks[0].dead_letter.table: dead letter table "raw.exactly_positions" is also the sink's positions table`}},
		{"dead letter table is another sink's table", sinkHead + sink + `  - name: pg2
    input: { topic: out, format: json }
    dead_letter: { table: raw.events }
    postgres: { dsn: "${PG_DSN}", table: raw.other, event_id: event_id, columns: { event_id: event_id } }
`, withDSN,
			[]string{`t.yaml:23:27: sinks[1].dead_letter.table: dead letter table "raw.events" is also the table of sink pg (line 9)`}},
		{"dead letter is input", rep("topic: dlq", "topic: out"), withDSN,
			[]string{`t.yaml:11:27: sinks[0].dead_letter.topic: dead letter topic "out" is also the sink's input topic`}},
		{"dsn env unset", sinkHead + sink, env(nil),
			[]string{`t.yaml:13:12: sinks[0].postgres.dsn: environment variable "PG_DSN" is not set`}},
		{"dsn missing", rep("      dsn: ${PG_DSN}\n", ""), withDSN,
			[]string{`t.yaml:13:7: sinks[0].postgres.dsn: required (write it as ${PG_DSN}: it holds credentials)`}},
		{"table not qualified", rep("table: raw.events", "table: events"), withDSN,
			[]string{`t.yaml:14:14: sinks[0].postgres.table: invalid table "events" (want schema.table, each a letter or '_' then letters, digits or '_', e.g. raw.events)`}},
		{"table injection", rep("table: raw.events", `table: 'raw.e"; drop table x; --'`), withDSN,
			[]string{`t.yaml:14:14: sinks[0].postgres.table: invalid table "raw.e\"; drop table x; --" (want schema.table, each a letter or '_' then letters, digits or '_', e.g. raw.events)`}},
		{"positions table same", rep("table: raw.events\n", "table: raw.events\n      positions_table: raw.events\n"), withDSN,
			[]string{`t.yaml:15:24: sinks[0].postgres.positions_table: must differ from table`}},
		{"event id not a column", rep("event_id: event_id\n      columns", "event_id: id\n      columns"), withDSN,
			[]string{`t.yaml:15:17: sinks[0].postgres.event_id: column "id" is not in columns (add it, e.g. id: id)`}},
		{"bad column name", rep("at: $timestamp", `"a-t": $timestamp`), withDSN,
			[]string{`t.yaml:19:16: sinks[0].postgres.columns.a-t: invalid column name "a-t" (want a letter or '_', then letters, digits or '_', at most 63)`}},
		{"unknown source", rep("at: $timestamp", "at: $time"), withDSN,
			[]string{`t.yaml:19:13: sinks[0].postgres.columns.at: unknown source "$time" (valid: a field name, $value, $key, $topic, $partition, $offset, $timestamp)`}},
		{"field with string format", rep("format: json", "format: string"), withDSN,
			[]string{`t.yaml:17:19: sinks[0].postgres.columns.event_id: field "event_id" needs input format json or avro (input format is "string"; use $value or $key)`}},
		{"bad tombstones and mode", rep("event_id: event_id\n      columns", "event_id: event_id\n      tombstones: drop\n      mode: merge\n      columns"), withDSN,
			[]string{
				`t.yaml:16:19: sinks[0].postgres.tombstones: unknown tombstone policy "drop" (valid: skip, delete)`,
				`t.yaml:17:13: sinks[0].postgres.mode: unknown mode "merge" (valid: insert, upsert)`,
			}},
		{"version without upsert", rep("event_id: event_id\n      columns", "event_id: event_id\n      version: at\n      columns"), withDSN,
			[]string{`t.yaml:16:16: sinks[0].postgres.version: needs mode upsert (mode is "insert"; a version only decides which record overwrites a row)`}},
		{"version not a column", rep("event_id: event_id\n      columns", "event_id: event_id\n      mode: upsert\n      version: v\n      columns"), withDSN,
			[]string{`t.yaml:17:16: sinks[0].postgres.version: column "v" is not in columns (add it, e.g. v: v)`}},
		{"version is the event id", rep("event_id: event_id\n      columns", "event_id: event_id\n      mode: upsert\n      version: event_id\n      columns"), withDSN,
			[]string{`t.yaml:17:16: sinks[0].postgres.version: must differ from event_id "event_id"`}},
		{"version empty", rep("event_id: event_id\n      columns", "event_id: event_id\n      mode: upsert\n      version: ''\n      columns"), withDSN,
			[]string{`t.yaml:17:16: sinks[0].postgres.version: must not be empty`}},
		{"unknown envelope", rep("event_id: event_id\n      columns", "event_id: event_id\n      mode: upsert\n      envelope: maxwell\n      columns"), withDSN,
			[]string{`t.yaml:17:17: sinks[0].postgres.envelope: unknown envelope "maxwell" (valid: none, debezium)`}},
		{"debezium without upsert, with tombstones delete", rep("event_id: event_id\n      columns", "event_id: event_id\n      tombstones: delete\n      envelope: debezium\n      columns"), withDSN,
			[]string{
				`t.yaml:16:19: sinks[0].postgres.tombstones: must be skip with envelope debezium (a delete event deletes the row; the tombstone after it is a no-op)`,
				`t.yaml:17:17: sinks[0].postgres.envelope: debezium needs mode upsert (mode is "insert"; an update event overwrites its row)`,
			}},
		{"debezium with string input", strings.Replace(rep("event_id: event_id\n      columns:\n        event_id: event_id\n        body: $value", "event_id: k\n      mode: upsert\n      envelope: debezium\n      columns:\n        k: $key\n        body: $value"), "format: json", "format: string", 1), withDSN,
			[]string{`t.yaml:17:17: sinks[0].postgres.envelope: debezium needs input format json or avro (input format is "string")`}},
		{"debezium event id from offset", rep("event_id: event_id\n      columns:\n        event_id: event_id", "event_id: event_id\n      mode: upsert\n      envelope: debezium\n      columns:\n        event_id: $offset"), withDSN,
			[]string{`t.yaml:15:17: sinks[0].postgres.event_id: with envelope debezium the event id must be a field of before/after or $key (column event_id is $offset)`}},
		{"commit and session timeout", rep("max_records: 20000 }", "max_records: 0 }\n    session_timeout: 10ms"), withDSN,
			[]string{
				`t.yaml:20:45: sinks[0].commit.max_records: must be at least 1 (got 0)`,
				`t.yaml:21:22: sinks[0].session_timeout: must be at least 3s, the client's heartbeat interval (got 10ms)`,
			}},
		{"postgres timeout out of range", rep("event_id: event_id\n      columns", "event_id: event_id\n      timeout: 500ms\n      columns"), withDSN,
			[]string{`t.yaml:16:16: sinks[0].postgres.timeout: must be between 1s and 1h (got 500ms)`}},
		{"postgres timeout zero", rep("event_id: event_id\n      columns", "event_id: event_id\n      timeout: 0s\n      columns"), withDSN,
			[]string{`t.yaml:16:16: sinks[0].postgres.timeout: must be between 1s and 1h (got 0s)`}},
		{"metadata max age", rep("max_records: 20000 }", "max_records: 20000 }\n    metadata_max_age: 500ms"), withDSN,
			[]string{`t.yaml:21:23: sinks[0].metadata_max_age: must be between 1s and 1h (got 500ms)`}},
		{"fetch sizes", rep("max_records: 20000 }", "max_records: 20000 }\n    fetch_max_bytes: 0\n    max_partition_fetch_bytes: 0"), withDSN,
			// Both written, both wrong: both reported at once.
			[]string{`t.yaml:21:22: sinks[0].fetch_max_bytes: must be between 1024 (1 KiB) and 104857600 (100 MiB) bytes (got 0)`,
				`t.yaml:22:32: sinks[0].max_partition_fetch_bytes: must be at least 1024 (1 KiB) bytes (got 0)`}},
		{"fetch max wrong, partition above 100 MiB", rep("max_records: 20000 }", "max_records: 20000 }\n    fetch_max_bytes: 512\n    max_partition_fetch_bytes: 209715200"), withDSN,
			[]string{`t.yaml:21:22: sinks[0].fetch_max_bytes: must be between 1024 (1 KiB) and 104857600 (100 MiB) bytes (got 512)`,
				`t.yaml:22:32: sinks[0].max_partition_fetch_bytes: must be at most 104857600 (100 MiB) bytes (got 209715200)`}},
		{"partition fetch bytes above fetch max", rep("max_records: 20000 }", "max_records: 20000 }\n    fetch_max_bytes: 65536\n    max_partition_fetch_bytes: 65537"), withDSN,
			[]string{`t.yaml:22:32: sinks[0].max_partition_fetch_bytes: must not exceed fetch_max_bytes 65536 (got 65537)`}},
		// The client refuses a session timeout below its heartbeat
		// interval (3s) when the sink starts: validate says so first.
		{"session timeout below the heartbeat interval", rep("max_records: 20000 }", "max_records: 20000 }\n    session_timeout: 2999ms"), withDSN,
			[]string{`t.yaml:21:22: sinks[0].session_timeout: must be at least 3s, the client's heartbeat interval (got 2.999s)`}},
		{"session timeout beyond the wire's int32 milliseconds", rep("max_records: 20000 }", "max_records: 20000 }\n    session_timeout: 600h"), withDSN,
			[]string{`t.yaml:21:22: sinks[0].session_timeout: must be at most 596h31m23.647s (got 600h0m0s)`}},
		{"postgres missing", sinkHead + "  - { name: pg, input: { topic: out }, dead_letter: { topic: dlq } }\n", withDSN,
			[]string{`t.yaml:9:5: sinks[0].postgres: required (e.g. postgres: { dsn: ${PG_DSN}, table: raw.events, event_id: event_id, columns: {event_id: event_id, body: $value} })`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.src, tt.lookup, tt.want...)
		})
	}
}

// TestParseSinkNeverShowsDSN checks that no message quotes the DSN, even a
// literal one in a field that fails.
func TestParseSinkNeverShowsDSN(t *testing.T) {
	src := sinkHead + strings.Replace(strings.Replace(sink, "${PG_DSN}", "'"+secretDSN+"'", 1), "table: raw.events", "table: 7", 1)
	_, err := Parse("t.yaml", []byte(src), nil)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseSinkDeadLetterTable(t *testing.T) {
	src := sinkHead + strings.Replace(sink, "dead_letter: { topic: dlq }", "dead_letter: { table: raw.dead_letters }", 1)
	f := check(t, src, env(map[string]string{"PG_DSN": secretDSN}))
	if got := f.Sinks[0].DeadLetter; got != (SinkDeadLetter{Table: "raw.dead_letters"}) {
		t.Fatalf("dead letter %+v, want the table raw.dead_letters and no topic", got)
	}
}

// A stage's dead letters go to a topic only: table is no field of its
// dead_letter.
func TestParseStageDeadLetterTable(t *testing.T) {
	src := head + "stages:\n  - name: s\n    input: { topic: in }\n    output: { topic: out }\n    dead_letter: { topic: dlq, table: raw.dead }\n"
	_, err := Parse("t.yaml", []byte(src), nil)
	if err == nil || !strings.Contains(err.Error(), "stages[0].dead_letter.table: unknown field (valid: topic)") {
		t.Fatalf("error %v, want one naming the unknown field table", err)
	}
}

func TestParseSinkColumnTypes(t *testing.T) {
	src := sinkHead + strings.Replace(sink, "        body: $value\n", "        body: $value\n        amount: { field: amount, type: \"numeric(12,2)\" }\n        at2: { field: at, type: timestamp(3) with time zone }\n        n: { field: n }\n", 1)
	f := check(t, src, env(map[string]string{"PG_DSN": secretDSN}))
	pg := f.Sinks[0].Postgres
	wantCols := ColumnSources{"event_id": "event_id", "body": "$value", "amount": "amount", "at2": "at", "n": "n", "at": "$timestamp"}
	if !reflect.DeepEqual(pg.Columns, wantCols) {
		t.Errorf("columns %v, want %v", pg.Columns, wantCols)
	}
	if want := map[string]string{"amount": "numeric(12,2)", "at2": "timestamp(3) with time zone"}; !reflect.DeepEqual(pg.ColumnTypes, want) {
		t.Errorf("column types %v, want %v", pg.ColumnTypes, want)
	}
	if want := []string{"event_id", "body", "amount", "at2", "n", "at"}; !reflect.DeepEqual(pg.ColumnOrder, want) {
		t.Errorf("column order %v, want %v", pg.ColumnOrder, want)
	}
}

func TestValidColumnType(t *testing.T) {
	tests := []struct {
		typ string
		ok  bool
	}{
		{"bigint", true}, {"numeric(12,2)", true}, {"numeric( 12 , 2 )", true}, {"double precision", true},
		{"character varying(40)", true}, {"timestamp(3) with time zone", true}, {"text[]", true},
		{"public.my_domain", true}, {"TIMESTAMPTZ", true}, {"int[][]", true},
		{"", false}, {"text primary key", false}, {"text not null", false}, {"text default 'x'", false},
		{"text; drop table x", false}, {"numeric(12,2", false}, {"numeric(a)", false}, {"text collate \"C\"", false},
		{"1abc", false}, {"int references t(id)", false}, {"a.b.c", false},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			if got := ValidColumnType(tt.typ); got != tt.ok {
				t.Errorf("ValidColumnType(%q) = %v, want %v", tt.typ, got, tt.ok)
			}
		})
	}
}

func TestParseSinkAvroValidation(t *testing.T) {
	withDSN := env(map[string]string{"PG_DSN": secretDSN})
	avroSink := strings.Replace(sink, "input: { topic: out, format: json }", "input: { topic: out, format: avro, registry: { url: \"http://127.0.0.1:1\" } }", 1)
	rep := func(src, old, new string) string { return sinkHead + strings.Replace(src, old, new, 1) }
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"avro input with fields", rep(avroSink, "body: $value", "body: $value\n        n: n"), nil},
		{"types from schema and auto columns", rep(avroSink, "event_id: event_id\n      columns", "event_id: event_id\n      types: from_schema\n      auto_columns: true\n      columns"), nil},
		{"bad column type", rep(sink, "body: $value", "body: $value\n        n: { field: n, type: \"text primary key\" }"),
			[]string{`t.yaml:19:30: sinks[0].postgres.columns.n.type: invalid type "text primary key" (want a Postgres type name such as bigint, numeric(12,2), timestamptz, double precision, character varying(40), text[]; no constraints or defaults)`}},
		{"empty column type", rep(sink, "body: $value", "body: $value\n        n: { field: n, type: '' }"),
			[]string{`t.yaml:19:30: sinks[0].postgres.columns.n.type: must name a Postgres type (e.g. type: numeric(12,2))`}},
		{"unknown column key", rep(sink, "body: $value", "body: $value\n        n: { field: n, typ: text }"),
			[]string{`t.yaml:19:24: sinks[0].postgres.columns.n.typ: unknown field (valid: field, type)`}},
		{"types from schema with json", rep(sink, "event_id: event_id\n      columns", "event_id: event_id\n      types: from_schema\n      columns"),
			[]string{`t.yaml:16:14: sinks[0].postgres.types: from_schema needs input format avro (input format is "json")`}},
		{"unknown types", rep(avroSink, "event_id: event_id\n      columns", "event_id: event_id\n      types: guess\n      columns"),
			[]string{`t.yaml:16:14: sinks[0].postgres.types: unknown types "guess" (valid: declared, from_schema)`}},
		{"types from schema with debezium", rep(avroSink, "event_id: event_id\n      columns", "event_id: event_id\n      mode: upsert\n      envelope: debezium\n      types: from_schema\n      columns"),
			[]string{`t.yaml:18:14: sinks[0].postgres.types: from_schema is not supported with envelope debezium (the schema is the envelope's; declare the column types)`}},
		{"auto columns without from_schema", rep(avroSink, "event_id: event_id\n      columns", "event_id: event_id\n      auto_columns: true\n      columns"),
			[]string{`t.yaml:16:21: sinks[0].postgres.auto_columns: needs types: from_schema (each new field's column takes its type from the Avro schema)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.src, withDSN, tt.want...)
		})
	}
}

// A sink's dead letters that lead back to the stage feeding it close a
// loop: a record both refuse would go round for ever.
func TestSinkDeadLettersCloseACycle(t *testing.T) {
	src := head + `stages:
  - { name: a, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
sinks:
` + strings.Replace(sink, "dead_letter: { topic: dlq }", "dead_letter: { topic: in }", 1)
	_, err := Parse("t.yaml", []byte(src), env(map[string]string{"PG_DSN": secretDSN}))
	want := "t.yaml:9:32: stages[0].input.topic: cycle through dead-letter topics (a record failing on every stage of it would loop for ever; exactly redrive retries dead letters a bounded number of times): a -> sink pg -> a"
	if err == nil || err.Error() != want {
		t.Fatalf("Parse = %v, want %s", err, want)
	}
	// Into a topic no stage reads, the sink's dead letters close nothing.
	if _, err := Parse("t.yaml", []byte(head+"stages:\n  - { name: a, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }\nsinks:\n"+sink),
		env(map[string]string{"PG_DSN": secretDSN})); err != nil {
		t.Fatal(err)
	}
}
