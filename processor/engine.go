// Package processor is exactly's engine: it runs the stages and sinks of a
// topology file, exactly once, inside any Go program.
//
// A stage consumes its input topic read_committed in consumer group
// exactly-<stage>, transforms each record, and commits its outputs, its
// dead letters and the group's offsets in one Kafka transaction whose
// transactional ID is exactly-<stage>-<instance> (KIP-98, KIP-447). A sink
// consumes its input in consumer group exactly-sink-<sink> and writes each
// batch of rows with the stream positions it ends at in one PostgreSQL
// transaction. Run more engines with distinct instance IDs, on one machine
// or many, to share the partitions; restart a crashed one with the same
// instance ID.
//
// Beside the engine, the package holds the operations on a running or
// stopped topology that the exactly command line offers: Status, Verify,
// PlanStageReset and PlanSinkReset, Redrive and RunDemo.
package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
)

// Delivery guarantees of a stage (see Guarantee).
const (
	// ExactlyOnce commits outputs, dead letters and offsets in one Kafka
	// transaction: the default.
	ExactlyOnce = stage.ExactlyOnce
	// AtLeastOnce uses no transactions: offsets are committed after the
	// outputs are acknowledged, so a crash repeats records.
	AtLeastOnce = stage.AtLeastOnce
)

// Lineage headers: every output of a stage names the input record it came
// from (stage, topic, partition, offset) and its index among that
// record's outputs, so that verify can account for each input record.
const (
	HeaderLineageStage     = stage.HeaderLineageStage
	HeaderLineageTopic     = stage.HeaderLineageTopic
	HeaderLineagePartition = stage.HeaderLineagePartition
	HeaderLineageOffset    = stage.HeaderLineageOffset
	HeaderLineageIndex     = stage.HeaderLineageIndex
)

// Engine runs stages and sinks of one topology file. Build it with New.
type Engine struct {
	log      *slog.Logger
	reg      *prometheus.Registry
	runners  []runner
	refused  atomic.Pointer[error] // a connection Kafka refused for good
	cancel   atomic.Pointer[context.CancelFunc]
	warnTick time.Duration // how often Run asks Ready, for the not-ready log
}

// runner is a built stage or sink.
type runner struct {
	kind  string // "stage" or "sink", in logs
	run   func(ctx context.Context) error
	ready func() error
}

// Option configures an Engine.
type Option func(*config)

type config struct {
	stages, sinks []string
	onlyStages    bool // Stages was given
	onlySinks     bool // Sinks was given
	all           bool // neither was given: the whole file
	instance      string
	stateDir      string
	guarantee     string
	log           *slog.Logger
	reg           *prometheus.Registry
	kopts         []kgo.Opt
	transforms    *transform.Registry
	sinkMemLimit  bool
}

// Stages runs the stages named, or every stage when none is named, and no
// sink unless Sinks is given too. Without Stages and Sinks, an engine runs
// every stage and every sink of the file.
func Stages(names ...string) Option {
	return func(c *config) { c.onlyStages, c.stages = true, append(c.stages, names...) }
}

// Sinks runs the sinks named, or every sink when none is named, and no
// stage unless Stages is given too.
func Sinks(names ...string) Option {
	return func(c *config) { c.onlySinks, c.sinks = true, append(c.sinks, names...) }
}

// InstanceID names this instance, stable across restarts: the hostname,
// say, or a pod's name. It is part of each stage's transactional ID, so a
// restarted instance fences its predecessor at once. Default: the hostname.
func InstanceID(id string) Option { return func(c *config) { c.instance = id } }

// StateDir is the directory for the local state of stateful steps
// (dedupe, aggregate, stateful): each stage instance uses
// <dir>/<stage>-<instance>, locked while it runs and kept across restarts
// with a checkpoint. Default: DefaultStateDir().
func StateDir(dir string) Option { return func(c *config) { c.stateDir = dir } }

// DefaultStateDir is the state directory of an engine without StateDir:
// exactly-state in the system's temporary directory.
func DefaultStateDir() string { return stage.DefaultStateDir() }

// Guarantee is the delivery guarantee of the stages, ExactlyOnce (the
// default) or AtLeastOnce.
func Guarantee(g string) Option { return func(c *config) { c.guarantee = g } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// WithRegistry registers the engine's metrics on reg, which Handler
// serves. The default is a fresh registry with the Go runtime and process
// collectors.
func WithRegistry(reg *prometheus.Registry) Option { return func(c *config) { c.reg = reg } }

// WithKafkaOptions appends franz-go options to every Kafka client the
// engine builds, after those of the file's kafka settings (a kgo.Dialer,
// say).
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(c *config) { c.kopts = append(c.kopts, opts...) }
}

