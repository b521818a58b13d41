package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/exactly-io/exactly/processor"
)

var statusCommand = command{
	summary: "Prints groups, positions, lag and hanging transactions.",
	desc: `Prints, for each stage and sink of a topology file, its consumer group's
state and members, the partitions each member holds, the last committed
position and the lag against the last stable offset (the read_committed
end) of every input partition. Stages are measured from their group's
committed offsets, sinks from the positions stored in Postgres. Then it
lists the transactions open on the stages' and sinks' input, output and
dead-letter partitions, and on stateful stages' changelogs, for longer
than their timeout (or --hanging-after):
each holds its partition's last stable offset, and read_committed
consumers wait behind it (KIP-664; exactly help operating, "Hanging
transactions", says how to abort one). It reads Kafka and Postgres and
changes nothing.

It exits 0 when every group could be read, 1 when any could not (the
report says why), 2 for bad flags or a bad topology file.

EXACTLY_BROKERS overrides kafka.brokers.`,
	run: cmdStatus,
}

func cmdStatus(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	path := topologyFlag(fs)
	name := fs.String("name", "", "report only the stage or sink `NAME` (default: all)")
	rf := registerReportFlags(fs, "print JSON instead of a table", 15*time.Second)
	if code, done := parseTopology(fs, args, path, "status", stderr); done {
		return code
	}
	ctx, f, adm, closeAdm, code, ok := loadAdmin(ctx, *path, *rf.timeout, "status", stderr)
	if !ok {
		return code
	}
	defer closeAdm()
	if rf.bad("status", stderr) {
		return exitUsage
	}
	rep, err := processor.Status(ctx, adm, f, processor.StatusOptions{Only: *name, HangingAfter: *rf.hangingAfter})
	if err != nil {
		fmt.Fprintln(stderr, "exactly status:", err)
		return exitFailure
	}
	if *rf.asJSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "exactly status:", err)
		return exitFailure
	}
	if rep.Failed() {
		return exitFailure
	}
	return exitOK
}
