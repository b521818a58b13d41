package pgsink

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/kit"
	"github.com/exactly-io/exactly/topology"
)

func TestNewDeadLetterTableValidation(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // "" for valid
	}{
		{"table instead of topic", func(c *Config) { c.DeadLetter, c.DeadLetterTable = "", "raw.dead" }, ""},
		{"table in another schema", func(c *Config) { c.DeadLetter, c.DeadLetterTable = "", "ops.dead" }, ""},
		{"neither", func(c *Config) { c.DeadLetter = "" }, "dead-letter topic or table is required"},
		{"both", func(c *Config) { c.DeadLetterTable = "raw.dead" }, `dead-letter topic "dlq" and table "raw.dead": set one, not both`},
		{"not qualified", func(c *Config) { c.DeadLetter, c.DeadLetterTable = "", "dead" }, `dead-letter table "dead" is not schema.table`},
		{"the target table", func(c *Config) { c.DeadLetter, c.DeadLetterTable = "", "raw.events" }, `dead-letter table "raw.events" is also the sink's table or positions table`},
		{"the default positions table", func(c *Config) { c.DeadLetter, c.DeadLetterTable = "", "raw."+topology.DefaultPositionsTable },
			`dead-letter table "raw.exactly_positions" is also the sink's table or positions table`},
		{"the positions table", func(c *Config) { c.DeadLetter, c.DeadLetterTable, c.PositionsTable = "", "ops.pos", "ops.pos" },
			`dead-letter table "ops.pos" is also the sink's table or positions table`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.mod(&cfg)
			s, err := New(cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if !s.deadLettersToTable() || s.deadLetters.String() != tableOf(cfg.DeadLetterTable).String() {
					t.Fatalf("dead letters to table %v (%s), want %s", s.deadLettersToTable(), s.deadLetters, cfg.DeadLetterTable)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !IsFatal(err) {
				t.Fatalf("err = %v, want a fatal error with %q", err, tt.want)
			}
		})
	}
}

func TestSinkConfigDeadLetterTable(t *testing.T) {
	f := &topology.File{Sinks: []topology.Sink{{Name: "pg", DeadLetter: topology.SinkDeadLetter{Table: "raw.dead"}}}}
	cfg := SinkConfig(f, &f.Sinks[0], "i1")
	if cfg.DeadLetterTable != "raw.dead" || cfg.DeadLetter != "" {
		t.Fatalf("dead-letter table %q, topic %q; want raw.dead and none", cfg.DeadLetterTable, cfg.DeadLetter)
	}
}

func TestDeadLetterTableSQL(t *testing.T) {
	tbl := table{"ops", "Dead"}
	create := createDeadLetterTableSQL(tbl)
	for _, want := range []string{
		`CREATE TABLE IF NOT EXISTS "ops"."Dead" (`,
		`"sink" text NOT NULL`, `"topic" text NOT NULL`, `"topic_id" text NOT NULL DEFAULT ''`, `"partition" integer NOT NULL`,
		`"offset" bigint NOT NULL`, `"key" bytea,`, `"value" bytea,`, `"headers" jsonb NOT NULL DEFAULT '[]'`,
		`"record_timestamp" timestamptz,`, `"reason" text NOT NULL`, `"sqlstate" text,`, `"message" text NOT NULL`,
		`"dead_lettered_at" timestamptz NOT NULL DEFAULT now()`,
		`PRIMARY KEY ("sink", "topic", "topic_id", "partition", "offset")`,
	} {
		if !strings.Contains(create, want) {
			t.Errorf("create statement lacks %q:\n%s", want, create)
		}
	}
	insert := insertDeadLettersSQL(tbl)
	for _, want := range []string{
		`INSERT INTO "ops"."Dead" (sink, topic, topic_id, partition, "offset", key, value, headers, record_timestamp, reason, sqlstate, message, dead_lettered_at)`,
		`d.headers::jsonb`, `now()`,
		`FROM unnest($2::text[], $3::text[], $4::integer[], $5::bigint[], $6::bytea[], $7::bytea[], $8::text[], $9::timestamptz[], $10::text[], $11::text[], $12::text[])`,
		`ON CONFLICT ("sink", "topic", "topic_id", "partition", "offset") DO NOTHING`,
	} {
		if !strings.Contains(insert, want) {
			t.Errorf("insert statement lacks %q:\n%s", want, insert)
		}
	}
	// One array per placeholder after the sink's $1.
	s := &Sink{cfg: Config{Sink: "pg"}}
	if got, want := len(s.deadLetterArgs(nil, nil)), strings.Count(insert, "[]")+1; got != want {
		t.Fatalf("%d arguments, the statement takes %d", got, want)
	}
}

