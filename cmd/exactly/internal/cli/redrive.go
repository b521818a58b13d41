package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/exactly-io/exactly/cmd/exactly/internal/progress"
	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

var redriveCommand = command{
	summary: "Sends a stage's dead letters back to its input topic, exactly once.",
	desc: `Sends a stage's dead letters back to its input topic, exactly once. It reads
the stage's dead-letter topic read_committed in consumer group
exactly-redrive-<stage> and re-produces each dead letter's original record
(key, value, partition and its own headers, without the upstream stage's
lineage headers) to the input topic, in one Kafka transaction with the
group's offsets: a crash and a restart add each record once. The record is
written with the time of writing, so that the input topic's retention.ms
does not delete it before the stage reads it; its original timestamp goes
in the header exactly.redrive.timestamp (Unix milliseconds), which the
stage takes as the record's timestamp. It stops at the end of the dead-letter topic as it was
when it started, and prints what it did. Run it after fixing the cause (the
transform, the data's producer): the running stage then reads the records
again. It refuses (exit 2) a stage whose input topic another stage or sink
of the file also reads: that reader would get the records twice.

Each redriven record carries the header exactly.redrive.count (1 on the
first redrive). A dead letter whose count reached --max-redrives is not
redriven again but reported, and so are dead letters that cannot be
redriven: envelopes that left the value out because the dead letter was too
large (read those at their source offset). Dead letters of other stages or
sinks sharing the topic are left alone. Handled dead letters stay in the
dead-letter topic; the group's offsets mark them as done.

--where selects dead letters with a CEL bool expression over reason, error,
step, source_partition, source_offset, count, key, value (the JSON value
decoded, or its text) and headers, e.g. --where 'reason == "transform"'.

EXACTLY_BROKERS overrides kafka.brokers. EXACTLY_FAILPOINT=NAME@N (names:
crash-before-commit, crash-after-commit) kills the process with SIGKILL at
the Nth redrive transaction, for testing recovery.`,
	run: cmdRedrive,
}

func cmdRedrive(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	path := topologyFlag(fs)
	stage := fs.String("stage", "", "the stage `NAME` whose dead letters to redrive (required)")
	where := fs.String("where", "", "redrive only the dead letters for which the bool expression `CEL` is true (default: all)")
	maxRedrives := fs.Int("max-redrives", processor.DefaultMaxRedrives, "do not redrive a record redriven this many times already")
	noProgress := fs.Bool("no-progress", false, "never draw the progress bar (it is drawn on a terminal only)")
	var lf logFlags
	lf.register(fs)
	if code, done := parseTopology(fs, args, path, "redrive", stderr); done {
		return code
	}
	if *stage == "" || *maxRedrives < 1 {
		fmt.Fprintln(stderr, "exactly redrive: --stage NAME is required and --max-redrives must be at least 1")
		return exitUsage
	}
	log, err := lf.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "exactly redrive:", err)
		return exitUsage
	}
	f, err := topology.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	st, ok := f.Stage(*stage)
	if !ok {
		fmt.Fprintf(stderr, "exactly redrive: %s has no stage %q\n", *path, *stage)
		return exitUsage
	}
	bar := progress.ForTerminal(stderr, *noProgress, "redriving dead letters", -1)
	o := processor.RedriveOptions{Where: *where, MaxRedrives: *maxRedrives, Logger: log}
	if bar != nil {
		o.Progress = bar
	}
	rep, err := processor.Redrive(ctx, f, st.Name, o)
	bar.Done()
	if errors.Is(err, processor.ErrUsage) {
		// A refused --where: no report, as if it had run.
		fmt.Fprintln(stderr, "exactly redrive:", err)
		return exitUsage
	}
	rep.Print(stdout, st.DeadLetter.Topic, st.Input.Topic)
	if err != nil {
		fmt.Fprintln(stderr, "exactly redrive:", err)
		return exitFailure
	}
	return exitOK
}
