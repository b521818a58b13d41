package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// example is the topology from the product documentation.
const example = `version: 1
kafka:
  brokers: ["127.0.0.1:9092"]
topics:
  - { name: orders.raw,   partitions: 3 }
  - { name: orders.clean, partitions: 3 }
  - { name: orders.dlq,   partitions: 1 }
stages:
  - name: clean
    input:  { topic: orders.raw,   format: json }
    output: { topic: orders.clean, format: json }
    dead_letter: { topic: orders.dlq }
    key: event_id                     # optional: output key = this top-level JSON field's value
    commit: { interval: 100ms, max_records: 10000 }
`

// head declares topics in, out and dlq on lines 1-7; stages start on line 9.
const head = `version: 1
kafka:
  brokers: ["127.0.0.1:9092"]
topics:
  - { name: in,  partitions: 1 }
  - { name: out, partitions: 1 }
  - { name: dlq, partitions: 1 }
`

// stage is a valid stage on lines 9-12.
const stage = `  - name: s
    input:  { topic: in }
    output: { topic: out }
    dead_letter: { topic: dlq }
`

// withSteps is a file of head and stage with the transform steps steps,
// which start on line 14.
func withSteps(steps string) string {
	return head + "stages:\n" + stage + "    transform:\n" + steps
}

// stepsCase is a file of withSteps's steps and the errors Parse must
// return for it, none for a valid file.
type stepsCase struct {
	name, steps string
	want        []string
}

// checkSteps runs a subtest for each case that parses withSteps(steps)
// and requires its errors (check).
func checkSteps(t *testing.T, tests []stepsCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check(t, withSteps(tc.steps), nil, tc.want...)
		})
	}
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

// messages returns the lines of err, or nil.
func messages(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error is %T, want Errors: %v", err, err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Error()
	}
	return out
}

func check(t *testing.T, src string, lookup func(string) (string, bool), want ...string) *File {
	t.Helper()
	f, err := Parse("t.yaml", []byte(src), lookup)
	got := messages(t, err)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if (f == nil) != (err != nil) {
		t.Fatalf("file %v with error %v", f, err)
	}
	return f
}

func TestParseExample(t *testing.T) {
	f := check(t, example, env(nil))
	want := &File{
		Version: 1,
		Kafka: Kafka{
			Brokers:            []string{"127.0.0.1:9092"},
			ClientID:           "exactly",
			TransactionTimeout: Duration{30 * time.Second},
		},
		Topics: []Topic{
			{Name: "orders.raw", Partitions: 3, ReplicationFactor: -1},
			{Name: "orders.clean", Partitions: 3, ReplicationFactor: -1},
			{Name: "orders.dlq", Partitions: 1, ReplicationFactor: -1},
		},
		Stages: []Stage{{
			Name:                "clean",
			Input:               Endpoint{Topic: "orders.raw", Format: "json"},
			Output:              Endpoint{Topic: "orders.clean", Format: "json"},
			DeadLetter:          DeadLetter{Topic: "orders.dlq"},
			Key:                 "event_id",
			Commit:              Commit{Interval: Duration{100 * time.Millisecond}, MaxRecords: 10000},
			OutputTimestamp:     OutputTimestampInput,
			UpstreamIdleTimeout: Duration{30 * time.Second},
			// Group settings default: 45s like a sink's, metadata every 30s.
			SessionTimeout: Duration{45 * time.Second},
			MetadataMaxAge: Duration{30 * time.Second},
			// Fetch sizes default to 2 MiB a fetch, 1 MiB a partition.
			FetchMaxBytes:          2 << 20,
			MaxPartitionFetchBytes: 1 << 20,
			// The producer holds at most 4 MiB unacknowledged.
			MaxBufferedBytes: 4 << 20,
		}},
		Path: "t.yaml",
	}
	f.pos = nil
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("got  %+v\nwant %+v", f, want)
	}
}

