package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

const secret = "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=1"

func testConfig() Config {
	return Config{
		Sink: "pg", InstanceID: "i1", Brokers: []string{"127.0.0.1:1"},
		Input: "in", DeadLetter: "dlq", DSN: secret,
		Table: "raw.events", EventID: "event_id",
		Columns: []Column{
			{"event_id", "event_id"}, {"body", "$value"}, {"note", "note"}, {"n", "n"},
			{"k", "$key"}, {"p", "$partition"}, {"o", "$offset"}, {"ts", "$timestamp"}, {"tags", "tags"},
		},
	}
}

func newTestSink(t *testing.T, mod func(*Config)) *Sink {
	t.Helper()
	cfg := testConfig()
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewDefaults(t *testing.T) {
	s := newTestSink(t, nil)
	c := s.Config()
	if c.PositionsTable != "raw.exactly_positions" || c.Tombstones != "skip" || c.Mode != "insert" ||
		c.CommitInterval != 200*time.Millisecond || c.MaxRecords != 10000 || c.SessionTimeout != 45*time.Second || c.InputFormat != "json" {
		t.Fatalf("defaults: %+v", c)
	}
	if c.FetchMaxBytes != 4<<20 || c.MaxPartitionFetchBytes != 1<<20 {
		t.Fatalf("fetch defaults: fetch max bytes %d, max partition fetch bytes %d", c.FetchMaxBytes, c.MaxPartitionFetchBytes)
	}
	if c.Group() != "exactly-sink-pg" || c.GroupInstanceID() != "exactly-sink-pg-i1" {
		t.Fatalf("group %q member %q", c.Group(), c.GroupInstanceID())
	}
}

// The sink's consumer fetches with its configured sizes, which bound the
// memory of its input next to its batch (franz-go's default is 50 MiB a
// fetch).
func TestClientFetchSizes(t *testing.T) {
	tests := []struct {
		name                string
		maxBytes, partBytes int32
		wantMax, wantPart   int32
	}{
		{"defaults", 0, 0, 4 << 20, 1 << 20},
		{"set", 8 << 20, 2 << 20, 8 << 20, 2 << 20},
		{"fetch max below the partition default", 512 << 10, 0, 512 << 10, 512 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) { c.FetchMaxBytes, c.MaxPartitionFetchBytes = tt.maxBytes, tt.partBytes })
			cl, err := kgo.NewClient(s.clientOptions(nil)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if got := cl.OptValue(kgo.FetchMaxBytes).(int32); got != tt.wantMax {
				t.Errorf("client FetchMaxBytes %d, want %d", got, tt.wantMax)
			}
			if got := cl.OptValue(kgo.FetchMaxPartitionBytes).(int32); got != tt.wantPart {
				t.Errorf("client FetchMaxPartitionBytes %d, want %d", got, tt.wantPart)
			}
		})
	}
}

