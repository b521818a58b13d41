// Package cli is the exactly command line: `exactly run`, `sink`,
// `status`, `verify`, `reset`, `redrive`, `validate`, `topics create`,
// `test`, `demo`, `version` and `help`.
// cmd/exactly and the public cmd/exactly/cli (for custom binaries) are
// thin wrappers around it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/exactly-io/exactly/cmd/exactly/internal/plural"
	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/provision"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // a run failed, or the demo found a loss or duplicate
	exitUsage   = 2 // bad flags or a bad topology file
)

const usage = `exactly moves records between Kafka topics exactly once.

Usage:
  exactly run --topology FILE [--stage NAME] [--instance-id ID]
  exactly sink --topology FILE [--sink NAME] [--instance-id ID]
  exactly status --topology FILE [--name NAME] [--json]
  exactly verify --topology FILE --event-id FIELD [--json]
  exactly reset --topology FILE (--stage NAME | --sink NAME) --to-... [--execute]
  exactly redrive --topology FILE --stage NAME [--where CEL] [--max-redrives N]
  exactly validate [--topology] FILE
  exactly topics create [--topology] FILE
  exactly test --topology FILE [FIXTURE...]
  exactly demo
  exactly version [--json]
  exactly help [COMMAND]

Run 'exactly COMMAND --help' for a command's flags.
`

// Main runs the command line args (without the program name) until it is
// done or SIGINT or SIGTERM arrives, and returns the exit code: 0 success,
// 1 a failed run, 2 bad flags or a bad topology file.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal, restore the default action: a second
		// Ctrl-C ends the process at once, without the clean stop.
		<-ctx.Done()
		stop()
	}()
	return Run(ctx, args, os.Stdout, os.Stderr)
}

// Run is Main with a context and the output streams given; canceling ctx
// is a clean stop.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "topics":
		return cmdTopics(ctx, args[1:], stdout, stderr)
	case "--version":
		return versionCommand.start(ctx, "version", args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "exactly: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	return c.start(ctx, args[0], args[1:], stdout, stderr)
}

