// Package progress shows the progress of long commands (verify, and later
// reset, redrive and state restores) on a terminal: records done of the
// total, the rate and the time left, redrawn in place on one line. Off a
// terminal (a pipe, a file, CI logs) or when the command prints JSON it
// shows nothing, so that output stays clean for the reader.
//
// A nil *Reporter is valid and shows nothing; commands pass one around
// without checking.
package progress

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Reporter draws one progress bar. It is safe for concurrent use.
type Reporter struct {
	mu  sync.Mutex
	bar *progressbar.ProgressBar
}

// IsTerminal reports whether w is a terminal (a character device that
// answers terminal ioctls), the test for showing progress.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ForTerminal returns a Reporter that draws on w when w is a terminal and
// quiet is false, else nil (show nothing). what names the work, e.g.
// "reading topics"; total is the records expected, or -1 while unknown
// (see SetTotal).
func ForTerminal(w io.Writer, quiet bool, what string, total int64) *Reporter {
	if quiet || !IsTerminal(w) {
		return nil
	}
	return New(w, what, total)
}

// New returns a Reporter that always draws on w: records done of total,
// records per second and time left, redrawn at most 10 times a second.
func New(w io.Writer, what string, total int64) *Reporter {
	return newReporter(w, what, total, 100*time.Millisecond)
}

func newReporter(w io.Writer, what string, total int64, throttle time.Duration) *Reporter {
	return &Reporter{bar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("records"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(throttle),
		progressbar.OptionClearOnFinish(),
		// No redraw goroutine while the total is unknown: it reads the
		// bar's state without its lock (a data race in v3.19.1), and a
		// redraw on each Add is enough.
		progressbar.OptionSetSpinnerChangeInterval(0),
	)}
}

// SetTotal sets the records expected, once known (from the partitions'
// high watermarks, say).
func (r *Reporter) SetTotal(total int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bar.ChangeMax64(total)
}

// Add counts n more records done.
func (r *Reporter) Add(n int64) {
	if r == nil || n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.bar.Add64(n)
}

// Done removes the bar from the terminal, so that what the command prints
// next starts on a clean line.
func (r *Reporter) Done() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.bar.Finish()
	_ = r.bar.Exit()
}
