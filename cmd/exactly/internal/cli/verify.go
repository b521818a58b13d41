package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/exactly-io/exactly/cmd/exactly/internal/plural"
	"github.com/exactly-io/exactly/cmd/exactly/internal/progress"
	"github.com/exactly-io/exactly/processor"
)

var verifyCommand = command{
	summary: "Audits topics and tables for loss, duplicates and open transactions.",
	desc: `Audits a topology for exactly-once. It reads every input, output and
dead-letter topic with isolation.level=read_committed, and every sink table,
and accounts for each committed input record of each stage: processed (its
outputs, found by their exactly.source.* lineage headers), dead-lettered,
filtered (only in stages with a filter, explode, func or stateful step), deduplicated
(in a stage with a dedupe step: no output, and its event ID is in the output
from another input record), pending (at or
after the stage's committed group offset, or the sink's stored position), or
lost. It reports duplicates (an output or dead letter of one source written
twice, or an event ID more often in a stage's outputs than in its input),
dead letters by reason, rows missing from or extra in each sink table, and
every partition where an open transaction holds the last stable offset
back, with the transactions open there for longer than their timeout (or
--hanging-after): transactional ID, producer ID, partition, first offset and
for how long (KIP-664; exactly help operating, "Hanging transactions",
says how to abort one). Memory stays bounded: records are spilled to
temporary files in buckets and checked one bucket at a time. On a
terminal, a progress bar on stderr shows the offsets read of the total to
each partition's last stable offset, the rate and the time left; in a pipe
or with --json it stays off.

It exits 0 when all is exactly once, 1 when anything was lost, duplicated or
blocked (or verify could not finish), and 2 for bad flags or a bad file.`,
	run: cmdVerify,
}

func cmdVerify(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	path := topologyFlag(fs)
	field := fs.String("event-id", "", "the value `FIELD` holding the event ID, e.g. event_id or order.id (required)")
	rf := registerReportFlags(fs, "print the report as JSON", 10*time.Minute)
	openWait := fs.Duration("open-txn-wait", 10*time.Second, "how long an open transaction may hold a partition's last stable offset before it is reported")
	tmp := fs.String("temp-dir", "", "the `DIR` to spill to (default: the system temp dir)")
	noProgress := fs.Bool("no-progress", false, "show no progress bar (it shows only on a terminal, and not with --json)")
	if code, done := parse(fs, args); done {
		return code
	}
	if *path == "" || *field == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "exactly verify: --topology FILE and --event-id FIELD are required, and no arguments")
		fs.Usage()
		return exitUsage
	}
	if rf.bad("verify", stderr) {
		return exitUsage
	}
	f, _, ok := loadKafka(*path, "verify", stderr)
	if !ok {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *rf.timeout)
	defer cancel()
	// Progress on a terminal only: a pipe, a file or --json stays clean.
	bar := progress.ForTerminal(stderr, *rf.asJSON || *noProgress, "reading topics", -1)
	o := processor.VerifyOptions{EventID: *field, OpenTxnWait: *openWait, HangingAfter: *rf.hangingAfter, TempDir: *tmp}
	if bar != nil {
		o.Progress = bar
	}
	rep, err := processor.Verify(ctx, f, o)
	bar.Done()
	if err != nil {
		fmt.Fprintln(stderr, "exactly verify:", err)
		return exitFailure
	}
	if *rf.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "exactly verify:", err)
			return exitFailure
		}
	} else {
		printReport(stdout, rep, *rf.hangingAfter)
	}
	if !rep.OK {
		return exitFailure
	}
	return exitOK
}

