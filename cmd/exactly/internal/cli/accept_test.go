package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

// acceptHead declares the topics of the edge cases below; stages and sinks
// follow it.
const acceptHead = `version: 1
kafka: { brokers: ["127.0.0.1:9092"], transaction_timeout: 10s }
topics:
  - { name: in, partitions: 1 }
  - { name: out, partitions: 1 }
  - { name: dlq, partitions: 1 }
`

// acceptSink is acceptHead and a sink pg reading out, on lines 7-10; the
// rest of the sink's settings follow it, from line 11.
const acceptSink = acceptHead + `sinks:
  - name: pg
    input: { topic: out }
    dead_letter: { topic: dlq }
`

// acceptEnv resolves every ${VAR} of the edge cases.
func acceptEnv(k string) (string, bool) {
	if k == "PG_DSN" {
		return "postgres://u@127.0.0.1:5432/db?sslmode=disable", true
	}
	return "", false
}

// TestValidateAcceptsWhatRunStarts: topology is the one authority on what a
// valid file is. Every file that topology.Parse accepts (the examples and
// the edge cases here) builds every stage with processor.New and every sink
// with processor.NewSink, without network.
func TestValidateAcceptsWhatRunStarts(t *testing.T) {
	dir := t.TempDir()
	schema := filepath.Join(dir, "order.avsc")
	if err := os.WriteFile(schema, []byte(`{"type":"record","name":"Order","fields":[{"name":"event_id","type":"string"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"defaults": acceptHead + `stages:
  - { name: s, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
`,
		"interval just below the transaction timeout": acceptHead + `stages:
  - { name: s, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq }, commit: { interval: 9999ms, max_records: 1 } }
`,
		"avro stage": acceptHead + `stages:
  - name: s
    input: { topic: in, format: json }
    output: { topic: out, format: avro, schema: order.avsc }
    dead_letter: { topic: dlq }
    key: event_id
`,
		"string and bytes stage": acceptHead + `stages:
  - { name: s, input: { topic: in, format: string }, output: { topic: out, format: bytes }, dead_letter: { topic: dlq } }
`,
		"sink defaults": acceptSink + `    postgres: { dsn: "${PG_DSN}", table: raw.events, event_id: event_id, columns: { event_id: event_id, body: $value } }
`,
		"sink upsert, delete, own positions table, string input": acceptHead + `sinks:
  - name: pg
    input: { topic: out, format: string }
    dead_letter: { topic: dlq }
    session_timeout: 6s
    commit: { interval: 1h, max_records: 1 }
    postgres:
      dsn: "${PG_DSN}"
      table: raw.events
      positions_table: other.positions
      event_id: id
      mode: upsert
      tombstones: delete
      columns: { id: $key, body: $value, t: $topic, p: $partition, o: $offset, at: $timestamp }
`,
		"sink session timeout at the heartbeat interval": acceptSink + `    session_timeout: 3s
    postgres: { dsn: "${PG_DSN}", table: raw.events, event_id: event_id, columns: { event_id: event_id, body: $value } }
`,
		"transaction timeout at the protocol's limit": strings.Replace(acceptHead, "transaction_timeout: 10s", "transaction_timeout: 2147483647ms", 1) + `stages:
  - { name: s, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
`,
		"sink bytes input, key=value dsn": acceptHead + `sinks:
  - name: pg
    input: { topic: out, format: bytes }
    dead_letter: { topic: dlq }
    postgres: { dsn: "host=127.0.0.1 dbname=db", table: raw.events, event_id: id, columns: { id: $key, body: $value } }
`,
	}
	examples, err := filepath.Glob("../../../../deploy/examples/*.yaml")
	if err != nil || len(examples) < 2 {
		t.Fatalf("examples: %v %v", examples, err)
	}
	for _, name := range examples {
		if strings.HasSuffix(name, ".test.yaml") {
			continue // a fixture of `exactly test`, not a topology
		}
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(name)] = string(data)
	}
	for name, src := range files {
		t.Run(name, func(t *testing.T) {
			f, err := topology.Parse(filepath.Join(dir, "t.yaml"), []byte(src), acceptEnv)
			if err != nil {
				t.Fatalf("topology.Parse: %v", err)
			}
			if len(f.Stages)+len(f.Sinks) == 0 {
				t.Fatal("no stage and no sink to build")
			}
			for i := range f.Stages {
				if _, err := processor.New(f, processor.Stages(f.Stages[i].Name), processor.InstanceID("i1")); err != nil {
					t.Errorf("validate accepts stage %s, processor.New rejects it: %v", f.Stages[i].Name, err)
				}
			}
			for i := range f.Sinks {
				if _, err := processor.New(f, processor.Sinks(f.Sinks[i].Name), processor.InstanceID("i1")); err != nil {
					t.Errorf("validate accepts sink %s, processor.New rejects it: %v", f.Sinks[i].Name, err)
				}
			}
		})
	}
}

// TestValidateRejectsWhatRunRejects: each rule that run or sink checks at
// start without network is reported by validate, at file:line:col and the
// field's path.
func TestValidateRejectsWhatRunRejects(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"commit interval equal to the transaction timeout", acceptHead + `stages:
  - { name: s, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq }, commit: { interval: 10s } }
`, "t.yaml:8:111: stages[0].commit.interval: must be below kafka.transaction_timeout 10s (got 10s)"},
		{"commit interval above the default transaction timeout", strings.Replace(acceptHead, ", transaction_timeout: 10s", "", 1) + `stages:
  - { name: s, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq }, commit: { interval: 1m } }
`, "t.yaml:8:111: stages[0].commit.interval: must be below kafka.transaction_timeout 30s (got 1m0s)"},
		{"sink types from a schema without avro", acceptHead + `sinks:
  - name: pg
    input: { topic: out, format: json }
    dead_letter: { topic: dlq }
    postgres: { dsn: "${PG_DSN}", table: raw.events, event_id: id, columns: { id: $key }, types: from_schema }
`, "t.yaml:11:98: sinks[0].postgres.types: from_schema needs input format avro (input format is \"json\")"},
		{"dsn pgx cannot parse", acceptSink + `    postgres: { dsn: "not a dsn", table: raw.events, event_id: id, columns: { id: $key } }
`, "t.yaml:11:22: sinks[0].postgres.dsn: not a valid connection string (want postgres://user@host:port/db?sslmode=... or key=value pairs)"},
		{"sink session timeout below the client's heartbeat interval", acceptSink + `    session_timeout: 2s
    postgres: { dsn: "${PG_DSN}", table: raw.events, event_id: id, columns: { id: $key } }
`, "t.yaml:11:22: sinks[0].session_timeout: must be at least 3s, the client's heartbeat interval (got 2s)"},
		{"sink session timeout beyond the protocol's int32 milliseconds", acceptSink + `    session_timeout: 9999h
    postgres: { dsn: "${PG_DSN}", table: raw.events, event_id: id, columns: { id: $key } }
`, "t.yaml:11:22: sinks[0].session_timeout: must be at most 596h31m23.647s (got 9999h0m0s)"},
		{"transaction timeout beyond the protocol's int32 milliseconds", strings.Replace(acceptHead, "transaction_timeout: 10s", "transaction_timeout: 9999h", 1) + `stages:
  - { name: s, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
`, "t.yaml:2:60: kafka.transaction_timeout: must be at most 596h31m23.647s (got 9999h0m0s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := topology.Parse("t.yaml", []byte(tc.src), acceptEnv)
			var errs topology.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("topology.Parse = %v, want topology.Errors", err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("topology.Parse:\n%s\nwant only:\n%s", got, tc.want)
			}
		})
	}
}
