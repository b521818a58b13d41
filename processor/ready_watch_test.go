package processor

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A process that stays not ready logs why at WARN after 30 s, again at
// doubling intervals while it lasts (capped), and at INFO when it is
// ready again; a ready one logs nothing, and a new episode starts the
// count again.
func TestWatchReadyLogsAStuckProcess(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{} // no wall-clock time: the lines are compared whole
		}
		return a
	}}))
	stuck := errors.New("sink s: batch open for 2m without committing: its write has been at PostgreSQL: COMMIT for 2m")
	ticks, answers := make(chan time.Time), make(chan error)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchReady(ctx, func() error { return <-answers }, log, ticks, 30*time.Second, 2*time.Minute)
	}()
	base := time.Unix(1_000_000, 0)
	// The watcher handles one tick at a time: it takes the tick, then
	// asks ready, which answers err.
	at := func(sec int, err error) {
		ticks <- base.Add(time.Duration(sec) * time.Second)
		answers <- err
	}
	at(0, stuck)  // not ready from here
	at(29, stuck) // too soon
	at(30, stuck) // warning 1; next in 60 s
	at(89, stuck)
	at(90, stuck)  // warning 2; next in 120 s (the cap)
	at(210, stuck) // warning 3; next in 120 s still
	at(211, nil)   // ready again
	at(300, nil)
	at(400, nil)
	at(401, stuck) // a new episode
	at(430, stuck)
	at(431, stuck) // warning after 30 s again
	at(432, nil)
	cancel()
	<-done
	want := strings.Join([]string{
		`level=WARN msg="not ready" for=30s why="` + stuck.Error() + `"`,
		`level=WARN msg="not ready" for=1m30s why="` + stuck.Error() + `"`,
		`level=WARN msg="not ready" for=3m30s why="` + stuck.Error() + `"`,
		`level=INFO msg="ready again" after=3m31s`,
		`level=WARN msg="not ready" for=30s why="` + stuck.Error() + `"`,
		`level=INFO msg="ready again" after=31s`,
	}, "\n") + "\n"
	if got := buf.String(); got != want {
		t.Errorf("logged:\n%s\nwant:\n%s", got, want)
	}
}