func TestNewValidation(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no sink", func(c *Config) { c.Sink = "" }, "sink is required"},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "brokers are required"},
		{"table not qualified", func(c *Config) { c.Table = "events" }, `table "events" is not schema.table`},
		{"event id not a column", func(c *Config) { c.EventID = "id" }, `event id column "id" is not one of the columns`},
		{"unknown source", func(c *Config) { c.Columns[1].Source = "$body" }, `unknown source "$body"`},
		{"field needs json", func(c *Config) { c.InputFormat = "string" }, `field "event_id" needs json or avro input`},
		{"duplicate column", func(c *Config) { c.Columns = append(c.Columns, Column{"n", "m"}) }, `column "n" appears twice`},
		{"bad mode", func(c *Config) { c.Mode = "merge" }, `mode "merge"`},
		{"session timeout below the heartbeat interval", func(c *Config) { c.SessionTimeout = 2 * time.Second }, "session timeout 2s must be between the heartbeat interval 3s"},
		{"fetch max bytes below 1 KiB", func(c *Config) { c.FetchMaxBytes = 512 }, "fetch max bytes 512 must be between 1024 and 104857600"},
		{"partition fetch bytes above fetch max", func(c *Config) { c.FetchMaxBytes, c.MaxPartitionFetchBytes = 4096, 8192 }, "max partition fetch bytes 8192 must be between 1024 and the fetch max bytes 4096"},
		{"bad dsn", func(c *Config) { c.DSN = "postgres://u:hunter2@[::1" }, "postgres dsn is not a valid connection string"},
		{"version without upsert", func(c *Config) { c.Version = "n" }, `version column "n" needs mode upsert`},
		{"version not a column", func(c *Config) { c.Mode, c.Version = "upsert", "v" }, `version column "v" is not one of the columns`},
		{"version is the event id", func(c *Config) { c.Mode, c.Version = "upsert", "event_id" }, `version column "event_id" is the event id column`},
		{"unknown envelope", func(c *Config) { c.Mode, c.Envelope = "upsert", "maxwell" }, `envelope "maxwell": want none or debezium`},
		{"debezium without upsert", func(c *Config) { c.Envelope = "debezium" }, "envelope debezium needs mode upsert"},
		{"debezium with tombstones delete", func(c *Config) { c.Mode, c.Envelope, c.Tombstones = "upsert", "debezium", "delete" }, "envelope debezium needs tombstones skip"},
		{"debezium event id from offset", func(c *Config) { c.Mode, c.Envelope, c.Columns[0].Source = "upsert", "debezium", "$offset" }, `event id column "event_id" must be a field or $key, not $offset`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Columns = append([]Column(nil), cfg.Columns...)
			tt.mod(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error shows the DSN: %v", err)
			}
			if !IsFatal(err) {
				t.Errorf("IsFatal(%v) = false", err)
			}
		})
	}
}

func TestToOp(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	rec := func(key, value string) *kgo.Record {
		r := &kgo.Record{Topic: "in", Partition: 2, Offset: 41, Timestamp: ts}
		if key != "" {
			r.Key = []byte(key)
		}
		if value != "\x00nil" {
			r.Value = []byte(value)
		}
		return r
	}
	tests := []struct {
		name       string
		tombstones string
		version    string
		r          *kgo.Record
		ok         bool
		reason     string
		want       []any
		del        string
	}{
		{name: "full row", r: rec("k1", `{"event_id":"e1","note":"hi","n":7,"tags":["a"]}`), ok: true,
			want: []any{"e1", `{"event_id":"e1","note":"hi","n":7,"tags":["a"]}`, "hi", "7", "k1", "2", "41", "2026-01-02T03:04:05.006Z", `["a"]`}},
		{name: "missing fields are null", r: rec("", `{"event_id":42}`), ok: true,
			want: []any{"42", `{"event_id":42}`, nil, nil, nil, "2", "41", "2026-01-02T03:04:05.006Z", nil}},
		{name: "no event id", r: rec("k", `{"note":"x"}`), reason: deadletter.ReasonEventID},
		{name: "empty event id", r: rec("k", `{"event_id":""}`), reason: deadletter.ReasonEventID},
		{name: "not an object", r: rec("k", `[1]`), reason: deadletter.ReasonEventID},
		{name: "invalid json", r: rec("k", `{"event_id":`), reason: deadletter.ReasonDecode},
		{name: "json null", r: rec("k", `null`), reason: deadletter.ReasonDecode},
		{name: "tombstone skipped", r: rec("k", "\x00nil")},
		{name: "tombstone deletes", tombstones: "delete", r: rec("e9", "\x00nil"), ok: true, del: "e9"},
		{name: "tombstone without key", tombstones: "delete", r: rec("", "\x00nil"), reason: deadletter.ReasonEventID},
		{name: "connect null payload skipped", r: rec("k", `{"schema":{"type":"struct","optional":true,"fields":[]},"payload":null}`)},
		{name: "connect null payload deletes", tombstones: "delete", ok: true, del: "e9",
			r: rec(`{"schema":{"type":"struct","fields":[{"type":"string","field":"event_id"}]},"payload":{"event_id":"e9"}}`, `{"schema":{"type":"struct","optional":true,"fields":[]},"payload":null}`)},
		{name: "connect null payload without key", tombstones: "delete", r: rec("", `{"schema":{"type":"struct"},"payload":null}`), reason: deadletter.ReasonEventID},
		{name: "null payload beside other fields", r: rec("k", `{"schema":{},"payload":null,"event_id":"e1"}`), ok: true,
			want: []any{"e1", `{"schema":{},"payload":null,"event_id":"e1"}`, nil, nil, "k", "2", "41", "2026-01-02T03:04:05.006Z", nil}},
		{name: "version present", version: "n", r: rec("", `{"event_id":"e1","n":3}`), ok: true,
			want: []any{"e1", `{"event_id":"e1","n":3}`, nil, "3", nil, "2", "41", "2026-01-02T03:04:05.006Z", nil}},
		{name: "version missing", version: "n", r: rec("", `{"event_id":"e1"}`), reason: deadletter.ReasonVersion},
		{name: "version null", version: "n", r: rec("", `{"event_id":"e1","n":null}`), reason: deadletter.ReasonVersion},
		{name: "tombstone deletes without a version", version: "n", tombstones: "delete", r: rec("e9", "\x00nil"), ok: true, del: "e9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) {
				c.Tombstones = tt.tombstones
				if tt.version != "" {
					c.Mode, c.Version = "upsert", tt.version
				}
			})
			o, ok, err := s.toOp(tt.r)
			if tt.reason != "" {
				var re *dlq.RecordError
				if !errors.As(err, &re) || re.Reason != tt.reason {
					t.Fatalf("err = %v, want reason %s", err, tt.reason)
				}
				return
			}
			if err != nil || ok != tt.ok {
				t.Fatalf("ok %v err %v", ok, err)
			}
			if o.del != (tt.del != "") || (o.del && o.id != tt.del) {
				t.Fatalf("op %+v, want delete of %q", o, tt.del)
			}
			if tt.want != nil && fmt.Sprintf("%#v", o.row) != fmt.Sprintf("%#v", tt.want) {
				t.Fatalf("row\n%#v\nwant\n%#v", o.row, tt.want)
			}
		})
	}
}

