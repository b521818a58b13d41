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
		fmt.Fprint(stderr, overview())
		return exitUsage
	}
	switch args[0] {
	case "topics":
		return cmdTopics(ctx, args[1:], stdout, stderr)
	case "--version":
		return versionCommand.start(ctx, "version", args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return help(ctx, strings.Join(args[1:], " "), stdout, stderr)
		}
		fmt.Fprint(stdout, overview())
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "exactly: unknown command %q\n\n%s", args[0], overview())
		return exitUsage
	}
	return c.start(ctx, args[0], args[1:], stdout, stderr)
}

// A command is one of exactly's commands. Its synopsis is made from the
// flags run declares (see synopsis), so that the two cannot disagree; its
// --help prints the synopsis, summary, desc and flags on stdout.
type command struct {
	summary     string     // one line, for `exactly help`
	operands    string     // what follows the flags in the synopsis: "[FIXTURE...]"
	oneOf       [][]string // flags of which one of each group is given: (--stage NAME | --sink NAME)
	fileOperand bool       // the topology file is --topology FILE or the one operand FILE
	desc        string
	run         func(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int
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
	"init":     &initCommand,
	"schema":   &schemaCommand,
}

// start runs c, named name, with args, on a flag set of its own.
func (c *command) start(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	return c.run(ctx, newFlags(name, c, stdout, stderr), args, stdout, stderr)
}

// topologyFlag declares --topology FILE, the one way every command names
// its topology file.
func topologyFlag(fs *flag.FlagSet) *string {
	return fs.String("topology", "", "the topology `FILE` (required)")
}

// parseFile parses args of a command that takes its topology file as
// --topology FILE or as its one argument (validate, topics create), not
// both.
func parseFile(fs *flag.FlagSet, args []string) (path string, code int, done bool) {
	flagPath := fs.String("topology", "", "the topology `FILE`, instead of the argument FILE")
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

// streams is a flag set's output: flag errors and usage errors go to
// stderr, --help to stdout (see parse).
type streams struct{ stdout, stderr io.Writer }

func (s *streams) Write(p []byte) (int, error) { return s.stderr.Write(p) }

// newFlags returns the flag set of command c, named name, whose Usage
// prints c's help on the flag set's output: stderr, or stdout for --help.
func newFlags(name string, c *command, stdout, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	out := &streams{stdout: stdout, stderr: stderr}
	fs.SetOutput(out)
	fs.Usage = func() { printHelp(fs.Output(), name, c, fs) }
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parse parses args; done is true when the command should return code
// (after --help or a flag error).
//
// Help asked for goes to stdout, with exit code 0; a flag error to stderr,
// with the help after it, and exit code 2.
func parse(fs *flag.FlagSet, args []string) (code int, done bool) {
	usage := fs.Usage
	fs.Usage = func() {} // printed below, on the stream that fits
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		out := fs.Output()
		if s, ok := out.(*streams); ok {
			fs.SetOutput(s.stdout)
			defer fs.SetOutput(out)
		}
		fs.Usage()
		return exitOK, true
	case err != nil:
		fs.Usage()
		return exitUsage, true
	}
	return exitOK, false
}

type logFlags struct{ level, format string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log `LEVEL`: debug, info, warn or error")
	fs.StringVar(&l.format, "log-format", "text", "log `FORMAT`: text or json")
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
	summary: "Runs the stages of a topology file until stopped.",
	desc: `Runs the stages of a topology file until SIGINT or SIGTERM, which commits
the open transaction and leaves the consumer group. Each stage consumes in
consumer group exactly-<stage> with transactional ID
exactly-<stage>-<instance-id>; run more instances with distinct instance IDs
to share a stage's partitions. Restart a crashed instance with the same
instance ID: it fences its predecessor and aborts its open transaction.

Unless GOMEMLIMIT is set, a process that runs one stage without state
sets Go's soft memory limit to 64 MiB (more with larger fetch_max_bytes
or max_buffered_bytes); see exactly help operating, "Memory".

EXACTLY_BROKERS overrides kafka.brokers. EXACTLY_FAILPOINT=NAME@N (names:
crash-before-commit, crash-after-offset-commit, crash-after-commit,
crash-during-restore) kills the process with SIGKILL at
the Nth transaction, for testing recovery.`,
	run: cmdRun,
}

func cmdRun(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	pf := registerProcessFlags(fs)
	stage := fs.String("stage", "", "run only the stage `NAME` (default: all stages)")
	guarantee := fs.String("guarantee", processor.ExactlyOnce,
		"`MODE`: exactly-once, or at-least-once: no transactions, offsets committed after the outputs are acknowledged; a crash then repeats records")
	stateDir := fs.String("state-dir", processor.DefaultStateDir(),
		"the `DIR`ectory for the local state of stateful steps (dedupe, aggregate, stateful): each stage instance uses <dir>/<stage>-<instance-id>, locked while it runs and kept across restarts with a checkpoint, so that a restart reads only what its changelog topic gained since")
	log, code, done := pf.parse(fs, args, "run", stderr)
	if done {
		return code
	}
	defer pf.stopProfile()
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
	return loadWith(topology.LoadDraft, path)
}

// loadWith is load with the loader given: topology.LoadDraft where the
// file will run, topology.LoadOffline where it is only checked.
func loadWith(loader func(string) (*topology.File, error), path string) (*topology.File, map[string]*transform.Pipeline, error) {
	f, err := loader(path)
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
	summary:     "Checks a topology file offline, every problem at its file:line:col.",
	fileOperand: true,
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
	// Offline: validate needs none of the secrets the file refers to (an
	// unset ${PG_DSN} is run's problem, reported when it starts).
	f, _, err := loadWith(topology.LoadOffline, path)
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
			return help(ctx, "topics create", stdout, stderr)
		}
		fmt.Fprintln(stderr, "exactly topics: the one subcommand is create")
		topicsCreateCommand.start(ctx, "topics create", []string{"--help"}, stderr, stderr)
		return exitUsage
	}
	return topicsCreateCommand.start(ctx, "topics create", args[1:], stdout, stderr)
}

var topicsCreateCommand = command{
	summary:     "Creates the topics a topology file declares.",
	fileOperand: true,
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
	summary: "Crashes and recovers a stage and a dedupe stage on an embedded cluster.",
	desc: `Runs the real stage engine on an embedded Kafka cluster, with no set-up,
in two halves. First it creates the topics of deploy/examples/orders.yaml,
produces events with a few malformed records among them, crashes the stage
in the middle of a transaction, restarts it, and reads everything back
read_committed: each valid event must come out once, each malformed record
as one dead letter. Then it runs the stage dedupe of
deploy/examples/orders-per-minute.yaml on 1000 distinct events of which
every fifth is resent with the same event ID, and checks that each distinct
event came out once and each resent copy was dropped. It exits 1 if any
event was lost or duplicated. The dedupe half needs a writable temporary
directory for its state (TMPDIR); without one it is skipped, and says so.`,
	run: cmdDemo,
}

func cmdDemo(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	events := fs.Int("events", 5000, "valid events to produce in the first half")
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
