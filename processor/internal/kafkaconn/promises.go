package kafkaconn

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Promises counts the produce promises of one transaction that have not
// been called back yet, so that its outcome is decided only once every
// record it produced has answered.
//
// kgo.Client.Flush waits only for buffered records. A record franz-go
// refuses before buffering it (larger than MaxBufferedBytes, which it
// fails with MESSAGE_TOO_LARGE; no topic; not in a transaction) has its
// promise called from a goroutine of its own, possibly after Flush
// returned: a transaction committed then would commit the input offsets of
// a record whose output was never written. Use a new Promises for each
// transaction.
type Promises struct{ wg sync.WaitGroup }

// Track returns fn wrapped to count as pending until it returns; pass the
// result to Produce.
func (p *Promises) Track(fn func(*kgo.Record, error)) func(*kgo.Record, error) {
	p.wg.Add(1)
	return func(r *kgo.Record, err error) {
		defer p.wg.Done()
		fn(r, err)
	}
}

// Flush flushes cl (kgo.Client.Flush), then waits for every tracked
// promise (Wait): the point after which a transaction's produce errors are
// all known.
func (p *Promises) Flush(ctx context.Context, cl *kgo.Client) error {
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return p.Wait(ctx)
}

// Wait returns once every tracked promise has been called back, or ctx's
// error if it ends first (the transaction's outcome is then unknown to the
// caller, which must not commit it).
func (p *Promises) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("produce promises not answered: %w", ctx.Err())
	}
}