// WithTransforms compiles the `func:` and `stateful:` steps of the file
// with the Go transforms of reg; the default is transform.Default, where
// transform.Register puts them.
func WithTransforms(reg *transform.Registry) Option { return func(c *config) { c.transforms = reg } }

// SinkMemoryLimit has an engine that runs one sink and nothing else set
// Go's soft memory limit (runtime/debug.SetMemoryLimit) for the process,
// from the sink's fetch_max_bytes and raised by the bytes of the largest
// batch it has written (the rule is in cmd/exactly/docs/operating.md,
// "The soft memory limit"), so that the collector runs before the heap
// doubles what is live and never thrashes on a batch of large records.
// `exactly sink` sets it unless GOMEMLIMIT is set.
func SinkMemoryLimit() Option { return func(c *config) { c.sinkMemLimit = true } }

// New validates f and builds the stages and sinks to run. It does no
// network I/O. It reads the files f's kafka settings name (a CA, a
// password file) now.
func New(f *topology.File, opts ...Option) (*Engine, error) {
	if f == nil {
		return nil, errors.New("no topology file")
	}
	c := config{log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&c)
	}
	if c.instance == "" {
		c.instance, _ = os.Hostname()
		if c.instance == "" {
			return nil, errors.New("no instance ID, and the hostname is unknown")
		}
	}
	if !c.onlyStages && !c.onlySinks {
		c.onlyStages, c.onlySinks, c.all = true, true, true
	}
	fps, err := failpoint.ParseFailpoints(os.Getenv(failpoint.FailpointEnv))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", failpoint.FailpointEnv, err)
	}
	kopts, err := kafkaconn.Options(f.Kafka)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	e := &Engine{log: c.log, reg: c.reg, warnTick: 5 * time.Second}
	if e.reg == nil {
		e.reg = prometheus.NewRegistry()
		e.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// A connection error that no retry mends (a refused SASL password, an
	// untrusted certificate) stops Run: franz-go retries it forever.
	kopts = append(kopts, kgo.WithHooks(kafkaconn.FatalHook(func(err error) {
		e.refused.Store(&err)
		if cancel := e.cancel.Load(); cancel != nil {
			(*cancel)()
		}
	})))
	kopts = append(kopts, c.kopts...)
	if c.onlyStages {
		if err := e.addStages(f, &c, fps, kopts); err != nil {
			return nil, err
		}
	}
	if c.onlySinks {
		if err := e.addSinks(f, &c, fps, kopts); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// addStages builds the stages c selects, in the file's order.
func (e *Engine) addStages(f *topology.File, c *config, fps []failpoint.Failpoint, kopts []kgo.Opt) error {
	if err := missing(f.Path, "stage", c.stages, func(n string) bool { _, ok := f.Stage(n); return ok }); err != nil {
		return err
	}
	var sel []*topology.Stage
	for _, st := range f.StagesInOrder() {
		if len(c.stages) == 0 || slices.Contains(c.stages, st.Name) {
			sel = append(sel, st)
		}
	}
	if len(sel) == 0 {
		if c.all {
			return nil // the whole file: it may hold sinks only
		}
		return fmt.Errorf("%s declares no stages", f.Path)
	}
	pipelines, err := transform.Compile(f, c.transforms)
	if err != nil {
		return err
	}
	m, err := stage.NewMetrics(e.reg)
	if err != nil {
		return err
	}
	for _, st := range sel {
		cfg := stage.StageConfig(f, st, c.instance)
		cfg.Guarantee, cfg.StateDir = c.guarantee, c.stateDir
		s, err := stage.New(cfg, stage.WithLogger(c.log), stage.WithFailpoints(fps...), stage.WithTransform(pipelines[st.Name]),
			stage.WithMetrics(m), stage.WithKafkaOptions(kopts...))
		if err != nil {
			return err
		}
		e.runners = append(e.runners, runner{kind: "stage", run: s.Run, ready: s.Ready})
	}
	return nil
}

// addSinks builds the sinks c selects, in the file's order.
func (e *Engine) addSinks(f *topology.File, c *config, fps []failpoint.Failpoint, kopts []kgo.Opt) error {
	has := func(n string) bool {
		return slices.ContainsFunc(f.Sinks, func(s topology.Sink) bool { return s.Name == n })
	}
	if err := missing(f.Path, "sink", c.sinks, has); err != nil {
		return err
	}
	var sel []*topology.Sink
	for i := range f.Sinks {
		if len(c.sinks) == 0 || slices.Contains(c.sinks, f.Sinks[i].Name) {
			sel = append(sel, &f.Sinks[i])
		}
	}
	if len(sel) == 0 {
		switch {
		case !c.all:
			return fmt.Errorf("%s declares no sinks", f.Path)
		case len(e.runners) == 0:
			return fmt.Errorf("%s declares no stages and no sinks", f.Path)
		}
		return nil // the whole file: it holds stages only
	}
	m, err := pgsink.NewMetrics(e.reg)
	if err != nil {
		return err
	}
	opts := []pgsink.Option{pgsink.WithLogger(c.log), pgsink.WithFailpoints(fps...), pgsink.WithMetrics(m), pgsink.WithKafkaOptions(kopts...)}
	if c.sinkMemLimit && len(sel) == 1 && len(e.runners) == 0 {
		opts = append(opts, pgsink.WithMemoryLimit(func(n int64) { debug.SetMemoryLimit(n) }))
	}
	for _, sk := range sel {
		s, err := pgsink.New(pgsink.SinkConfig(f, sk, c.instance), opts...)
		if err != nil {
			return err
		}
		e.runners = append(e.runners, runner{kind: "sink", run: s.Run, ready: s.Ready})
	}
	return nil
}

// missing returns an error naming the first of names that has is false
// for: a stage or sink the file does not declare.
func missing(path, kind string, names []string, has func(string) bool) error {
	for _, n := range names {
		if !has(n) {
			return fmt.Errorf("%s has no %s %q", path, kind, n)
		}
	}
	return nil
}

// Run runs every stage and sink until ctx ends, when each commits what it
// holds and leaves its group, and Run returns nil. A stage or sink that
// fails stops the others, so that the process is restarted as a whole;
// so does a connection Kafka refuses for good (authentication, an
// untrusted certificate). Run logs each failure at ERROR and returns them
// joined. While the engine stays not ready for 30 s, Run logs why at WARN,
// then again at doubling intervals up to 10 minutes. Call Run once.
func (e *Engine) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.cancel.Store(&cancel)
	if e.refused.Load() != nil {
		cancel()
	}
	go func() {
		t := time.NewTicker(e.warnTick)
		defer t.Stop()
		watchReady(ctx, e.Ready, e.log, t.C, notReadyWarnAfter, notReadyWarnMost)
	}()
	errs := make(chan error, len(e.runners))
	for _, r := range e.runners {
		go func() {
			err := r.run(ctx)
			if err != nil {
				cancel()
				e.log.Error(r.kind+" failed", "err", err)
			}
			errs <- err
		}()
	}
	var all []error
	for range e.runners {
		all = append(all, <-errs)
	}
	if p := e.refused.Load(); p != nil {
		e.log.Error("kafka refused the connection; stopped", "err", *p)
		all = append(all, fmt.Errorf("kafka refused the connection: %w", *p))
	}
	return errors.Join(all...)
}

// Ready returns nil when every stage and sink is ready: each holds an
// assignment in its group, was not fenced out of it, its brokers (and
// database) answer, and no transaction or batch has stalled. Otherwise it
// returns their reasons, joined. It is safe to call from any goroutine.
func (e *Engine) Ready() error {
	var errs []error
	for _, r := range e.runners {
		errs = append(errs, r.ready())
	}
	return errors.Join(errs...)
}

// Handler serves the engine's read-only operations endpoints:
//
//	GET /metrics  the Prometheus metrics of the engine's registry
//	GET /healthz  200 "ok" while the process runs
//	GET /readyz   200 "ready" when Ready returns nil, else 503 "not ready: " and the reasons
//
// No endpoint changes state, and none asks for credentials: serve it on
// an address only trusted clients reach.
func (e *Engine) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.reg, promhttp.HandlerOpts{Registry: e.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := e.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// How long an engine stays not ready before Run logs why (longer than a
// start or a rebalance takes), and the longest interval between two such
// lines.
const (
	notReadyWarnAfter = 30 * time.Second
	notReadyWarnMost  = 10 * time.Minute
)

// watchReady logs, at WARN, why the process is not ready once it has been
// so for first (as seen at the ticks of ticks), then again at doubling
// intervals up to most while it lasts, and at INFO when it is ready again:
// a process that is stuck says so in its log, not only on /readyz, which
// nobody may be polling (a broker that accepts connections and never
// answers, a database that stopped answering, a partition with no
// leader). It returns when ctx ends.
func watchReady(ctx context.Context, ready func() error, log *slog.Logger, ticks <-chan time.Time, first, most time.Duration) {
	var since, next time.Time // not ready since (zero while ready), next warning
	wait := first
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-ticks:
			err := ready()
			switch {
			case err == nil:
				if warned {
					log.Info("ready again", "after", now.Sub(since).Round(time.Second))
				}
				since, wait, warned = time.Time{}, first, false
			case since.IsZero():
				since, next = now, now.Add(wait)
			case !now.Before(next):
				log.Warn("not ready", "for", now.Sub(since).Round(time.Second), "why", err.Error())
				warned = true
				wait = min(2*wait, most)
				next = now.Add(wait)
			}
		}
	}
}
