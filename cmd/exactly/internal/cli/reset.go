package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

// resetFlags are the flags of exactly reset.
type resetFlags struct {
	path, stage, sink  *string
	earliest, latest   *bool
	datetime, offsets  *string
	execute, keepState *bool
	timeout            *time.Duration
	target             processor.ResetTarget
}

var resetCommand = command{
	summary: "Moves where a stage or sink resumes; a dry run unless --execute.",
	oneOf:   [][]string{{"stage", "sink"}, {"to-earliest", "to-latest", "to-datetime", "to-offsets"}},
	desc: `Moves where a stage or a sink resumes reading its input topic: a stage's
consumer group offsets (exactly-<stage>), or a sink's positions stored in
Postgres. It prints the plan, per partition the current and the new
position, and changes nothing unless --execute is given.

It refuses while the group has members: stop every instance first. A killed
instance stays a member until its session_timeout passes.

Outputs already written stay: a reset to an earlier position makes the stage
or sink process those records again, so downstream sees them twice (a sink's
event-ID keys absorb the replay); a reset to a later position skips records.

A stage with a state store (dedupe, aggregate, stateful) keeps its state:
records read again meet it (a dedupe drops the event IDs it has seen). Its
reset is refused unless --keep-state is given; to reprocess with empty
state, delete and re-create its changelog topic first (the message says how).

No new position is past a partition's last stable offset (LSO), where a
transaction still open starts: a reset never splits a transaction. Once
it commits, all of its records are read; none if it aborts. The plan
names each open transaction.

--to-latest moves each partition to its last stable offset.
--to-datetime takes RFC 3339 (2024-05-01T12:00:00Z); each partition moves
to its first record at or after that time, or its last stable offset if
there is none or it is past it.
--to-offsets moves the partitions given and leaves the others as they are;
an offset past the last stable offset is refused.

--execute writes what it moved to the topic exactly-resets (created when
missing) in the transaction that applies it; exactly verify reads it to
report the records a reset skipped apart from records lost.

EXACTLY_BROKERS overrides kafka.brokers.`,
	run: cmdReset,
}

func cmdReset(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	f := resetFlags{
		path:      topologyFlag(fs),
		stage:     fs.String("stage", "", "reset the consumer group offsets of the stage `NAME`"),
		sink:      fs.String("sink", "", "reset the positions in Postgres of the sink `NAME`"),
		earliest:  fs.Bool("to-earliest", false, "to the first offset of each partition"),
		latest:    fs.Bool("to-latest", false, "to the last stable offset of each partition (skip every committed record there now)"),
		datetime:  fs.String("to-datetime", "", "to the first record at or after `TIME` (RFC 3339)"),
		offsets:   fs.String("to-offsets", "", "to these offsets: `P=O,...` (PARTITION=OFFSET[,PARTITION=OFFSET...])"),
		execute:   fs.Bool("execute", false, "apply the plan (default: print it only)"),
		keepState: fs.Bool("keep-state", false, "reset a stage with a state store (dedupe, aggregate, stateful) and keep its state: replayed records meet it"),
		timeout:   fs.Duration("timeout", 30*time.Second, "give up after this long"),
	}
	if code, done := parseTopology(fs, args, f.path, "reset", stderr); done {
		return code
	}
	if err := f.check(); err != nil {
		fmt.Fprintln(stderr, "exactly reset:", err)
		return exitUsage
	}
	file, kopts, ok := loadKafka(*f.path, "reset", stderr)
	if !ok {
		return exitUsage
	}
	ctx, adm, closeAdm, ok := kafkaAdmin(ctx, kopts, *f.timeout, "reset", stderr)
	if !ok {
		return exitFailure
	}
	defer closeAdm()

	var (
		plan         *processor.ResetPlan
		err          error
		stateWarning string // a stage with a state store: what a reset does not reset
	)
	switch {
	case *f.stage != "":
		st, ok := file.Stage(*f.stage)
		if !ok {
			fmt.Fprintf(stderr, "exactly reset: %s has no stage %q\n", *f.path, *f.stage)
			return exitUsage
		}
		plan, err = processor.PlanStageReset(ctx, adm, file, st.Name, f.target)
		if store := st.StateStore(); store != "" {
			// The state is not reset with the offsets (Kafka Streams'
			// reset tool deletes its internal topics for the same
			// reason): records read again meet what the store holds.
			stateWarning = fmt.Sprintf("stage %q keeps state (store %q, changelog topic %s): the records it reads again meet that state, "+
				"so a dedupe drops the event IDs it has seen and an aggregate dead-letters records of windows it has closed (reason late), "+
				"instead of writing their outputs again. To reprocess with empty state, stop the stage, delete the changelog topic "+
				"(kafka-topics.sh --delete --topic %s), re-create it with `exactly topics create %s`, then reset with --keep-state (the state kept is then empty); "+
				"--keep-state alone resets the offsets and keeps the state as it is",
				st.Name, store, topology.ChangelogTopic(st.Name, store), topology.ChangelogTopic(st.Name, store), *f.path)
		}
	default:
		if !slices.ContainsFunc(file.Sinks, func(s topology.Sink) bool { return s.Name == *f.sink }) {
			fmt.Fprintf(stderr, "exactly reset: %s has no sink %q\n", *f.path, *f.sink)
			return exitUsage
		}
		plan, err = processor.PlanSinkReset(ctx, adm, file, *f.sink, f.target)
	}
	if err != nil {
		fmt.Fprintln(stderr, "exactly reset:", err)
		if errors.Is(err, processor.ErrUsage) {
			return exitUsage
		}
		return exitFailure
	}
	// Checked after planning too, so that a dry run shows the plan and
	// says it could not be applied now.
	idleErr := plan.Idle(ctx)
	plan.Print(stdout)
	if idleErr != nil {
		fmt.Fprintln(stderr, "exactly reset:", idleErr)
		return exitFailure
	}
	if stateWarning != "" && !*f.keepState {
		fmt.Fprintln(stderr, "exactly reset: warning:", stateWarning)
		if *f.execute {
			fmt.Fprintln(stderr, "exactly reset: nothing changed")
			return exitUsage
		}
	}
	if !*f.execute {
		fmt.Fprintln(stdout, plan.Summary(false))
		return exitOK
	}
	if err := plan.Execute(ctx); err != nil {
		fmt.Fprintln(stderr, "exactly reset:", err)
		return exitFailure
	}
	fmt.Fprintln(stdout, plan.Summary(true))
	return exitOK
}

// check validates the flag combination and parses the target.
func (f *resetFlags) check() error {
	if (*f.stage == "") == (*f.sink == "") {
		return fmt.Errorf("give exactly one of --stage NAME and --sink NAME")
	}
	if *f.timeout <= 0 {
		return fmt.Errorf("--timeout must be positive")
	}
	t, err := processor.ParseResetTarget(*f.earliest, *f.latest, *f.datetime, *f.offsets)
	if err != nil {
		return err
	}
	f.target = t
	return nil
}