// A command is one of exactly's commands: its --help prints synopsis
// (after "Usage: exactly ") and desc before its flags; run declares its
// flags on fs, parses args with them and runs it.
type command struct {
	synopsis, desc string
	run            func(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int
}

// commands are the commands by name; topics takes create first, and
// cmdTopics starts topicsCreateCommand.
var commands = map[string]*command{
	"run":      &runCommand,
	"sink":     &sinkCommand,
	"status":   &statusCommand,
	"verify":   &verifyCommand,
	"reset":    &resetCommand,
	"redrive":  &redriveCommand,
	"validate": &validateCommand,
	"demo":     &demoCommand,
	"test":     &testCommand,
	"version":  &versionCommand,
}

// start runs c, named name, with args, on a flag set of its own.
func (c *command) start(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	return c.run(ctx, newFlags(name, c.synopsis, c.desc, stderr), args, stdout, stderr)
}

// topologyFlag declares --topology FILE, the one way every command names
// its topology file.
func topologyFlag(fs *flag.FlagSet) *string {
	return fs.String("topology", "", "topology file (required)")
}

// parseFile parses args of a command that takes its topology file as
// --topology FILE or as its one argument (validate, topics create), not
// both.
func parseFile(fs *flag.FlagSet, args []string) (path string, code int, done bool) {
	flagPath := topologyFlag(fs)
	if code, done := parse(fs, args); done {
		return "", code, true
	}
	switch {
	case *flagPath != "" && fs.NArg() == 0:
		return *flagPath, exitOK, false
	case *flagPath == "" && fs.NArg() == 1:
		return fs.Arg(0), exitOK, false
	}
	fs.Usage()
	return "", exitUsage, true
}

// reportFlags are the flags that status and verify share.
type reportFlags struct {
	asJSON                *bool
	timeout, hangingAfter *time.Duration
}

// registerReportFlags declares --json (its usage jsonUsage), --timeout
// (default timeout) and --hanging-after.
func registerReportFlags(fs *flag.FlagSet, jsonUsage string, timeout time.Duration) reportFlags {
	return reportFlags{
		asJSON:       fs.Bool("json", false, jsonUsage),
		timeout:      fs.Duration("timeout", timeout, "give up after this long"),
		hangingAfter: fs.Duration("hanging-after", 0, "report transactions open for longer than this (0: longer than their own transaction timeout)"),
	}
}

// bad says on stderr, for command cmd, what is wrong with the flags'
// values, if anything.
func (r reportFlags) bad(cmd string, stderr io.Writer) bool {
	if *r.hangingAfter < 0 {
		fmt.Fprintf(stderr, "exactly %s: --hanging-after must not be negative\n", cmd)
		return true
	}
	return false
}

// newFlags returns a flag set whose --help prints the command's synopsis
// and description before its flags.
func newFlags(name, synopsis, desc string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: exactly %s\n\n%s\n", synopsis, desc)
		if hasFlags(fs) {
			fmt.Fprintln(stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parse parses args; done is true when the command should return code
// (after --help or a flag error).
func parse(fs *flag.FlagSet, args []string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true
	}
	return exitOK, false
}

type logFlags struct{ level, format string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
}

// registerQuiet is register with log level error by default: for commands
// whose own output is the point.
func (l *logFlags) registerQuiet(fs *flag.FlagSet) {
	l.register(fs)
	fs.Lookup("log-level").DefValue = "error"
	_ = fs.Set("log-level", "error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", l.format)
}

var runCommand = command{
	synopsis: "run --topology FILE [--stage NAME] [--instance-id ID]",
	desc: `Runs the stages of a topology file until SIGINT or SIGTERM, which commits
the open transaction and leaves the consumer group. Each stage consumes in
consumer group exactly-<stage> with transactional ID
exactly-<stage>-<instance-id>; run more instances with distinct instance IDs
to share a stage's partitions. Restart a crashed instance with the same
instance ID: it fences its predecessor and aborts its open transaction.

Unless GOMEMLIMIT is set, a process that runs one stage without state
sets Go's soft memory limit to 64 MiB (more with larger fetch_max_bytes
or max_buffered_bytes); see the README, Operating exactly: Memory.

EXACTLY_BROKERS overrides kafka.brokers. EXACTLY_FAILPOINT=NAME@N (names:
crash-before-commit, crash-after-offset-commit, crash-after-commit,
crash-during-restore) kills the process with SIGKILL at
the Nth transaction, for testing recovery.`,
	run: cmdRun,
}

func cmdRun(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	pf := registerProcessFlags(fs)
	stage := fs.String("stage", "", "run only this stage (default: all stages)")
	guarantee := fs.String("guarantee", processor.ExactlyOnce,
		"exactly-once, or at-least-once: no transactions, offsets committed after the outputs are acknowledged; a crash then repeats records")
	stateDir := fs.String("state-dir", processor.DefaultStateDir(),
		"directory for the local state of stateful steps (dedupe, aggregate, stateful): each stage instance uses <dir>/<stage>-<instance-id>, locked while it runs and kept across restarts with a checkpoint, so that a restart reads only what its changelog topic gained since")
	cpuProfile := fs.String("cpu-profile", "", "write a Go CPU profile of the run to this file (read it with go tool pprof)")
	log, code, done := pf.parse(fs, args, "run", stderr)
	if done {
		return code
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintln(stderr, "exactly run: --cpu-profile:", err)
			return exitUsage
		}
		defer stop()
	}
	f, _, err := load(*pf.path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	opts := []processor.Option{processor.Stages(), processor.InstanceID(*pf.instance), processor.Guarantee(*guarantee), processor.StateDir(*stateDir)}
	var running []*topology.Stage
	for _, st := range f.StagesInOrder() {
		if *stage == "" || st.Name == *stage {
			running = append(running, st)
		}
	}
	if *stage != "" {
		opts[0] = processor.Stages(*stage)
	}
	return runProcess(ctx, f, opts, func() { setMemoryLimit(os.LookupEnv, running, log) }, *pf.metricsAddr, "run", log, stderr)
}

// load reads and validates a topology file and compiles its transforms,
// all before any network I/O. Errors are topology.Errors, one problem a
// line with its file:line:col.
//
// Every problem is reported at once: when the file has problems of its
// own, the transform steps without one are still compiled, so that their
// CEL errors come in the same list.
func load(path string) (*topology.File, map[string]*transform.Pipeline, error) {
	f, err := topology.LoadDraft(path)
	if err != nil {
		var errs topology.Errors
		if f == nil || !errors.As(err, &errs) {
			return nil, nil, err
		}
		return nil, nil, append(errs, draftStepErrors(f)...).Sorted()
	}
	pipelines, err := transform.Compile(f, nil)
	if err != nil {
		return nil, nil, err
	}
	return f, pipelines, nil
}

// draftStepErrors compiles the steps of draft, a file with problems
// (topology.LoadDraft), and returns the problems of the steps that had none
// of their own. A compiler that trips over what is missing in the draft
// adds nothing: the file's own problems come first.
func draftStepErrors(draft *topology.File) (errs topology.Errors) {
	defer func() {
		if recover() != nil {
			errs = nil
		}
	}()
	_, err := transform.Compile(draft, nil)
	errors.As(err, &errs)
	return errs
}

var validateCommand = command{
	synopsis: "validate [--topology] FILE",
	desc: `Checks a topology file without connecting to anything. It prints every
problem as file:line:col: field: message and exits 2, or prints a summary and
exits 0.`,
	run: cmdValidate,
}

func cmdValidate(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	path, code, done := parseFile(fs, args)
	if done {
		return code
	}
	f, _, err := load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	printWarnings(f, stderr)
	summary := plural.Count(len(f.Topics), "topic") + ", " + plural.Count(len(f.Stages), "stage")
	if len(f.Sinks) > 0 {
		summary += ", " + plural.Count(len(f.Sinks), "sink")
	}
	fmt.Fprintf(stdout, "%s: ok: %s\n", path, summary)
	for _, st := range f.StagesInOrder() {
		fmt.Fprintf(stdout, "  stage %s: %s (%s) -> %s (%s), %s, dead letters -> %s\n",
			st.Name, st.Input.Topic, st.Input.Format, strings.Join(st.OutputTopics(), ", "), st.Output.Format, plural.Count(len(st.Transform), "transform step"), st.DeadLetter.Topic)
	}
	for _, sk := range f.Sinks {
		dead := sk.DeadLetter.Topic
		if sk.DeadLetter.Table != "" {
			dead = "table " + sk.DeadLetter.Table
		}
		fmt.Fprintf(stdout, "  sink %s: %s (%s) -> postgres table %s, dead letters -> %s\n",
			sk.Name, sk.Input.Topic, sk.Input.Format, sk.Postgres.Table, dead)
	}
	return exitOK
}

func cmdTopics(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "create" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fmt.Fprintln(stdout, "Usage: exactly topics create [--topology] FILE\n\nCreates the topics a topology file declares.")
			return exitOK
		}
		fmt.Fprintln(stderr, "Usage: exactly topics create [--topology] FILE")
		return exitUsage
	}
	return topicsCreateCommand.start(ctx, "topics create", args[1:], stdout, stderr)
}

var topicsCreateCommand = command{
	synopsis: "topics create [--topology] FILE",
	desc: `Creates every topic the topology file declares that does not exist yet,
with its partitions, replication factor and configs. Existing topics are
left alone; a partition count that differs from the file is reported. Safe
to run again.`,
	run: cmdTopicsCreate,
}

func cmdTopicsCreate(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	path, code, done := parseFile(fs, args)
	if done {
		return code
	}
	ctx, f, adm, closeAdm, code, ok := loadAdmin(ctx, path, *timeout, "topics create", stderr)
	if !ok {
		return code
	}
	defer closeAdm()
	results, err := provision.CreateTopics(ctx, adm, f)
	for _, r := range results {
		state := "exists"
		if r.Created {
			state = "created"
		}
		line := fmt.Sprintf("%-8s %s (%s)", state, r.Topic, plural.Count(r.Partitions, "partition"))
		if r.Mismatch != "" {
			line += ": warning: " + r.Mismatch
		}
		fmt.Fprintln(stdout, line)
	}
	if err != nil {
		fmt.Fprintln(stderr, "exactly topics create:", strings.ReplaceAll(err.Error(), "\n", "\n  "))
		return exitFailure
	}
	return exitOK
}

var demoCommand = command{
	synopsis: "demo",
	desc: `Runs the real stage engine on an embedded Kafka cluster, with no set-up:
it creates the topics of deploy/examples/orders.yaml, produces events with a
few malformed records among them, crashes the stage in the middle of a
transaction, restarts it, and reads everything back read_committed. It exits
1 if any event was lost or duplicated.`,
	run: cmdDemo,
}

func cmdDemo(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	events := fs.Int("events", 5000, "valid events to produce")
	var lf logFlags
	lf.registerQuiet(fs)
	if code, done := parse(fs, args); done {
		return code
	}
	log, err := lf.logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "exactly demo:", err)
		return exitUsage
	}
	if err := processor.RunDemo(ctx, stdout, processor.DemoOptions{Events: *events, Logger: log}); err != nil {
		fmt.Fprintln(stderr, "exactly demo:", err)
		return exitFailure
	}
	return exitOK
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