func TestToOpBytesValue(t *testing.T) {
	s := newTestSink(t, func(c *Config) {
		c.InputFormat = "bytes"
		c.Columns = []Column{{"event_id", "$key"}, {"body", "$value"}}
	})
	o, ok, err := s.toOp(&kgo.Record{Key: []byte("e1"), Value: []byte{0, 0xff}})
	if err != nil || !ok || o.row[1] != `\x00ff` || o.id != "e1" {
		t.Fatalf("op %+v ok %v err %v", o, ok, err)
	}
	if got := s.columnType("$value"); got != "bytea" {
		t.Fatalf("column type %s", got)
	}
}

func TestDeadLetterHeaders(t *testing.T) {
	s := newTestSink(t, nil)
	r := &kgo.Record{Topic: "in", Partition: 1, Offset: 9, Key: []byte("k"), Value: []byte("v"),
		Timestamp: time.UnixMilli(1234), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}
	pgErr := &pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence"}
	dl := s.deadLetterOf(r, &dlq.RecordError{Reason: deadletter.ReasonPostgres, Err: pgErr})
	got := map[string]string{}
	for _, h := range dl.Headers {
		got[h.Key] = string(h.Value)
	}
	want := map[string]string{
		"h": "x", deadletter.HeaderReason: "postgres", deadletter.HeaderStage: "pg",
		deadletter.HeaderSourceTopic: "in", deadletter.HeaderSourcePartition: "1", deadletter.HeaderSourceOffset: "9",
		deadletter.HeaderSourceTimestamp: "1234", deadletter.HeaderSQLState: "22P05", deadletter.HeaderError: pgErr.Error(),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || dl.Topic != "dlq" || string(dl.Key) != "k" || string(dl.Value) != "v" {
		t.Fatalf("dead letter %+v headers %v", dl, got)
	}
}

// Identifiers are quoted; types come from the catalog (here made up).
func TestSQL(t *testing.T) {
	s := newTestSink(t, func(c *Config) {
		c.Table, c.PositionsTable, c.Mode = "Raw.Events", "ops.pos", "upsert"
		c.Columns = []Column{{"event_id", "event_id"}, {"Body", "$value"}}
	})
	setup := strings.Join(s.setupSQL(), ";\n")
	for _, want := range []string{
		`nspname = 'Raw') THEN CREATE SCHEMA "Raw";`, `nspname = 'ops') THEN CREATE SCHEMA "ops";`,
		`CREATE TABLE IF NOT EXISTS "ops"."pos"`, `CREATE TABLE IF NOT EXISTS "Raw"."Events" (` + "\n\t" + `"event_id" text PRIMARY KEY,` + "\n\t" + `"Body" jsonb`,
		"pg_advisory_xact_lock",
	} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup lacks %q:\n%s", want, setup)
		}
	}
	s.types = []colType{plainType("text"), plainType("jsonb")}
	s.buildSQL()
	if want := `WITH exactly_cast_rows AS MATERIALIZED (SELECT c0::text AS v0, c1::jsonb AS v1, ord FROM pg_temp.` + s.sql.stagingName + `) INSERT INTO "Raw"."Events" ("event_id", "Body") SELECT v0, v1 FROM (SELECT DISTINCT ON (v0) * FROM exactly_cast_rows ORDER BY v0, ord DESC) AS staged ORDER BY ord ON CONFLICT ("event_id") DO UPDATE SET "Body" = EXCLUDED."Body"`; s.sql.insert != want {
		t.Errorf("insert:\n%s\nwant\n%s", s.sql.insert, want)
	}
	// Every row is cast (castExpr) before DISTINCT ON: a value its
	// column cannot hold exactly raises even in a row that an equal event
	// ID would drop.
	s.types = []colType{plainType("date"), plainType("jsonb")}
	s.buildSQL()
	if cast := "WITH exactly_cast_rows AS MATERIALIZED (SELECT " + castExpr("c0", "event_id", plainType("date")) + " AS v0, "; !strings.HasPrefix(s.sql.insert, cast) {
		t.Errorf("insert:\n%s\nlacks\n%s", s.sql.insert, cast)
	}
	for _, want := range []string{
		"ON CONFLICT (sink, topic, partition) DO UPDATE",
		"WHERE p.next_offset = $7::bigint AND p.topic_id = $8::text",
		"AND (EXCLUDED.next_offset > p.next_offset OR EXCLUDED.topic_id <> p.topic_id OR $9::boolean)",
	} {
		if !strings.Contains(s.sql.guard, want) {
			t.Errorf("guard lacks %q: %s", want, s.sql.guard)
		}
	}
}

