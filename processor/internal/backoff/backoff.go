package backoff

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Backoff is capped exponential backoff with full jitter: Next returns a
// random wait in [d/2, d], where d doubles from base up to max. It is not
// safe for concurrent use.
type Backoff struct {
	base, max, cur time.Duration
}

// NewBackoff returns a Backoff that starts at base and doubles up to max.
func NewBackoff(base, max time.Duration) *Backoff {
	return &Backoff{base: base, max: max, cur: base}
}

// Next returns the next wait.
func (b *Backoff) Next() time.Duration {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return d/2 + rand.N(d/2+1)
}

// Reset starts again from base, after progress.
func (b *Backoff) Reset() { b.cur = b.base }

// RetryRetriable calls fn until it returns nil or an error that Kafka does
// not mark retriable (kerr.IsRetriable: COORDINATOR_NOT_AVAILABLE,
// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, a leader election, ...),
// waiting with backoff between calls, for at most tries calls or until ctx
// ends. It is for one-shot admin reads (a group's offsets, a topic's ends)
// that a coordinator move or a broker start would otherwise fail outright.
// It returns fn's last error.
func RetryRetriable(ctx context.Context, tries int, fn func() error) error {
	b := NewBackoff(50*time.Millisecond, 2*time.Second)
	for i := 1; ; i++ {
		err := fn()
		if err == nil || i >= tries || !kerr.IsRetriable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(b.Next()):
		}
	}
}
