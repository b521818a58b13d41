package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// defaultMetricsAddr is loopback: the endpoint is unauthenticated, so
// exposing it is an explicit choice (--metrics-addr 0.0.0.0:9464).
const defaultMetricsAddr = "127.0.0.1:9464"

// serveOps serves the read-only operations endpoints until ctx ends:
//
//	/metrics  Prometheus metrics
//	/healthz  200 while the process runs
//	/readyz   200 when the engine is ready, else 503 with the reason
//
// h is the engine's processor.Engine.Handler. It returns once the
// listener is up, or the listen error.
func serveOps(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
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
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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
