package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

var initCommand = command{
	summary:  "Writes a starter topology file and its test fixture.",
	operands: "[DIR]",
	desc: `Writes topology.yaml, a starter topology with one stage, and
topology.test.yaml, its fixture, into DIR (default: the current
directory), which it creates if needed. The fixture passes as written:
exactly test --topology DIR/topology.yaml runs it on an embedded cluster.
With --sink, the file also has a sink that loads the stage's output into a
PostgreSQL table. It never overwrites a file: it exits 2 if either exists.
More complete files are in deploy/examples/recipes.`,
	run: cmdInit,
}

func cmdInit(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	withSink := fs.Bool("sink", false, "add a sink that loads the stage's output into PostgreSQL (DSN from PG_DSN)")
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "exactly init: at most one DIR")
		fs.Usage()
		return exitUsage
	}
	dir := "."
	if fs.NArg() == 1 {
		dir = fs.Arg(0)
	}
	files := []struct{ name, text string }{
		{"topology.yaml", starterTopology(*withSink)},
		{"topology.test.yaml", starterFixture},
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f.name)); !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintf(stderr, "exactly init: %s exists; remove it or give another DIR\n", filepath.Join(dir, f.name))
			return exitUsage
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "exactly init:", err)
		return exitFailure
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.text), 0o644); err != nil {
			fmt.Fprintln(stderr, "exactly init:", err)
			return exitFailure
		}
		fmt.Fprintln(stdout, "wrote", filepath.Join(dir, f.name))
	}
	topo := filepath.Join(dir, "topology.yaml")
	fmt.Fprintf(stdout, "\nNext:\n  exactly test --topology %s       # the fixture, no Kafka needed\n", topo)
	fmt.Fprintf(stdout, "  exactly topics create %s\n  exactly run --topology %s\n", topo, topo)
	if *withSink {
		fmt.Fprintf(stdout, "  PG_DSN=postgres://... exactly sink --topology %s\n", topo)
	}
	return exitOK
}

func starterTopology(withSink bool) string {
	var b strings.Builder
	b.WriteString(`# A starter topology, written by exactly init. One stage keeps the paid
# orders, adds a field, and keys them by customer; a record it cannot
# decode or transform goes to orders.dlq.
#
#   exactly test --topology topology.yaml    # runs topology.test.yaml, no Kafka needed
#   exactly topics create topology.yaml
#   exactly run --topology topology.yaml
#
# Every field: exactly help topology. Editors: exactly schema.
version: 1
kafka:
  brokers: ["127.0.0.1:9092"]      # EXACTLY_BROKERS overrides
topics:
  - { name: orders.raw,  partitions: 3 }
  - { name: orders.paid, partitions: 3 }
  - { name: orders.dlq,  partitions: 1 }
`)
	if withSink {
		b.WriteString("  - { name: orders.sink-dlq, partitions: 1 }\n")
	}
	b.WriteString(`stages:
  - name: paid
    input:  { topic: orders.raw,  format: json }
    output: { topic: orders.paid, format: json }
    dead_letter: { topic: orders.dlq }
    transform:
      - filter: 'value.status == "paid"'                         # false: dropped
      - set: { channel: 'has(value.channel) ? value.channel : "web"' }
      - key: value.customer                                     # missing: a dead letter
`)
	if withSink {
		b.WriteString(`sinks:
  - name: paid-pg                  # exactly sink --topology topology.yaml
    input: { topic: orders.paid, format: json }
    dead_letter: { topic: orders.sink-dlq }
    postgres:
      dsn: ${PG_DSN:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
      table: app.paid_orders       # created if missing
      event_id: id                 # the primary-key column
      columns: { id: id, customer: customer, body: $value }
`)
	}
	return b.String()
}

const starterFixture = `# The fixture of topology.yaml: exactly test --topology topology.yaml
# runs the stage on an embedded cluster and compares its records with
# these, keys and values byte for byte. Add your own cases.
input:
  orders.raw:
    - { key: o-1, value: '{"id":"o-1","customer":"c-7","status":"paid","amount":12.5}' }
    - { key: o-2, value: '{"id":"o-2","customer":"c-9","status":"pending","amount":3}' }   # filtered
    - { key: o-3, value: '{"id":"o-3","status":"paid","amount":5}' }                        # no customer
    - { key: o-4, value: 'not json' }
output:
  orders.paid:
    # A value a step changed is re-encoded; fields it did not touch keep their bytes.
    - { key: c-7, value: '{"id":"o-1","customer":"c-7","status":"paid","amount":12.5,"channel":"web"}' }
dead_letters:
  orders.dlq:
    - { reason: transform, key: o-3, value: '{"id":"o-3","status":"paid","amount":5}' }
    - { reason: decode, key: o-4, value: 'not json' }
`