func TestParseFetchSizes(t *testing.T) {
	tests := []struct {
		name                string
		fields              string
		maxBytes, partBytes int32
	}{
		{"defaults", "", 2 << 20, 1 << 20},
		{"both written", "    fetch_max_bytes: 8388608\n    max_partition_fetch_bytes: 2097152\n", 8 << 20, 2 << 20},
		{"only fetch max, above the partition default", "    fetch_max_bytes: 52428800\n", 50 << 20, 1 << 20},
		// A partition's default share never exceeds the fetch.
		{"only fetch max, below the partition default", "    fetch_max_bytes: 65536\n", 64 << 10, 64 << 10},
		{"only partition", "    max_partition_fetch_bytes: 262144\n", 2 << 20, 256 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := check(t, head+"stages:\n"+stage+tt.fields, env(nil))
			s, _ := f.Stage("s")
			if s.FetchMaxBytes != tt.maxBytes || s.MaxPartitionFetchBytes != tt.partBytes {
				t.Errorf("fetch_max_bytes %d, max_partition_fetch_bytes %d; want %d, %d", s.FetchMaxBytes, s.MaxPartitionFetchBytes, tt.maxBytes, tt.partBytes)
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	src := head + "  - { name: big, partitions: 12, replication_factor: 3, config: { retention.ms: 1000, cleanup.policy: compact } }\n" +
		"stages:\n" + stage
	f := check(t, src, env(nil))
	s, ok := f.Stage("s")
	if !ok {
		t.Fatal("stage s not found")
	}
	if s.Input.Format != "json" || s.Output.Format != "json" || s.Key != "" {
		t.Errorf("endpoint defaults: %+v %+v key %q", s.Input, s.Output, s.Key)
	}
	if s.Commit.Interval.Duration != 100*time.Millisecond || s.Commit.MaxRecords != 10000 {
		t.Errorf("commit defaults: %+v", s.Commit)
	}
	if s.MaxBufferedBytes != 4<<20 {
		t.Errorf("max_buffered_bytes default: %d", s.MaxBufferedBytes)
	}
	set := check(t, src+"    max_buffered_bytes: 33554432\n", env(nil))
	if s, _ := set.Stage("s"); s.MaxBufferedBytes != 32<<20 {
		t.Errorf("max_buffered_bytes written 33554432, parsed %d", s.MaxBufferedBytes)
	}
	big, ok := f.Topic("big")
	if !ok {
		t.Fatal("topic big not found")
	}
	wantBig := Topic{Name: "big", Partitions: 12, ReplicationFactor: 3,
		Config: map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"}}
	if !reflect.DeepEqual(*big, wantBig) {
		t.Errorf("topic big = %+v, want %+v", *big, wantBig)
	}
	if _, ok := f.Stage("nope"); ok {
		t.Error("Stage(nope) found")
	}
	if _, ok := f.Topic("nope"); ok {
		t.Error("Topic(nope) found")
	}
}

func TestParseValidation(t *testing.T) {
	stages := func(s string) string { return head + "stages:\n" + s }
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"version missing", strings.TrimPrefix(head, "version: 1\n"),
			[]string{`t.yaml:1:1: version: required (set version: 1)`}},
		{"version 2", strings.Replace(head, "version: 1", "version: 2", 1),
			[]string{`t.yaml:1:10: version: unsupported version 2 (want 1)`}},
		{"no brokers", strings.Replace(head, `  brokers: ["127.0.0.1:9092"]`, `  client_id: me`, 1),
			[]string{`t.yaml:3:3: kafka.brokers: at least one broker is required (e.g. brokers: ["127.0.0.1:9092"], or set EXACTLY_BROKERS)`}},
		{"empty brokers", strings.Replace(head, `["127.0.0.1:9092"]`, `[]`, 1),
			[]string{`t.yaml:3:12: kafka.brokers: at least one broker is required (e.g. brokers: ["127.0.0.1:9092"], or set EXACTLY_BROKERS)`}},
		{"broker without port", strings.Replace(head, `["127.0.0.1:9092"]`, `["k1:9092", "k2"]`, 1),
			[]string{`t.yaml:3:24: kafka.brokers[1]: invalid broker address "k2": missing port in address (want host:port, e.g. 127.0.0.1:9092)`}},
		{"broker port not numeric", strings.Replace(head, `["127.0.0.1:9092"]`, `["k1:kafka"]`, 1),
			[]string{`t.yaml:3:13: kafka.brokers[0]: invalid broker address "k1:kafka": port is not a number (want host:port, e.g. 127.0.0.1:9092)`}},
		{"broker without host", strings.Replace(head, `["127.0.0.1:9092"]`, `[":9092"]`, 1),
			[]string{`t.yaml:3:13: kafka.brokers[0]: invalid broker address ":9092": missing host (want host:port, e.g. 127.0.0.1:9092)`}},
		{"transaction timeout too short", strings.Replace(head, "kafka:\n", "kafka:\n  transaction_timeout: 500ms\n", 1),
			[]string{`t.yaml:3:24: kafka.transaction_timeout: must be at least 1s (got 500ms)`}},
		{"transaction timeout beyond the wire's int32 milliseconds", strings.Replace(head, "kafka:\n", "kafka:\n  transaction_timeout: 600h\n", 1),
			[]string{`t.yaml:3:24: kafka.transaction_timeout: must be at most 596h31m23.647s (got 600h0m0s)`}},
		{"topic name missing", head + "  - { partitions: 1 }\n",
			[]string{`t.yaml:8:5: topics[3].name: required`}},
		{"topic name invalid", head + "  - { name: a/b, partitions: 1 }\n",
			[]string{`t.yaml:8:13: topics[3].name: invalid topic name "a/b": use only letters, digits, '.', '_' and '-'`}},
		{"topic name dot dot", head + `  - { name: "..", partitions: 1 }` + "\n",
			[]string{`t.yaml:8:13: topics[3].name: invalid topic name "..": "." and ".." are not allowed`}},
		{"topic name too long", head + "  - { name: " + strings.Repeat("x", 250) + ", partitions: 1 }\n",
			[]string{`t.yaml:8:13: topics[3].name: invalid topic name "` + strings.Repeat("x", 64) + `...": longer than 249 characters`}},
		{"topic duplicate", head + "  - { name: out, partitions: 2 }\n",
			[]string{`t.yaml:8:13: topics[3].name: duplicate topic "out" (first declared at line 6)`}},
		{"topic collision", head + "  - { name: a.b, partitions: 1 }\n  - { name: a_b, partitions: 1 }\n",
			[]string{`t.yaml:9:13: topics[4].name: topic "a_b" collides with "a.b" (Kafka treats '.' and '_' alike in topic names)`}},
		{"partitions missing", head + "  - { name: x }\n",
			[]string{`t.yaml:8:5: topics[3].partitions: required (number of partitions, at least 1)`}},
		{"partitions zero", head + "  - { name: x, partitions: 0 }\n",
			[]string{`t.yaml:8:28: topics[3].partitions: must be at least 1 (got 0)`}},
		{"replication factor zero", head + "  - { name: x, partitions: 1, replication_factor: 0 }\n",
			[]string{`t.yaml:8:51: topics[3].replication_factor: must be -1 (broker default) or at least 1 (got 0)`}},
		{"replication factor below -1", head + "  - { name: x, partitions: 1, replication_factor: -2 }\n",
			[]string{`t.yaml:8:51: topics[3].replication_factor: must be -1 (broker default) or at least 1 (got -2)`}},

		{"stage name missing", stages(strings.Replace(stage, "  - name: s\n    input:", "  - input: ", 1)),
			[]string{`t.yaml:9:5: stages[0].name: required`}},
		{"stage name empty", stages(strings.Replace(stage, "name: s", `name: ""`, 1)),
			[]string{`t.yaml:9:11: stages[0].name: must not be empty`}},
		{"stage name invalid", stages(strings.Replace(stage, "name: s", `name: "-s p"`, 1)),
			[]string{`t.yaml:9:11: stages[0].name: invalid stage name "-s p" (want 1-100 characters of A-Z, a-z, 0-9, '.', '_', '-', starting with a letter or digit)`}},
		{"stage duplicate", stages(stage + stage),
			[]string{`t.yaml:13:11: stages[1].name: duplicate stage "s" (first declared at line 9)`}},
		{"input topic not declared", stages(strings.Replace(stage, "topic: in ", "topic: nope", 1)),
			[]string{`t.yaml:10:22: stages[0].input.topic: topic "nope" is not declared (add it under topics:)`}},
		{"output topic not declared", stages(strings.Replace(stage, "topic: out", "topic: nope", 1)),
			[]string{`t.yaml:11:22: stages[0].output.topic: topic "nope" is not declared (add it under topics:)`}},
		{"dead letter topic not declared", stages(strings.Replace(stage, "topic: dlq", "topic: nope", 1)),
			[]string{`t.yaml:12:27: stages[0].dead_letter.topic: topic "nope" is not declared (add it under topics:)`}},
		{"input missing", stages(strings.Replace(stage, "    input:  { topic: in }\n", "", 1)),
			[]string{`t.yaml:9:5: stages[0].input: required (e.g. input: { topic: orders.raw, format: json })`}},
		{"output topic missing", stages(strings.Replace(stage, "{ topic: out }", "{ format: json }", 1)),
			[]string{`t.yaml:11:13: stages[0].output.topic: required`}},
		{"dead letter missing", stages(strings.Replace(stage, "    dead_letter: { topic: dlq }\n", "", 1)),
			[]string{`t.yaml:9:5: stages[0].dead_letter: required (e.g. dead_letter: { topic: orders.dlq })`}},
		{"dead letter topic missing", stages(strings.Replace(stage, "{ topic: dlq }", "{}", 1)),
			[]string{`t.yaml:12:18: stages[0].dead_letter.topic: required`}},
		{"format unknown", stages(strings.Replace(stage, "{ topic: in }", "{ topic: in, format: xml }", 1)),
			[]string{`t.yaml:10:34: stages[0].input.format: unknown format "xml" (valid: json, string, bytes, avro)`}},
		{"reads own output", stages(strings.Replace(stage, "topic: out", "topic: in", 1)),
			[]string{`t.yaml:11:22: stages[0].output.topic: stage reads and writes topic "in" (output must differ from input)`}},
		{"dead letter is input", stages(strings.Replace(stage, "topic: dlq", "topic: in", 1)),
			[]string{`t.yaml:12:27: stages[0].dead_letter.topic: dead letter topic "in" is also the stage's input topic`}},
		{"dead letter is output", stages(strings.Replace(stage, "topic: dlq", "topic: out", 1)),
			[]string{`t.yaml:12:27: stages[0].dead_letter.topic: dead letter topic "out" is also the stage's output topic`}},
		{"commit zero", stages(stage + "    commit: { interval: 0s, max_records: 0 }\n"),
			[]string{
				`t.yaml:13:25: stages[0].commit.interval: must be greater than 0 (got 0s)`,
				`t.yaml:13:42: stages[0].commit.max_records: must be at least 1 (got 0)`,
			}},
		{"commit negative interval", stages(stage + "    commit: { interval: -1s }\n"),
			[]string{`t.yaml:13:25: stages[0].commit.interval: must be greater than 0 (got -1s)`}},
		// The client refuses a commit interval not below the transaction
		// timeout when the stage starts: validate says so first.
		{"commit interval equal to the transaction timeout", strings.Replace(stages(stage+"    commit: { interval: 10s }\n"), "  brokers: [\"127.0.0.1:9092\"]\n", "  brokers: [\"127.0.0.1:9092\"]\n  transaction_timeout: 10s\n", 1),
			[]string{`t.yaml:14:25: stages[0].commit.interval: must be below kafka.transaction_timeout 10s (got 10s)`}},
		{"commit interval above the default transaction timeout", stages(stage + "    commit: { interval: 1m }\n"),
			[]string{`t.yaml:13:25: stages[0].commit.interval: must be below kafka.transaction_timeout 30s (got 1m0s)`}},
		{"commit bad duration", stages(stage + "    commit:\n      interval: 10 parsecs\n"),
			[]string{`t.yaml:14:17: stages[0].commit.interval: invalid duration "10 parsecs" (want a number and a unit such as 100ms, 5s or 1m)`}},
		{"key empty", stages(stage + `    key: ""` + "\n"),
			[]string{`t.yaml:13:10: stages[0].key: must be a non-empty field name (or leave key out)`}},
		{"key with string input", stages(strings.Replace(stage, "{ topic: in }", "{ topic: in, format: string }", 1) + "    key: id\n"),
			[]string{`t.yaml:13:10: stages[0].key: key needs input format json or avro, since the key is a field of the record's value (input format is "string")`}},
		{"cycle of two", stages(
			"  - { name: a, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }\n" +
				"  - { name: b, input: { topic: out }, output: { topic: in }, dead_letter: { topic: dlq } }\n"),
			[]string{`t.yaml:9:32: stages[0].input.topic: cycle: a -> b -> a`}},
		// Dead letters close a loop as outputs do: a record failing on
		// both stages would go round for ever.
		{"cycle through dead letters", stages(
			"  - { name: a, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }\n" +
				"  - { name: b, input: { topic: dlq }, output: { topic: out }, dead_letter: { topic: in } }\n"),
			[]string{`t.yaml:9:32: stages[0].input.topic: cycle through dead-letter topics (a record failing on every stage of it would loop for ever; exactly redrive retries dead letters a bounded number of times): a -> b -> a`}},
		{"cycle through a retry stage", stages(
			"  - { name: a, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }\n" +
				"  - { name: b, input: { topic: dlq }, output: { topic: in }, dead_letter: { topic: out } }\n"),
			[]string{`t.yaml:9:32: stages[0].input.topic: cycle through dead-letter topics (a record failing on every stage of it would loop for ever; exactly redrive retries dead letters a bounded number of times): a -> b -> a`}},
		{"unknown field", stages(stage + "    inptu: { topic: in }\n"),
			[]string{`t.yaml:13:5: stages[0].inptu: unknown field (valid: name, input, output, dead_letter, key, commit, output_timestamp, upstream_idle_timeout, transform, session_timeout, metadata_max_age, fetch_max_bytes, max_partition_fetch_bytes, max_buffered_bytes)`}},
		{"group settings out of range", stages(stage + "    session_timeout: 500ms\n    metadata_max_age: 2h\n"),
			[]string{
				`t.yaml:13:22: stages[0].session_timeout: must be at least 3s, the client's heartbeat interval (got 500ms)`,
				`t.yaml:14:23: stages[0].metadata_max_age: must be between 1s and 1h (got 2h0m0s)`,
			}},
		{"metadata max age zero", stages(stage + "    metadata_max_age: 0s\n"),
			[]string{`t.yaml:13:23: stages[0].metadata_max_age: must be between 1s and 1h (got 0s)`}},
		{"fetch max bytes below 1 KiB", stages(stage + "    fetch_max_bytes: 1023\n"),
			[]string{`t.yaml:13:22: stages[0].fetch_max_bytes: must be between 1024 (1 KiB) and 104857600 (100 MiB) bytes (got 1023)`}},
		{"fetch max bytes above 100 MiB", stages(stage + "    fetch_max_bytes: 104857601\n"),
			[]string{`t.yaml:13:22: stages[0].fetch_max_bytes: must be between 1024 (1 KiB) and 104857600 (100 MiB) bytes (got 104857601)`}},
		{"partition fetch bytes zero", stages(stage + "    max_partition_fetch_bytes: 0\n"),
			[]string{`t.yaml:13:32: stages[0].max_partition_fetch_bytes: must be at least 1024 (1 KiB) bytes (got 0)`}},
		// The default fetch_max_bytes (2 MiB) bounds a partition's share
		// too: raising one alone is refused, not silently clamped.
		{"partition fetch bytes above the default fetch max", stages(stage + "    max_partition_fetch_bytes: 4194304\n"),
			[]string{`t.yaml:13:32: stages[0].max_partition_fetch_bytes: must not exceed fetch_max_bytes 2097152 (got 4194304)`}},
		// Below 1 MiB the producer would refuse records its batches hold.
		{"max buffered bytes below 1 MiB", stages(stage + "    max_buffered_bytes: 1000012\n"),
			[]string{`t.yaml:13:25: stages[0].max_buffered_bytes: must be between 1048576 (1 MiB) and 1073741824 (1 GiB) bytes (got 1000012)`}},
		{"max buffered bytes above 1 GiB", stages(stage + "    max_buffered_bytes: 2147483648\n"),
			[]string{`t.yaml:13:25: stages[0].max_buffered_bytes: must be between 1048576 (1 MiB) and 1073741824 (1 GiB) bytes (got 2147483648)`}},
		{"partition fetch bytes above fetch max", stages(stage + "    fetch_max_bytes: 4096\n    max_partition_fetch_bytes: 8192\n"),
			[]string{`t.yaml:14:32: stages[0].max_partition_fetch_bytes: must not exceed fetch_max_bytes 4096 (got 8192)`}},
		{"unknown top-level field", "stage: []\n" + head,
			[]string{`t.yaml:1:1: stage: unknown field (valid: version, kafka, topics, stages, sinks)`}},
		{"type error", head + "  - { name: x, partitions: abc }\n",
			[]string{`t.yaml:8:28: topics[3].partitions: expected an integer, got "abc"`}},
		{"integer out of range", head + "  - { name: x, partitions: 3000000000 }\n",
			[]string{`t.yaml:8:28: topics[3].partitions: integer "3000000000" is out of range (-2147483648..2147483647)`}},
		{"float for integer", head + "  - { name: x, partitions: 1.5 }\n",
			[]string{`t.yaml:8:28: topics[3].partitions: expected an integer, got "1.5"`}},
		{"mapping expected", stages(strings.Replace(stage, "{ topic: in }", "in", 1)),
			[]string{`t.yaml:10:13: stages[0].input: expected a mapping, got "in"`}},
		{"sequence expected", strings.Replace(head, `["127.0.0.1:9092"]`, `127.0.0.1:9092`, 1),
			[]string{`t.yaml:3:12: kafka.brokers: expected a sequence, got "127.0.0.1:9092"`}},
		{"string expected", head + "  - { name: x, partitions: 1, config: { retention.ms: [1] } }\n",
			[]string{`t.yaml:8:55: topics[3].config.retention.ms: expected a string, got a sequence`}},
		{"duplicate key", stages(stage + "    name: t\n"),
			[]string{`t.yaml:13:5: stages[0].name: duplicate key (first defined at line 9)`}},
		{"duplicate config key", head + "  - { name: x, partitions: 1, config: { a: 1, a: 2 } }\n",
			[]string{`t.yaml:8:47: topics[3].config.a: duplicate key (first defined at line 8)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.src, env(nil), tt.want...)
		})
	}
}

func TestParseDocument(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"empty", "", []string{"t.yaml: empty topology file (want a mapping with version, kafka, topics and stages)"}},
		{"only comments", "# nothing yet\n", []string{"t.yaml: empty topology file (want a mapping with version, kafka, topics and stages)"}},
		{"null", "~\n", []string{"t.yaml: empty topology file (want a mapping with version, kafka, topics and stages)"}},
		{"sequence", "- a\n", []string{`t.yaml:1:1: topology must be a mapping with version, kafka, topics and stages (got a sequence)`}},
		{"scalar", "hello\n", []string{`t.yaml:1:1: topology must be a mapping with version, kafka, topics and stages (got "hello")`}},
		{"syntax", "version: 1\nkafka: [\n", []string{`t.yaml:3:1: invalid YAML: did not find expected node content`}},
		{"unquoted variable in flow sequence", "kafka: { brokers: [${KAFKA}] }\n",
			[]string{`t.yaml:1:21: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence that began at line 1, column 19) (quote values holding ${...} inside [...] or {...}: "${VAR}")`}},
		// A syntax error is reported where the parser stopped, line and
		// column, with the construct it was reading and where that began.
		{"bad indentation", "version: 1\ntopics:\n  - name: x\n   partitions: 3\n",
			[]string{`t.yaml:4:4: invalid YAML: did not find expected '-' indicator (while parsing a block collection that began at line 3, column 3)`}},
		{"unclosed flow sequence", "version: 1\nkafka:\n  brokers: [a:1\ntopics: []\n",
			[]string{`t.yaml:4:7: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence that began at line 3, column 12)`}},
		{"tab", "version: 1\nkafka:\n\tbrokers: [a]\n",
			[]string{`t.yaml:3:1: invalid YAML: found character that cannot start any token (a tab: YAML indents with spaces only)`}},
		{"key without colon", "version: 1\ntopics:\n  - name: x\n  bad\n",
			[]string{`t.yaml:5:1: invalid YAML: could not find expected ':' (while scanning a simple key that began at line 4, column 3)`}},
		{"unclosed quote", "version: 1\nkafka:\n  brokers: [\"a:1]\ntopics: []\n",
			[]string{`t.yaml:5:1: invalid YAML: found unexpected end of stream (while scanning a quoted scalar that began at line 3, column 13)`}},
		{"two documents", head + "---\n" + head, []string{`t.yaml:8:1: more than one YAML document (a topology file holds exactly one)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.src, env(nil), tt.want...)
		})
	}
}

