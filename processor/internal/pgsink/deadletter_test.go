package pgsink

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/topology"
)

// dlqMax is the dead-letter topic's max.message.bytes in these tests.
const dlqMax = 4000

// newDLQCluster starts a kfake cluster whose topic dlq takes records of at
// most dlqMax bytes, and points s's client at it.
func newDLQCluster(t *testing.T, s *Sink, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admCl.Close)
	maxBytes := strconv.Itoa(dlqMax)
	if _, err := kadm.NewClient(admCl).CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &maxBytes}, "dlq"); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	s.cl = cl
	return admCl
}

// readDLQ returns the n records of topic dlq.
func readDLQ(t *testing.T, seed *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed.OptValue(kgo.SeedBrokers).([]string)...), kgo.ConsumeTopics("dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read dlq after %d of %d records: %v", len(out), n, err)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// A dead letter refused as too large for the dead-letter topic is sent as
// its envelope in the same call; the others of the batch keep their
// values; an envelope refused too is fatal and names the record.
func TestProduceDeadLettersTooLarge(t *testing.T) {
	big := make([]byte, 6000) // random, so that compression does not shrink it below dlqMax
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	eventID := &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: errors.New("no event id")}
	tests := []struct {
		name      string
		values    [][]byte         // input records' values, at offsets 0, 1, ...
		re        *dlq.RecordError // nil: eventID
		wantErr   string           // "" for success
		envelopes map[int64]bool   // offsets whose dead letter is an envelope
	}{
		{name: "all fit", values: [][]byte{[]byte("a"), []byte("b")}, envelopes: map[int64]bool{}},
		{name: "one too large", values: [][]byte{[]byte("a"), big, []byte("c")}, envelopes: map[int64]bool{1: true}},
		{name: "alone too large", values: [][]byte{big}, envelopes: map[int64]bool{0: true}},
		{name: "envelope too large", values: [][]byte{[]byte("a"), big},
			re:      &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: errors.New(base64.StdEncoding.EncodeToString(big))},
			wantErr: "dead-letter topic dlq refused even the envelope of in/3@0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, nil)
			seed := newDLQCluster(t, s)
			re := tt.re
			if re == nil {
				re = eventID
			}
			dead := make([]deadLetter, len(tt.values))
			for i, v := range tt.values {
				dead[i] = s.newDeadLetter(&kgo.Record{Topic: "in", Partition: 3, Offset: int64(i), Key: []byte("k"), Value: v}, re)
			}
			err := s.produceDeadLetters(context.Background(), dead)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !kafkaconn.IsFatal(err) || !errors.Is(err, kerr.MessageTooLarge) {
					t.Fatalf("err %v, want a fatal error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := readDLQ(t, seed, len(tt.values))
			if len(got) != len(tt.values) {
				t.Fatalf("%d dead letters, want %d", len(got), len(tt.values))
			}
			for _, r := range got {
				off, _ := audit.Header(r, deadletter.HeaderSourceOffset)
				o, _ := strconv.ParseInt(off, 10, 64)
				omitted, isEnv := audit.Header(r, deadletter.HeaderValueOmitted)
				if isEnv != tt.envelopes[o] {
					t.Fatalf("dead letter of offset %d: envelope %v, want %v", o, isEnv, tt.envelopes[o])
				}
				if isEnv && (omitted != strconv.Itoa(len(big)) || r.Value != nil || string(r.Key) != "k") {
					t.Fatalf("envelope of offset %d: omitted %q, %d value bytes, key %q", o, omitted, len(r.Value), r.Key)
				}
				if !isEnv && string(r.Value) != string(tt.values[o]) {
					t.Fatalf("dead letter of offset %d: value %q, want %q", o, r.Value, tt.values[o])
				}
				if reason, _ := audit.Header(r, deadletter.HeaderReason); reason != deadletter.ReasonEventID {
					t.Fatalf("dead letter of offset %d: reason %q", o, reason)
				}
			}
			// What the batch counts is what was produced.
			for i := range dead {
				_, isEnv := audit.Header(dead[i].rec, deadletter.HeaderValueOmitted)
				if isEnv != tt.envelopes[int64(i)] {
					t.Fatalf("batch's dead letter %d: envelope %v, want %v", i, isEnv, tt.envelopes[int64(i)])
				}
			}
		})
	}
}

