package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

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

// buildNamed builds, in order, each of n items whose name(i) is only (every
// item when only is ""). The first error is printed as cmd's, and ok is
// false.
func buildNamed[T any](n int, only string, name func(i int) string, build func(i int) (T, error), cmd string, stderr io.Writer) (
	built []T, ok bool) {
	for i := range n {
		if only != "" && name(i) != only {
			continue
		}
		t, err := build(i)
		if err != nil {
			fmt.Fprintf(stderr, "exactly %s: %v\n", cmd, err)
			return nil, false
		}
		built = append(built, t)
	}
	return built, true
}

// processSetup is what run and sink share before they build their stages
// or sinks.
type processSetup struct {
	ctx     context.Context // watched by refused
	f       *topology.File
	fps     []processor.Failpoint // from the environment
	kopts   []kgo.Opt
	refused func() error // see watchKafka
	reg     *prometheus.Registry
}

// runSetup is what run and sink share: the file at path read by load,
// failpoints from the environment, Kafka options watched for a refused
// connection, the file's warnings logged, and a fresh metrics registry
// with the metrics newMetrics registers on it. When ok is false a problem
// was printed and code is the exit code: 2, or 1 when the metrics could not
// be registered.
func runSetup[M any](ctx context.Context, path string, load func(string) (*topology.File, error),
	newMetrics func(prometheus.Registerer) (M, error), cmd string, log *slog.Logger, stderr io.Writer) (
	s processSetup, metrics M, code int, ok bool) {
	f, err := load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return s, metrics, exitUsage, false
	}
	fps, ok := failpoints(cmd, stderr)
	if !ok {
		return s, metrics, exitUsage, false
	}
	kopts, ok := kafkaOptions(f, cmd, stderr)
	if !ok {
		return s, metrics, exitUsage, false
	}
	logWarnings(f, log)
	ctx, kopts, refused := watchKafka(ctx, kopts)
	s = processSetup{ctx: ctx, f: f, fps: fps, kopts: kopts, refused: refused, reg: newRegistry()}
	if metrics, err = newMetrics(s.reg); err != nil {
		fmt.Fprintf(stderr, "exactly %s: %v\n", cmd, err)
		return s, metrics, exitFailure, false
	}
	return s, metrics, exitOK, true
}

// failpoints returns the failpoints EXACTLY_FAILPOINT arms; a bad value
// is printed as cmd's error.
func failpoints(cmd string, stderr io.Writer) ([]processor.Failpoint, bool) {
	fps, err := processor.FailpointsFromEnv()
	if err != nil {
		fmt.Fprintf(stderr, "exactly %s: %s: %v\n", cmd, "EXACTLY_FAILPOINT", err)
		return nil, false
	}
	return fps, true
}

// processFlags are the flags that run and sink share.
type processFlags struct {
	path, instance, metricsAddr *string
	log                         logFlags
}

func registerProcessFlags(fs *flag.FlagSet) *processFlags {
	host, _ := os.Hostname()
	pf := &processFlags{
		path:     topologyFlag(fs),
		instance: fs.String("instance-id", host, "this instance's ID, stable across restarts"),
		metricsAddr: fs.String("metrics-addr", defaultMetricsAddr,
			`serve /metrics, /healthz and /readyz on this address ("" disables); it binds loopback by default`),
	}
	pf.log.register(fs)
	return pf
}

// parse parses args and checks the shared flags; done with the exit code
// when the command ends here (help, or a usage error printed as cmd's).
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
