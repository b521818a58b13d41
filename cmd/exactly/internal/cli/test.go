package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/exactly-io/exactly/cmd/exactly/internal/testrun"
	"github.com/exactly-io/exactly/processor/transform"
)

var testCommand = command{
	summary:  "Runs the stages against fixture files on an embedded cluster.",
	operands: "[FIXTURE...]",
	desc: `Runs the stages of a topology file on an embedded Kafka cluster, with no
network, against fixture files: it produces each fixture's input records,
waits until every stage has committed all of its input, reads every topic
a stage writes read_committed, and compares the records with the
fixture's, keys and values byte for byte. It prints a diff and exits 1 on
any difference; exits 0 when every fixture passes.

FIXTURE defaults to the topology file with .yaml replaced by .test.yaml
(orders.yaml -> orders.test.yaml). Sinks are not run, and the file's TLS
and SASL settings are not used.

A fixture file:

  input:                         # records produced, in this order, before the stages start
    orders.raw:
      - { key: k-1, value: '{"event_id":"e-1"}', headers: { source: web } }
      - { value: null }           # a null value (a tombstone); no key means a null key
      - { value_base64: /w== }    # bytes that are not UTF-8 (key_base64 too)
      - { key: k-2, value: '{}', partition: 2 }   # default: the partition the key picks
  output:                        # expected records, per topic a stage writes
    orders.clean:
      - { key: e-1, value: '{"event_id":"e-1"}', headers: { source: web } }
  dead_letters:                  # expected dead letters, per dead-letter topic
    orders.dlq:
      - { reason: decode, value: null }   # reason: the exactly.dlq.reason header

Every topic a stage writes (outputs, route targets, dead-letter topics) is
compared; one the fixture does not list must stay empty ([] says so too).
Keys and values are compared byte for byte (null differs from ''), and the
headers whose names do not start with "exactly.". Partitions, offsets,
timestamps and the exactly.* headers are not compared. Records are listed
in input order: an output sorts by the input record it came from,
followed through chained stages, then by its place among that record's
outputs. A value no step changed leaves byte for byte; how a changed value
is written: exactly help values.`,
	run: cmdTest,
}

func cmdTest(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	path := topologyFlag(fs)
	timeout := fs.Duration("timeout", testrun.DefaultTimeout, "give up on a fixture after this long")
	var lf logFlags
	lf.registerQuiet(fs)
	if code, done := parse(fs, args); done {
		return code
	}
	if *path == "" {
		fs.Usage()
		return exitUsage
	}
	log, err := lf.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "exactly test:", err)
		return exitUsage
	}
	fixtures := fs.Args()
	if len(fixtures) == 0 {
		fixtures = []string{strings.TrimSuffix(strings.TrimSuffix(*path, ".yaml"), ".yml") + ".test.yaml"}
	}
	data, err := os.ReadFile(*path)
	if err != nil {
		fmt.Fprintln(stderr, "exactly test:", err)
		return exitUsage
	}
	failed := 0
	for _, fp := range fixtures {
		// A fresh parse for each fixture: a run takes the file's brokers.
		f, err := testrun.ParseTopology(*path, data, os.LookupEnv)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		// Compiled here for the exit code: a bad step is a usage error.
		if _, err := transform.Compile(f, nil); err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		fx, err := testrun.Load(fp)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		res, err := testrun.Run(ctx, f, fx, testrun.Options{Timeout: *timeout, Logger: log})
		switch {
		case errors.Is(err, testrun.ErrMismatch):
			failed++
			fmt.Fprintf(stdout, "FAIL %s: the records differ from the fixture (- expected, + got)\n", fp)
			res.WriteDiff(stdout)
		case errors.Is(err, testrun.ErrCannotRun):
			// Its messages name the fixture file and line already.
			fmt.Fprintf(stderr, "exactly test: %s\n", strings.ReplaceAll(err.Error(), "\n", "\n  "))
			return exitUsage
		case err != nil:
			fmt.Fprintf(stderr, "exactly test: %s: %s\n", fp, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			return exitFailure
		default:
			fmt.Fprintf(stdout, "ok   %s: %s\n", fp, res.Summary())
		}
	}
	if failed > 0 {
		return exitFailure
	}
	return exitOK
}