// SinkConfig carries every field of the topology's sink.
func TestSinkConfig(t *testing.T) {
	src := `version: 1
kafka: { brokers: ["k:9092"] }
topics: [ { name: in, partitions: 3 }, { name: dlq, partitions: 1 } ]
sinks:
  - name: pg
    input: { topic: in }
    dead_letter: { topic: dlq }
    postgres: { dsn: "${DSN}", table: raw.events, event_id: id, columns: { id: $key, body: $value }, tombstones: delete }
    session_timeout: 7s
    fetch_max_bytes: 4194304
    max_partition_fetch_bytes: 524288
`
	f, err := topology.Parse("t.yaml", []byte(src), func(k string) (string, bool) { return secret, k == "DSN" })
	if err != nil {
		t.Fatal(err)
	}
	sk, _ := f.Sink("pg")
	c := SinkConfig(f, sk, "i9")
	if c.DSN != secret || c.InstanceID != "i9" || c.Tombstones != "delete" || c.SessionTimeout != 7*time.Second ||
		fmt.Sprint(c.Columns) != "[{id $key} {body $value}]" || c.PositionsTable != "raw.exactly_positions" ||
		c.FetchMaxBytes != 4<<20 || c.MaxPartitionFetchBytes != 512<<10 {
		t.Fatalf("config %+v", c)
	}
	if got, want := c.Origin.Field("session_timeout"), "t.yaml:9:22: sinks[0].session_timeout"; got != want {
		t.Errorf("Origin.Field = %q, want %q", got, want)
	}
	if got, want := c.Origin.Field("postgres.event_id"), "t.yaml:8:61: sinks[0].postgres.event_id"; got != want {
		t.Errorf("Origin.Field of a field inside a flow mapping = %q, want %q", got, want)
	}
	if got, want := c.Origin.Field("commit.interval"), "sinks[0].commit.interval"; got != want {
		t.Errorf("Origin.Field of a defaulted field = %q, want %q", got, want)
	}
	if _, err := New(c); err != nil {
		t.Fatal(err)
	}
}

