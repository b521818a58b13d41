package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// defaultMetricsAddr is loopback: the endpoint is unauthenticated, so
// exposing it is an explicit choice (--metrics-addr 0.0.0.0:9464).
const defaultMetricsAddr = "127.0.0.1:9464"

// newRegistry returns a registry with the Go runtime and process
// collectors, for one process's metrics.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveOps serves the read-only operations endpoints until ctx ends:
//
//	/metrics  Prometheus metrics of reg
//	/healthz  200 while the process runs
//	/readyz   200 when ready() returns nil, else 503 with the reason
//
// No endpoint changes state. It returns once the listener is up, or the
// listen error.
func serveOps(ctx context.Context, addr string, reg *prometheus.Registry, ready func() error, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil && addr == defaultMetricsAddr {
		// The default port is taken, most likely by another instance on
		// this machine: running a second instance must not fail for it.
		// An address the user chose is a hard error instead.
		log.Error("metrics endpoint disabled: the default address is in use; give each instance its own --metrics-addr", "addr", addr, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	return nil
}

// runner is a stage or a sink.
type runner interface {
	Run(ctx context.Context) error
	Ready() error
}

// runAll serves the operations endpoints and runs every runner until ctx
// ends or one fails, which stops the others: the process is restarted as a
// whole. cmd is the command ("run", "sink") and kind names the runners in
// logs ("stage", "sink"); refused reports a
// connection Kafka refused (authentication, certificate). It returns the
// exit code.
func runAll[R runner](ctx context.Context, cmd, kind, metricsAddr string, reg *prometheus.Registry, runners []R,
	refused func() error, log *slog.Logger, stderr io.Writer) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := func() error {
		var errs []error
		for _, r := range runners {
			errs = append(errs, r.Ready())
		}
		return errors.Join(errs...)
	}
	if err := serveOps(ctx, metricsAddr, reg, ready, log); err != nil {
		fmt.Fprintf(stderr, "exactly %s: %v\n", cmd, err)
		return exitUsage
	}
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		watchReady(ctx, ready, log, t.C, notReadyWarnAfter, 10*time.Minute)
	}()
	errs := make(chan error, len(runners))
	for _, r := range runners {
		go func() {
			err := r.Run(ctx)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	code := exitOK
	for range runners {
		if err := <-errs; err != nil {
			log.Error(kind+" failed", "err", err)
			code = exitFailure
		}
	}
	if err := refused(); err != nil {
		log.Error("kafka refused the connection; stopped", "err", err)
		code = exitFailure
	}
	return code
}

// notReadyWarnAfter is how long a process stays not ready before it logs
// why: longer than a start or a rebalance takes.
const notReadyWarnAfter = 30 * time.Second

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
