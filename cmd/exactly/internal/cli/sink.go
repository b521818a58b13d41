package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

var sinkCommand = command{
	summary: "Loads topics into PostgreSQL tables until stopped.",
	desc: `Runs the Postgres sinks of a topology file until SIGINT or SIGTERM, which
commits the batch in hand and leaves the consumer group. Each sink consumes
read_committed in consumer group exactly-sink-<sink> and writes each batch of
rows together with its stream positions in one Postgres transaction; it
resumes from the positions stored in Postgres, never from Kafka's group
offsets. It creates the positions table and the target table when they are
missing. Run more instances with distinct instance IDs to share a sink's
partitions; restart a crashed instance with the same instance ID.

Unless GOMEMLIMIT is set, a process that runs one sink sets Go's soft
memory limit to 40 MiB (more with larger fetch_max_bytes), raised by the
bytes of its largest batch; see exactly help operating, "Memory".

EXACTLY_BROKERS overrides kafka.brokers. EXACTLY_FAILPOINT=NAME@N (names:
crash-before-db-commit, crash-after-db-commit) kills the process with SIGKILL
at the Nth database commit, for testing recovery.`,
	run: cmdSink,
}

func cmdSink(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	pf := registerProcessFlags(fs)
	name := fs.String("sink", "", "run only the sink `NAME` (default: all sinks)")
	log, code, done := pf.parse(fs, args, "sink", stderr)
	if done {
		return code
	}
	defer pf.stopProfile()
	f, err := topology.Load(*pf.path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	sinks := processor.Sinks()
	if *name != "" {
		sinks = processor.Sinks(*name)
	}
	opts := []processor.Option{sinks, processor.InstanceID(*pf.instance)}
	if !userMemoryLimit(os.LookupEnv) {
		opts = append(opts, processor.SinkMemoryLimit())
	}
	return runProcess(ctx, f, opts, func() {}, *pf.metricsAddr, "sink", log, stderr)
}