// TestParseMultipleErrors checks that decode and validation problems from
// all over a file are reported together, in order.
func TestParseMultipleErrors(t *testing.T) {
	src := `version: 2
kafka:
  brokers: [localhost]
  transaction_timeout: soon
topics:
  - { name: a, partitions: many }
  - { name: a, partitions: 1 }
  - { name: b, partitions: 1, colour: red }
stages:
  - name: s
    input: { topic: a }
    output: { topic: missing, format: yaml }
    commit: { max_records: 0 }
  - name: t
    input: { topic: b }
    output: { topic: a }
    dead_letter: { topic: "${DLQ}" }
`
	check(t, src, env(nil),
		`t.yaml:1:10: version: unsupported version 2 (want 1)`,
		`t.yaml:3:13: kafka.brokers[0]: invalid broker address "localhost": missing port in address (want host:port, e.g. 127.0.0.1:9092)`,
		`t.yaml:4:24: kafka.transaction_timeout: invalid duration "soon" (want a number and a unit such as 100ms, 5s or 1m)`,
		`t.yaml:6:28: topics[0].partitions: expected an integer, got "many"`,
		`t.yaml:7:13: topics[1].name: duplicate topic "a" (first declared at line 6)`,
		`t.yaml:8:31: topics[2].colour: unknown field (valid: name, partitions, replication_factor, config)`,
		`t.yaml:10:5: stages[0].dead_letter: required (e.g. dead_letter: { topic: orders.dlq })`,
		`t.yaml:12:22: stages[0].output.topic: topic "missing" is not declared (add it under topics:)`,
		`t.yaml:12:39: stages[0].output.format: unknown format "yaml" (valid: json, string, bytes, avro)`,
		`t.yaml:13:28: stages[0].commit.max_records: must be at least 1 (got 0)`,
		`t.yaml:17:27: stages[1].dead_letter.topic: environment variable "DLQ" is not set`,
	)
}

