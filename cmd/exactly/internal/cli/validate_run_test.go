package cli

import (
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

// TestValidateAcceptsWhatRunStarts: a file that validate accepts, run and
// sink start. Defaults, bounds and allowed values come from topology's
// spec on both sides; what the engine checks beyond them at start (codecs,
// the connection string, rules between settings, and each bound at its
// edge) must accept every file topology.Parse accepts: the examples and
// the edge cases here build every stage and sink with processor.New,
// without network.
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
