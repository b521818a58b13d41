package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

// printWarnings writes the topology file's warnings (a literal password,
// say) one a line.
func printWarnings(f *topology.File, w io.Writer) {
	for _, e := range f.Warnings() {
		fmt.Fprintln(w, "warning:", e)
	}
}

// logWarnings logs the topology file's warnings at warn level.
func logWarnings(f *topology.File, log *slog.Logger) {
	for _, e := range f.Warnings() {
		log.Warn("topology file: " + e.Error())
	}
}

// runProcess is what run and sink share once their flags are parsed: the
// engine built from f with opts (a problem is cmd's error, exit 2), the
// file's warnings logged, then before, the operations endpoints on
// metricsAddr, and the engine run until ctx ends or a stage or sink
// fails (exit 1).
func runProcess(ctx context.Context, f *topology.File, opts []processor.Option, before func(), metricsAddr, cmd string,
	log *slog.Logger, stderr io.Writer) int {
	logWarnings(f, log)
	eng, err := processor.New(f, append(opts, processor.WithLogger(log))...)
	if err != nil {
		fmt.Fprintf(stderr, "exactly %s: %v\n", cmd, err)
		return exitUsage
	}
	before()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := serveOps(ctx, metricsAddr, eng.Handler(), log); err != nil {
		fmt.Fprintf(stderr, "exactly %s: %v\n", cmd, err)
		return exitUsage
	}
	if err := eng.Run(ctx); err != nil {
		return exitFailure // logged by Run
	}
	return exitOK
}

// processFlags are the flags that run and sink share.
type processFlags struct {
	path, instance, metricsAddr, cpuProfile *string
	log                                     logFlags
	stopProfile                             func()
}

func registerProcessFlags(fs *flag.FlagSet) *processFlags {
	host, _ := os.Hostname()
	pf := &processFlags{
		path:     topologyFlag(fs),
		instance: fs.String("instance-id", host, "this instance's `ID`, stable across restarts"),
		metricsAddr: fs.String("metrics-addr", defaultMetricsAddr,
			"serve /metrics, /healthz and /readyz on `ADDR` (\"\" disables); it binds loopback by default"),
		cpuProfile:  fs.String("cpu-profile", "", "write a Go CPU profile of the run to `FILE` (read it with go tool pprof)"),
		stopProfile: func() {},
	}
	pf.log.register(fs)
	return pf
}

// parse parses args, checks the shared flags and starts the CPU profile
// that --cpu-profile asks for (the caller defers stopProfile); done with
// the exit code when the command ends here (help, or a usage error printed
// as cmd's).
func (pf *processFlags) parse(fs *flag.FlagSet, args []string, cmd string, stderr io.Writer) (log *slog.Logger, code int, done bool) {
	if code, done := parseTopology(fs, args, pf.path, cmd, stderr); done {
		return nil, code, true
	}
	if *pf.instance == "" {
		fmt.Fprintf(stderr, "exactly %s: --instance-id is required (the hostname is unknown)\n", cmd)
		return nil, exitUsage, true
	}
	log, err := pf.log.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "exactly %s: %v\n", cmd, err)
		return nil, exitUsage, true
	}
	if *pf.cpuProfile != "" {
		stop, err := startCPUProfile(*pf.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "exactly %s: --cpu-profile: %v\n", cmd, err)
			return nil, exitUsage, true
		}
		pf.stopProfile = stop
	}
	return log, 0, false
}

// parseTopology parses args, as parse does, and requires --topology FILE
// (read from path once parsed) and no arguments; if they are missing it
// says so as cmd's error and prints the usage. done is true when the
// command should return code.
func parseTopology(fs *flag.FlagSet, args []string, path *string, cmd string, stderr io.Writer) (code int, done bool) {
	if code, done := parse(fs, args); done {
		return code, true
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "exactly %s: --topology FILE is required, and no arguments\n", cmd)
		fs.Usage()
		return exitUsage, true
	}
	return exitOK, false
}