// Postgres unreachable is transient: Run keeps retrying and returns nil
// when canceled.
func TestRunPostgresUnreachable(t *testing.T) {
	s := newTestSink(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	if s.Stats().Retries == 0 {
		t.Fatal("no retries")
	}
}

func TestParseFailpoints(t *testing.T) {
	fps, err := failpoint.ParseFailpoints("crash-before-db-commit@2, crash-after-db-commit@1")
	if err != nil || fmt.Sprint(fps) != "[crash-before-db-commit@2 crash-after-db-commit@1]" {
		t.Fatalf("%v %v", fps, err)
	}
	if _, err := failpoint.ParseFailpoints("crash-during-db-commit@1"); err == nil || !strings.Contains(err.Error(), "crash-after-db-commit") {
		t.Fatalf("err = %v", err)
	}
}

type flakyCodec struct{ serde.Codec }

func (flakyCodec) Decode([]byte) (any, error) {
	return nil, fmt.Errorf("registry down: %w", serde.ErrTransient)
}

// A transient decode failure fails the attempt and makes no dead letter.
func TestPrepareTransient(t *testing.T) {
	s := newTestSink(t, nil)
	b := newBatch()
	b.recs = []*kgo.Record{{Value: []byte(`{"event_id":"e1"}`)}, {Value: []byte(`{`)}}
	ops, dead, err := s.prepare(b)
	if err != nil || len(ops) != 1 || len(dead) != 1 {
		t.Fatalf("ops %d dead %d err %v", len(ops), len(dead), err)
	}
	s.codec, s.passJSON = flakyCodec{s.codec}, false // every record through the (flaky) codec
	ops, dead, err = s.prepare(b)
	if !serde.IsTransient(err) || !IsTransient(err) || len(ops)+len(dead) != 0 {
		t.Fatalf("ops %d dead %d err %v", len(ops), len(dead), err)
	}
}

// A Debezium change event: c, u and r upsert the row mapped from after, d
// deletes by the event ID in before (or the key, when the event id column
// is $key); an event that cannot be applied is a dead letter with its
// reason.
func TestChangeOp(t *testing.T) {
	tests := []struct {
		name   string
		keyCol bool // the event id column is $key
		key    string
		value  string
		skip   bool
		reason string
		want   []any
		del    string
	}{
		{name: "create", value: `{"op":"c","before":null,"after":{"id":1,"a":"x"}}`, want: []any{"1", "x"}},
		{name: "update", value: `{"op":"u","before":{"id":1,"a":"x"},"after":{"id":1,"a":"y"}}`, want: []any{"1", "y"}},
		{name: "snapshot read", value: `{"op":"r","after":{"id":"7","a":null}}`, want: []any{"7", nil}},
		{name: "schema and payload", value: `{"schema":{"type":"struct"},"payload":{"op":"c","after":{"id":2,"a":"z"}}}`, want: []any{"2", "z"}},
		{name: "delete", value: `{"op":"d","before":{"id":3,"a":"x"},"after":null}`, del: "3"},
		{name: "delete by key", keyCol: true, key: "k3", value: `{"op":"d","before":null}`, del: "k3"},
		{name: "tombstone after a delete", key: "k3", value: "\x00nil", skip: true},
		{name: "unknown op", value: `{"op":"t","after":{"id":1}}`, reason: deadletter.ReasonEnvelope},
		{name: "op not a string", value: `{"op":1,"after":{"id":1}}`, reason: deadletter.ReasonEnvelope},
		{name: "no op", value: `{"after":{"id":1}}`, reason: deadletter.ReasonEnvelope},
		{name: "payload without op", value: `{"payload":{"after":{"id":1}}}`, reason: deadletter.ReasonEnvelope},
		{name: "create without after", value: `{"op":"c","before":null}`, reason: deadletter.ReasonEnvelope},
		{name: "update with null after", value: `{"op":"u","after":null}`, reason: deadletter.ReasonEnvelope},
		{name: "create without the key", value: `{"op":"c","after":{"a":"x"}}`, reason: deadletter.ReasonEventID},
		{name: "delete without before", value: `{"op":"d","after":null}`, reason: deadletter.ReasonEnvelope},
		{name: "delete without the key", value: `{"op":"d","before":{"a":"x"}}`, reason: deadletter.ReasonEventID},
		{name: "delete by an absent key", keyCol: true, value: `{"op":"d","before":{"id":1}}`, reason: deadletter.ReasonEventID},
		{name: "create with the key's one field", key: `{"id":1}`, value: `{"op":"c","after":{"id":1,"a":"x"}}`, want: []any{"1", "x"}},
		{name: "create with a wrapped key's one field", key: `{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":1}}`, value: `{"op":"c","after":{"id":1,"a":"x"}}`, want: []any{"1", "x"}},
		{name: "create with a text key", key: `k1`, value: `{"op":"c","after":{"id":1,"a":"x"}}`, want: []any{"1", "x"}},
		{name: "update by a part of a composite key", key: `{"tenant":2,"id":1}`, value: `{"op":"u","after":{"tenant":2,"id":1,"a":"y"}}`, reason: deadletter.ReasonEventID},
		{name: "delete by a part of a composite key", key: `{"tenant":2,"id":1}`, value: `{"op":"d","before":{"tenant":2,"id":1,"a":"x"}}`, reason: deadletter.ReasonEventID},
		{name: "delete by a part of a wrapped composite key", key: `{"schema":{"type":"struct","fields":[{"type":"int32","field":"tenant"},{"type":"int64","field":"id"}]},"payload":{"tenant":2,"id":1}}`, value: `{"op":"d","before":{"tenant":2,"id":1}}`, reason: deadletter.ReasonEventID},
		{name: "delete by a composite key as the key column", keyCol: true, key: `{"tenant":2,"id":1}`, value: `{"op":"d","before":{"tenant":2,"id":1}}`, del: `{"tenant":2,"id":1}`},
		{name: "not an object", value: `[1]`, reason: deadletter.ReasonEnvelope},
		{name: "invalid json", value: `{"op":`, reason: deadletter.ReasonDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) {
				c.Mode, c.Envelope, c.EventID = "upsert", "debezium", "id"
				c.Columns = []Column{{"id", "id"}, {"a", "a"}}
				if tt.keyCol {
					c.Columns[0].Source = "$key"
				}
			})
			r := &kgo.Record{Topic: "in"}
			if tt.key != "" {
				r.Key = []byte(tt.key)
			}
			if tt.value != "\x00nil" {
				r.Value = []byte(tt.value)
			}
			o, ok, err := s.toOp(r)
			if tt.reason != "" {
				var re *dlq.RecordError
				if !errors.As(err, &re) || re.Reason != tt.reason {
					t.Fatalf("err = %v, want reason %s", err, tt.reason)
				}
				return
			}
			if err != nil || ok == tt.skip {
				t.Fatalf("ok %v err %v, want skipped %v", ok, err, tt.skip)
			}
			if o.del != (tt.del != "") || (o.del && o.id != tt.del) {
				t.Fatalf("op %+v, want delete of %q", o, tt.del)
			}
			if tt.want != nil && fmt.Sprintf("%#v", o.row) != fmt.Sprintf("%#v", tt.want) {
				t.Fatalf("row\n%#v\nwant\n%#v", o.row, tt.want)
			}
		})
	}
}

// The sink's sessions are named after it in pg_stat_activity, unless the
// DSN names them.
func TestNameSessions(t *testing.T) {
	for _, tt := range []struct{ dsn, want string }{
		{"postgres://u@h/db", "exactly sink orders"},
		{"postgres://u@h/db?application_name=etl", "etl"},
	} {
		cfg, err := pgx.ParseConfig(tt.dsn)
		if err != nil {
			t.Fatal(err)
		}
		nameSessions(cfg.RuntimeParams, "orders")
		if got := cfg.RuntimeParams["application_name"]; got != tt.want {
			t.Errorf("%s: application_name %q, want %q", tt.dsn, got, tt.want)
		}
	}
}
