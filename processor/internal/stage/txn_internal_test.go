package stage

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ctxSession is a session that records the context of each Produce and
// acknowledges every record at once.
type ctxSession struct {
	cl   *kgo.Client
	mu   sync.Mutex
	ctxs []context.Context
}

func (f *ctxSession) PollRecords(context.Context, int) kgo.Fetches { return nil }
func (f *ctxSession) Begin() error                                 { return nil }
func (f *ctxSession) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	f.mu.Lock()
	f.ctxs = append(f.ctxs, ctx)
	f.mu.Unlock()
	promise(r, nil)
}
func (f *ctxSession) End(context.Context, bool) (bool, error) { return true, nil }
func (f *ctxSession) Client() *kgo.Client                     { return f.cl }
func (f *ctxSession) Close()                                  {}

// A transaction's records are produced with a context that ends at the
// transaction's deadline (Begin plus the transaction timeout), so that a
// Produce waiting for room in the producer's buffer gives up when the
// broker would abort the transaction anyway, and that is released once the
// transaction ends, committed or aborted.
func TestTxnProduceContext(t *testing.T) {
	for _, end := range []string{"commit", "abort"} {
		t.Run(end, func(t *testing.T) {
			s, err := New(Config{Stage: "s", InstanceID: "i", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq",
				TransactionTimeout: 7 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			sess := &ctxSession{cl: cl}
			tx := &txn{ctx: context.Background(), stage: s, sess: sess, delivered: map[partition]*deliveredRange{}}
			if err := tx.begin(); err != nil {
				t.Fatal(err)
			}
			tx.produce(source{"in", 0, 1}, &kgo.Record{Topic: "out", Value: []byte(`{}`)})
			tx.produce(source{"in", 0, 2}, &kgo.Record{Topic: "out", Value: []byte(`{}`)})
			if len(sess.ctxs) != 2 {
				t.Fatalf("%d produces, want 2", len(sess.ctxs))
			}
			for i, ctx := range sess.ctxs {
				deadline, ok := ctx.Deadline()
				if !ok || !deadline.Equal(tx.started.Add(7*time.Second)) {
					t.Errorf("produce %d: deadline %v (set %v), want the transaction's start plus its timeout, %v", i, deadline, ok, tx.started.Add(7*time.Second))
				}
				if ctx.Err() != nil {
					t.Errorf("produce %d: context already done while the transaction is open: %v", i, ctx.Err())
				}
			}
			switch end {
			case "commit":
				committed, err := tx.end(context.Background(), endCaughtUp)
				if err != nil || !committed {
					t.Fatalf("end = %v, %v; want committed", committed, err)
				}
			case "abort":
				if err := tx.abort(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			for i, ctx := range sess.ctxs {
				if ctx.Err() == nil {
					t.Errorf("produce %d: context not released after the transaction ended", i)
				}
			}
		})
	}
}