// A dead-letter topic the sink may not write to stops it (kafkaconn.IsFatal):
// no retry mends an ACL.
func TestProduceDeadLettersUnauthorized(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "dlq"), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "sink", "sink",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "dlq", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true},
			kfake.ACL{Resource: kmsg.ACLResourceTypeCluster, Name: "kafka-cluster", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationIdempotentWrite, Allow: true},
		))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := newTestSink(t, nil)
	s.cl = testClient(t, c, kgo.SASL(plain.Auth{User: "sink", Pass: "sink"}.AsMechanism()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dead := []deadLetter{s.newDeadLetter(&kgo.Record{Topic: "in", Value: []byte("v")}, &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: errors.New("no event id")})}
	err = s.produceDeadLetters(ctx, dead)
	if !errors.Is(err, kerr.TopicAuthorizationFailed) || !kafkaconn.IsFatal(err) {
		t.Fatalf("err %v, want a fatal TOPIC_AUTHORIZATION_FAILED", err)
	}
}

// How a broker's refusal of every dead letter ends the attempt: a fault
// of the record is tried as an envelope, and fatal when that is refused
// too; an invalid topic is fatal; an unexplained error fails the attempt,
// for writeBatch to retry.
func TestProduceDeadLettersRefused(t *testing.T) {
	tests := []struct {
		name      string
		code      *kerr.Error
		wantFatal bool
		wantMsg   string
	}{
		{"invalid record", kerr.InvalidRecord, true, "dead-letter topic dlq refused even the envelope of in/0@5"},
		{"invalid timestamp", kerr.InvalidTimestamp, true, "dead-letter topic dlq refused even the envelope of in/0@5"},
		{"invalid topic", kerr.InvalidTopicException, true, "produce dead letters to dlq"},
		{"unknown server error", kerr.UnknownServerError, false, "produce dead letters to dlq"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "dlq"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			produces := 0
			c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				produces++
				req := kreq.(*kmsg.ProduceRequest)
				resp := req.ResponseKind().(*kmsg.ProduceResponse)
				for _, rt := range req.Topics {
					st := kmsg.NewProduceResponseTopic()
					st.Topic, st.TopicID = rt.Topic, rt.TopicID
					for _, rp := range rt.Partitions {
						sp := kmsg.NewProduceResponseTopicPartition()
						sp.Partition, sp.ErrorCode = rp.Partition, tt.code.Code
						st.Partitions = append(st.Partitions, sp)
					}
					resp.Topics = append(resp.Topics, st)
				}
				return resp, nil, true
			})
			s := newTestSink(t, nil)
			s.cl = testClient(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			dead := []deadLetter{s.newDeadLetter(&kgo.Record{Topic: "in", Offset: 5, Value: []byte("v")}, &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: errors.New("no event id")})}
			err = s.produceDeadLetters(ctx, dead)
			if !errors.Is(err, tt.code) || kafkaconn.IsFatal(err) != tt.wantFatal || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err %v (fatal %v), want %v, fatal %v, containing %q", err, kafkaconn.IsFatal(err), tt.code, tt.wantFatal, tt.wantMsg)
			}
			if tt.wantFatal && IsTransient(err) && !kafkaconn.IsFatal(err) {
				t.Fatalf("err %v would be retried", err)
			}
		})
	}
}

// testClient returns a client on the kfake cluster c with opts, closed with
// the test.
func testClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

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
		{"the default positions table", func(c *Config) { c.DeadLetter, c.DeadLetterTable = "", "raw.exactly_positions" },
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
		{src: rec(7, []byte("k"), []byte("{bad")), re: &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: errors.New("bad \x00 json \xff")}},
		{src: rec(9, nil, nil), re: &dlq.RecordError{Reason: deadletter.ReasonPostgres, Err: pgErr}},
	}
	dead[1].src.Timestamp = time.UnixMilli(kafkaconn.NoTimestamp) // record_timestamp NULL
	b := newBatch()
	b.start[2] = position{current: "topic-id-2"}
	s := &Sink{cfg: Config{Sink: "pg"}}
	got := s.deadLetterArgs(b, dead)
	code := "22P02"
	want := []any{"pg", []string{"in", "in"}, []string{"topic-id-2", "topic-id-2"}, []int32{2, 2}, []int64{7, 9},
		[][]byte{[]byte("k"), nil}, [][]byte{[]byte("{bad"), nil},
		[]string{`[{"key":"h","value":"v"}]`, `[{"key":"h","value":"v"}]`}, []*time.Time{&ts, nil},
		[]string{deadletter.ReasonDecode, deadletter.ReasonPostgres}, []*string{nil, &code},
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
	d := s.newDeadLetter(&kgo.Record{Topic: "in"}, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: errors.New("x")})
	if d.rec != nil || d.src == nil || d.re == nil {
		t.Fatalf("dead letter %+v: want no Kafka record for a table", d)
	}
}