func TestParseCycles(t *testing.T) {
	topics := `version: 1
kafka: { brokers: ["k:9092"] }
topics:
  - { name: t1, partitions: 1 }
  - { name: t2, partitions: 1 }
  - { name: t3, partitions: 1 }
  - { name: t4, partitions: 1 }
  - { name: t5, partitions: 1 }
  - { name: dlq, partitions: 1 }
stages:
`
	st := func(name, in, out string) string {
		return "  - { name: " + name + ", input: { topic: " + in + " }, output: { topic: " + out + " }, dead_letter: { topic: dlq } }\n"
	}
	tests := []struct {
		name   string
		stages string
		want   []string
	}{
		{"chain is fine", st("a", "t1", "t2") + st("b", "t2", "t3") + st("c", "t2", "t4"), nil},
		{"three stages", st("x", "t5", "t1") + st("a", "t1", "t2") + st("b", "t2", "t3") + st("c", "t3", "t1"),
			[]string{`t.yaml:12:32: stages[1].input.topic: cycle: a -> b -> c -> a`}},
		{"two separate cycles", st("a", "t1", "t2") + st("b", "t2", "t1") + st("c", "t3", "t4") + st("d", "t4", "t3"),
			[]string{
				`t.yaml:11:32: stages[0].input.topic: cycle: a -> b -> a`,
				`t.yaml:13:32: stages[2].input.topic: cycle: c -> d -> c`,
			}},
		{"two loops through one stage", st("a", "t1", "t2") + st("b", "t2", "t1") + st("c", "t2", "t1"),
			[]string{`t.yaml:11:32: stages[0].input.topic: cycle: a -> b -> a (also in this loop: c)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, topics+tt.stages, env(nil), tt.want...)
		})
	}
}

func TestStagesInOrder(t *testing.T) {
	tests := []struct {
		name   string
		stages []Stage
		want   []string
	}{
		{"empty", nil, []string{}},
		{"file order when independent", []Stage{
			{Name: "a", Input: Endpoint{Topic: "t1"}, Output: Endpoint{Topic: "t2"}},
			{Name: "b", Input: Endpoint{Topic: "t3"}, Output: Endpoint{Topic: "t4"}},
		}, []string{"a", "b"}},
		{"upstream first", []Stage{
			{Name: "load", Input: Endpoint{Topic: "clean"}, Output: Endpoint{Topic: "loaded"}},
			{Name: "enrich", Input: Endpoint{Topic: "raw"}, Output: Endpoint{Topic: "enriched"}},
			{Name: "clean", Input: Endpoint{Topic: "enriched"}, Output: Endpoint{Topic: "clean"}},
			{Name: "audit", Input: Endpoint{Topic: "raw"}, Output: Endpoint{Topic: "audit"}},
		}, []string{"enrich", "clean", "load", "audit"}},
		{"fan in", []Stage{
			{Name: "sink", Input: Endpoint{Topic: "m"}, Output: Endpoint{Topic: "z"}},
			{Name: "a", Input: Endpoint{Topic: "x"}, Output: Endpoint{Topic: "m"}},
			{Name: "b", Input: Endpoint{Topic: "y"}, Output: Endpoint{Topic: "m"}},
		}, []string{"a", "b", "sink"}},
		{"cycle last", []Stage{
			{Name: "a", Input: Endpoint{Topic: "t1"}, Output: Endpoint{Topic: "t2"}},
			{Name: "b", Input: Endpoint{Topic: "t2"}, Output: Endpoint{Topic: "t1"}},
			{Name: "c", Input: Endpoint{Topic: "t9"}, Output: Endpoint{Topic: "t8"}},
		}, []string{"c", "a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &File{Stages: tt.stages}
			got := []string{}
			for _, s := range f.StagesInOrder() {
				got = append(got, s.Name)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEnv(t *testing.T) {
	src := func(brokers, partitions string) string {
		return "version: 1\nkafka:\n  brokers: [" + brokers + "]\ntopics:\n  - { name: t, partitions: " + partitions + " }\n"
	}
	tests := []struct {
		name        string
		src         string
		vars        map[string]string
		want        []string // errors
		brokers     []string
		partitions  int32
		notInErrors string
	}{
		{name: "set", src: src(`"${KAFKA}"`, "1"), vars: map[string]string{"KAFKA": "k1:9092"},
			brokers: []string{"k1:9092"}, partitions: 1},
		{name: "inside text", src: src(`"${HOST}:${PORT}"`, "1"), vars: map[string]string{"HOST": "k1", "PORT": "9093"},
			brokers: []string{"k1:9093"}, partitions: 1},
		{name: "default", src: src(`"${KAFKA:-k2:9092}"`, `"${P:-4}"`),
			brokers: []string{"k2:9092"}, partitions: 4},
		{name: "set wins over default", src: src(`"${KAFKA:-k2:9092}"`, `"${P:-4}"`), vars: map[string]string{"KAFKA": "k3:1", "P": "8"},
			brokers: []string{"k3:1"}, partitions: 8},
		{name: "empty takes default", src: src(`"${KAFKA:-k2:9092}"`, "1"), vars: map[string]string{"KAFKA": ""},
			brokers: []string{"k2:9092"}, partitions: 1},
		{name: "dollar dollar", src: src(`"k$$1:9092"`, "1"),
			brokers: []string{"k$1:9092"}, partitions: 1},
		{name: "lone dollar kept", src: src(`"k$1:9092"`, "1"),
			brokers: []string{"k$1:9092"}, partitions: 1},
		{name: "unset", src: src(`"${KAFKA}"`, "1"),
			want: []string{`t.yaml:3:13: kafka.brokers[0]: environment variable "KAFKA" is not set`}},
		{name: "two unset in one scalar", src: src(`"${HOST}:${PORT}"`, "1"),
			want: []string{
				`t.yaml:3:13: kafka.brokers[0]: environment variable "HOST" is not set`,
				`t.yaml:3:13: kafka.brokers[0]: environment variable "PORT" is not set`,
			}},
		{name: "invalid reference", src: src(`"${1X}"`, "1"),
			want: []string{`t.yaml:3:13: kafka.brokers[0]: invalid environment variable reference "${1X}" (want ${NAME} or ${NAME:-default})`}},
		{name: "unterminated", src: src(`"${KAFKA"`, "1"),
			want: []string{`t.yaml:3:13: kafka.brokers[0]: unterminated ${ (write $$ for a literal $)`}},
		{name: "secret not shown in type error", src: src(`"k:1"`, `"${SECRET}"`), vars: map[string]string{"SECRET": "hunter2"},
			want:        []string{`t.yaml:5:28: topics[0].partitions: expected an integer, got "${SECRET}" (after environment expansion)`},
			notInErrors: "hunter2"},
		{name: "secret not shown in validation", src: src(`"${SECRET}"`, "1"), vars: map[string]string{"SECRET": "hunter2"},
			want:        []string{`t.yaml:3:13: kafka.brokers[0]: invalid broker address "${SECRET}" (after environment expansion): missing port in address (want host:port, e.g. 127.0.0.1:9092)`},
			notInErrors: "hunter2"},
		{name: "EXACTLY_BROKERS overrides", src: src(`"k1:9092"`, "1"), vars: map[string]string{"EXACTLY_BROKERS": " a:1, b:2 ,,"},
			brokers: []string{"a:1", "b:2"}, partitions: 1},
		{name: "EXACTLY_BROKERS makes file brokers irrelevant", src: src(`"${KAFKA}", nope`, "1"), vars: map[string]string{"EXACTLY_BROKERS": "a:1"},
			brokers: []string{"a:1"}, partitions: 1},
		{name: "EXACTLY_BROKERS empty is ignored", src: src(`"k1:9092"`, "1"), vars: map[string]string{"EXACTLY_BROKERS": " "},
			brokers: []string{"k1:9092"}, partitions: 1},
		{name: "EXACTLY_BROKERS invalid", src: src(`"k1:9092"`, "1"), vars: map[string]string{"EXACTLY_BROKERS": "a:1,secret-host"},
			want:        []string{`t.yaml: kafka.brokers[1]: invalid broker address in EXACTLY_BROKERS: missing port in address (want host:port)`},
			notInErrors: "secret-host"},
		{name: "EXACTLY_BROKERS only commas", src: src(`"k1:9092"`, "1"), vars: map[string]string{"EXACTLY_BROKERS": ","},
			want: []string{`t.yaml: kafka.brokers: EXACTLY_BROKERS lists no brokers (want host:port,host:port)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("t.yaml", []byte(tt.src), env(tt.vars))
			if got := messages(t, err); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if tt.notInErrors != "" && strings.Contains(err.Error(), tt.notInErrors) {
				t.Fatalf("error shows %q: %v", tt.notInErrors, err)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(f.Kafka.Brokers, tt.brokers) {
				t.Errorf("brokers = %q, want %q", f.Kafka.Brokers, tt.brokers)
			}
			if got := f.Topics[0].Partitions; got != tt.partitions {
				t.Errorf("partitions = %d, want %d", got, tt.partitions)
			}
		})
	}
}

func TestParseAnchors(t *testing.T) {
	// b's dead letters go to a topic of their own: into in, they would
	// close a loop through a (a cycle through dead-letter topics).
	src := head + `  - { name: b_dlq, partitions: 1 }
stages:
  - name: a
    input: { topic: in }
    output: { topic: out }
    dead_letter: &dl { topic: dlq }
    commit: &commit { interval: 1s, max_records: 5 }
  - <<: { dead_letter: *dl, commit: *commit }
    name: b
    input: { topic: out }
    output: { topic: dlq }
    dead_letter: { topic: b_dlq }
`
	f := check(t, src, env(nil))
	b, _ := f.Stage("b")
	if b.Commit.Interval.Duration != time.Second || b.Commit.MaxRecords != 5 {
		t.Errorf("merged commit = %+v", b.Commit)
	}
	if b.DeadLetter.Topic != "b_dlq" {
		t.Errorf("own key lost to merge: dead letter %q", b.DeadLetter.Topic)
	}

	bad := head + `stages:
  - name: a
    input: { topic: in }
    output: { topic: out }
    dead_letter: { topic: dlq }
    commit: &commit { interval: never }
  - name: b
    input: { topic: in }
    output: { topic: out }
    dead_letter: { topic: dlq }
    commit: *commit
`
	check(t, bad, env(nil),
		`t.yaml:13:33: stages[0].commit.interval: invalid duration "never" (want a number and a unit such as 100ms, 5s or 1m)`)
}

// TestParseAliasBomb checks that aliases cannot make Parse do unbounded
// work.
func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("x: &t { name: t, partitions: 1, config: {")
	for i := range 1000 {
		fmt.Fprintf(&b, "k%d: v, ", i)
	}
	b.WriteString("} }\ntopics: [")
	b.WriteString(strings.Repeat("*t, ", 1000))
	b.WriteString("]\n")
	_, err := Parse("t.yaml", []byte(b.String()), nil)
	if err == nil || !strings.Contains(err.Error(), "file too large: more than 200000 values once aliases are expanded") {
		t.Fatalf("got %v", err)
	}
}

func TestPosition(t *testing.T) {
	f := check(t, head+"stages:\n"+stage, env(nil))
	tests := []struct {
		path string
		want Position
	}{
		{"", Position{1, 1}},
		{"version", Position{1, 10}},
		{"topics[1]", Position{6, 5}},
		{"topics[1].name", Position{6, 13}},
		{"stages[0]", Position{9, 5}},
		{"stages[0].input.topic", Position{10, 22}},
		{"stages[0].dead_letter", Position{12, 18}},
		{"stages[0].commit", Position{}},
		{"nope", Position{}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := f.Position(tt.path); got != tt.want {
				t.Fatalf("Position(%q) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"full", &Error{File: "t.yaml", Pos: Position{7, 13}, Path: "a.b", Msg: "bad"}, "t.yaml:7:13: a.b: bad"},
		{"no position", &Error{File: "t.yaml", Path: "a.b", Msg: "bad"}, "t.yaml: a.b: bad"},
		{"line only", &Error{File: "t.yaml", Pos: Position{Line: 3}, Msg: "bad"}, "t.yaml:3: bad"},
		{"no path", &Error{File: "t.yaml", Pos: Position{1, 2}, Msg: "bad"}, "t.yaml:1:2: bad"},
		{"no file", &Error{Pos: Position{1, 2}, Path: "p", Msg: "bad"}, "1:2: p: bad"},
		{"bare", &Error{Msg: "bad"}, "bad"},
		{"errors", Errors{
			{File: "f", Pos: Position{1, 1}, Msg: "one"},
			{File: "f", Pos: Position{2, 1}, Msg: "two"},
		}, "f:1:1: one\nf:2:1: two"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}

	_, err := Parse("t.yaml", []byte(strings.Replace(head, "version: 1", "version: x", 1)), nil)
	var e *Error
	if !errors.As(err, &e) || e.Path != "version" || e.Pos != (Position{1, 10}) {
		t.Fatalf("errors.As(%v) = %+v", err, e)
	}
}

func TestLoad(t *testing.T) {
	t.Setenv("EXACTLY_BROKERS", "")
	t.Setenv("TOPOLOGY_TEST_DLQ", "orders.dlq")
	dir := t.TempDir()
	path := filepath.Join(dir, "topology.yaml")
	src := strings.Replace(example, "{ topic: orders.dlq }", `{ topic: "${TOPOLOGY_TEST_DLQ}" }`, 1)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Path != path || f.Stages[0].DeadLetter.Topic != "orders.dlq" {
		t.Fatalf("loaded %+v", f)
	}

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "load topology: ") {
		t.Fatalf("Load(missing) = %v", err)
	}
}

func TestDurationYAML(t *testing.T) {
	var d Duration
	if err := d.parseScalar("1m30s"); err != nil || d.Duration != 90*time.Second {
		t.Fatalf("parseScalar = %v, %v", d, err)
	}
	v, err := d.MarshalYAML()
	if err != nil || v != "1m30s" {
		t.Fatalf("MarshalYAML = %v, %v", v, err)
	}
}

// ItemPath names an element by its index in its list, and a value that is
// not an element of the list (a copy) by "[?]", never by a wrong index.
func TestItemPath(t *testing.T) {
	stages := []Stage{{Name: "a"}, {Name: "b"}}
	copyOfB := stages[1]
	for _, tt := range []struct {
		item *Stage
		want string
	}{
		{&stages[0], "stages[0]"},
		{&stages[1], "stages[1]"},
		{&copyOfB, "stages[?]"},
	} {
		if got := ItemPath("stages", stages, tt.item); got != tt.want {
			t.Errorf("ItemPath(%s) = %q, want %q", tt.item.Name, got, tt.want)
		}
	}
}
