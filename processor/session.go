package processor

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Delivery guarantees, Config.Guarantee.
const (
	// ExactlyOnce commits outputs, dead letters and offsets in one Kafka
	// transaction (the default).
	ExactlyOnce = "exactly-once"
	// AtLeastOnce produces outputs without transactions and commits the
	// offsets once they are acknowledged. A crash between the two repeats
	// the uncommitted records: no loss, but duplicates. It is the baseline
	// that exactly-once is measured against, and a mode for users who
	// dedupe downstream.
	AtLeastOnce = "at-least-once"
)

// session is what the engine loop needs from a Kafka client: the same loop
// runs exactly-once on a GroupTransactSession and at-least-once on a plain
// group consumer.
type session interface {
	PollRecords(ctx context.Context, n int) kgo.Fetches
	Begin() error
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	// End commits (or, with commit false, abandons) what was polled and
	// produced since Begin. committed false with no error means it was
	// aborted and the consumer rewound to the last committed offsets.
	End(ctx context.Context, commit bool) (committed bool, err error)
	Client() *kgo.Client
	Close()
}

type eosSession struct{ *kgo.GroupTransactSession }

func (s eosSession) End(ctx context.Context, commit bool) (bool, error) {
	return s.GroupTransactSession.End(ctx, kgo.TransactionEndTry(commit))
}

// alosSession is a group consumer and idempotent producer without
// transactions.
type alosSession struct{ cl *kgo.Client }

func (s alosSession) PollRecords(ctx context.Context, n int) kgo.Fetches {
	return s.cl.PollRecords(ctx, n)
}

func (s alosSession) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	s.cl.Produce(ctx, r, promise)
}

func (s alosSession) Client() *kgo.Client { return s.cl }
func (s alosSession) Close()              { s.cl.Close() }
func (alosSession) Begin() error          { return nil }

func (s alosSession) End(ctx context.Context, commit bool) (bool, error) {
	if err := s.cl.Flush(ctx); err != nil {
		return false, fmt.Errorf("flush: %w", err)
	}
	if !commit {
		// Some records may have been produced; rewind so that the failed
		// ones are produced again (at least once).
		s.cl.SetOffsets(s.cl.CommittedOffsets())
		return false, nil
	}
	if err := s.cl.CommitUncommittedOffsets(ctx); err != nil {
		return false, fmt.Errorf("commit offsets: %w", err)
	}
	return true, nil
}