func printReport(w io.Writer, rep *processor.VerifyReport, hangingAfter time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tin\tprocessed\tout\tdead-lettered\tfiltered\tdeduplicated\taggregated\tpending\tlost\tduplicates\torphans\t")
	for _, c := range rep.Stages {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", c.Name, c.In, c.Processed, c.Out, c.DeadLettered,
			c.Filtered, c.Deduplicated, c.Aggregated, c.Pending, c.Lost, c.Duplicates+c.EventIDDuplicates+c.OutputAndDeadLetter, c.Orphans)
	}
	_ = tw.Flush()
	if len(rep.Sinks) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "sink\tin\tdead-lettered\tpending\texpected rows\trows\tmissing\textra\tduplicates\tlost\t")
		for _, c := range rep.Sinks {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", c.Name, c.In, c.DeadLettered, c.Pending,
				c.Expected, c.Rows, c.Missing, c.Extra, c.DuplicateRows, c.Lost+c.Orphans)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(w)
	printResetSkips(w, rep)
	for _, c := range rep.Stages {
		if len(c.DeadLettersByReason) > 0 {
			fmt.Fprintf(w, "dead letters of stage %s: %s\n", c.Name, reasons(c.DeadLettersByReason))
		}
		if c.WindowResults > 0 {
			fmt.Fprintf(w, "stage %s: %s of its aggregate step, each of the inputs of one window and key (counted as aggregated)\n", c.Name,
				plural.Count(c.WindowResults, "output is a window result", "outputs are window results"))
		}
		if c.OutputDeleted > 0 {
			fmt.Fprintf(w, "stage %s: %s no output or dead letter left: retention deleted them from %s (not lost; its readers' positions tell whether they read them first)\n", c.Name,
				plural.Count(c.OutputDeleted, "input has", "inputs have"), strings.Join(append(slices.Clone(c.Outputs), c.DeadLetter), ", "))
		}
		if c.NoLineage > 0 {
			fmt.Fprintf(w, "stage %s: %s no lineage headers and %s not accounted for\n", c.Name,
				plural.Count(c.NoLineage, "output carries", "outputs carry"), plural.Noun(c.NoLineage, "was", "were"))
		}
		if c.OtherIncarnation > 0 {
			fmt.Fprintf(w, "stage %s: %s an input offset holding another record now (an earlier incarnation of %s, re-created): not counted as its outputs\n", c.Name,
				plural.Count(c.OtherIncarnation, "output or dead letter names", "outputs and dead letters name"), c.Input)
		}
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  stage %s: %s\n", c.Name, e)
		}
	}
	for _, c := range rep.Sinks {
		if len(c.DeadLettersByReason) > 0 {
			fmt.Fprintf(w, "dead letters of sink %s: %s", c.Name, reasons(c.DeadLettersByReason))
			if c.DeadLetterRepeats > 0 {
				fmt.Fprintf(w, " (%d repeated: sinks dead-letter at least once)", c.DeadLetterRepeats)
			}
			fmt.Fprintln(w)
		}
		if c.Note != "" {
			fmt.Fprintf(w, "sink %s: %s\n", c.Name, c.Note)
		}
		if c.InputDeleted > 0 {
			fmt.Fprintf(w, "sink %s: %s no input record left: retention deleted it from %s after the sink read it (not extra)\n", c.Name,
				plural.Count(c.InputDeleted, "row has", "rows have"), c.Input)
		}
		if c.DeadLetterDeleted > 0 {
			fmt.Fprintf(w, "sink %s: %s no row and no dead letter left: retention deleted the dead letter from %s (not missing)\n", c.Name,
				plural.Count(c.DeadLetterDeleted, "input has", "inputs have"), c.DeadLetter)
		}
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  sink %s: %s\n", c.Name, e)
		}
	}
	blocked := 0
	for _, p := range rep.Partitions {
		if p.Blocked {
			blocked++
		}
	}
	fmt.Fprintf(w, "partitions: %d read read_committed, %d blocked by an open transaction\n", len(rep.Partitions), blocked) // "partitions: N" reads for any N
	if len(rep.HangingTransactions) > 0 {
		_ = rep.WriteHangingTable(w, hangingAfter)
	}
	fmt.Fprintf(w, "records read: %d in %s\n", rep.Records, time.Duration(rep.Elapsed).Round(time.Millisecond))
	if rep.OK {
		var unchecked []string
		for _, c := range rep.Sinks {
			if !c.RowsChecked {
				unchecked = append(unchecked, c.Name)
			}
		}
		if len(unchecked) > 0 {
			// An OK must not read as a claim about rows it never compared.
			fmt.Fprintf(w, "OK: exactly once (no loss, no duplicate, no open transaction); rows of %s not compared (see above)\n", strings.Join(unchecked, ", "))
			return
		}
		fmt.Fprintln(w, "OK: exactly once (no loss, no duplicate, no open transaction)")
		return
	}
	fmt.Fprintln(w, "FAILED:")
	for _, p := range rep.Problems {
		fmt.Fprintln(w, "  "+p)
	}
}

func reasons(m map[string]int64) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