func TestDeadLetterArgs(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(off int64, key, value []byte) *kgo.Record {
		return &kgo.Record{Topic: "in", Partition: 2, Offset: off, Key: key, Value: value, Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}}
	}
	pgErr := newRowError(&pgconn.PgError{Code: "22P02", Message: "invalid input syntax for type integer"})
	dead := []deadLetter{
		{src: rec(7, []byte("k"), []byte("{bad")), re: &kit.RecordError{Reason: kit.ReasonDecode, Err: errors.New("bad \x00 json \xff")}},
		{src: rec(9, nil, nil), re: &kit.RecordError{Reason: ReasonPostgres, Err: pgErr}},
	}
	b := newBatch()
	b.start[2] = position{current: "topic-id-2"}
	s := &Sink{cfg: Config{Sink: "pg"}}
	got := s.deadLetterArgs(b, dead)
	code := "22P02"
	want := []any{"pg", []string{"in", "in"}, []string{"topic-id-2", "topic-id-2"}, []int32{2, 2}, []int64{7, 9},
		[][]byte{[]byte("k"), nil}, [][]byte{[]byte("{bad"), nil},
		[]string{`[{"key":"h","value":"v"}]`, `[{"key":"h","value":"v"}]`}, []time.Time{ts, ts},
		[]string{kit.ReasonDecode, ReasonPostgres}, []*string{nil, &code},
		[]string{"bad \\x00 json \uFFFD", pgErr.Error()}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("arguments\n got %#v\nwant %#v", got, want)
	}
}

func TestHeadersJSON(t *testing.T) {
	tests := []struct {
		name string
		in   []kgo.RecordHeader
		want string
	}{
		{"none", nil, `[]`},
		{"text, in order, repeated keys kept", []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("é")}},
			`[{"key":"a","value":"1"},{"key":"a","value":"é"}]`},
		{"null value", []kgo.RecordHeader{{Key: "n"}}, `[{"key":"n","value":null}]`},
		{"empty value", []kgo.RecordHeader{{Key: "e", Value: []byte{}}}, `[{"key":"e","value":""}]`},
		{"binary value", []kgo.RecordHeader{{Key: "b", Value: []byte{0xff, 0x00}}}, `[{"key":"b","value":null,"value_base64":"/wA="}]`},
		{"NUL in text", []kgo.RecordHeader{{Key: "z", Value: []byte("a\x00b")}}, `[{"key":"z","value":null,"value_base64":"YQBi"}]`},
		// A key jsonb cannot hold is kept as base64, as a value is: written
		// as text it would read as another key ("k\\x00", or U+FFFD).
		{"key with NUL", []kgo.RecordHeader{{Key: "k\x00", Value: []byte("v")}}, `[{"key":null,"key_base64":"awA=","value":"v"}]`},
		{"key not UTF-8", []kgo.RecordHeader{{Key: "\xff\xfe", Value: []byte("v")}}, `[{"key":null,"key_base64":"//4=","value":"v"}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := headersJSON(tt.in)
			if got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
			if strings.Contains(got, `\u0000`) || !json.Valid([]byte(got)) {
				t.Fatalf("%s is no JSON jsonb accepts", got)
			}
		})
	}
}

func TestNewDeadLetterForTable(t *testing.T) {
	cfg := testConfig()
	cfg.DeadLetter, cfg.DeadLetterTable = "", "raw.dead"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := s.newDeadLetter(&kgo.Record{Topic: "in"}, &kit.RecordError{Reason: kit.ReasonDecode, Err: errors.New("x")})
	if d.rec != nil || d.src == nil || d.re == nil {
		t.Fatalf("dead letter %+v: want no Kafka record for a table", d)
	}
}
