package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/exactly-io/exactly/cmd/exactly/status"
)

var statusCommand = command{
	synopsis: "status --topology FILE [--name NAME] [--json] [--hanging-after D]",
	desc: `Prints, for each stage and sink of a topology file, its consumer group's
state and members, the partitions each member holds, the last committed
position and the lag against the last stable offset (the read_committed
end) of every input partition. Stages are measured from their group's
committed offsets, sinks from the positions stored in Postgres. Then it
lists the transactions open on the stages' and sinks' input, output and
dead-letter partitions for longer than their timeout (or --hanging-after):
each holds its partition's last stable offset, and read_committed
consumers wait behind it (KIP-664; the README says how to abort one). It
reads Kafka and Postgres and changes nothing.

It exits 0 when every group could be read, 1 when any could not (the
report says why), 2 for bad flags or a bad topology file.

EXACTLY_BROKERS overrides kafka.brokers.`,
	run: cmdStatus,
}

func cmdStatus(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	path := topologyFlag(fs)
	name := fs.String("name", "", "report only this stage or sink (default: all)")
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
	opts := []status.Option{status.HangingAfter(*rf.hangingAfter)}
	if *name != "" {
		opts = append(opts, status.Only(*name))
	}
	rep, err := status.Collect(ctx, adm, f, opts...)
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

// Flags returns the names of the flags of an exactly command ("run",
// "sink", "status", ...), read from the command's own flag set, so that
// deployment manifests can be checked against the binary. It returns nil
// for an unknown command.
func Flags(command string) []string {
	var out bytes.Buffer
	if run(context.Background(), append(strings.Fields(command), "--help"), io.Discard, &out) != exitOK {
		return nil
	}
	var names []string
	for _, line := range strings.Split(out.String(), "\n") {
		// flag.PrintDefaults: "  -name type" then an indented usage line.
		if rest, ok := strings.CutPrefix(line, "  -"); ok {
			names = append(names, strings.Fields(rest)[0])
		}
	}
	return names
}
