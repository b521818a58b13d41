package kit

import (
	"math/rand/v2"
	"time"
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
