package stage

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
	// aborted; exactly-once has rewound, at-least-once is rewound by
	// txn.rewind (see rewind.go).
	End(ctx context.Context, commit bool) (committed bool, err error)
	Client() *kgo.Client
	Close()
}

// eosSession is a GroupTransactSession whose offset commits record the
// input topic's ID (see commitMeta).
type eosSession struct {
	*kgo.GroupTransactSession
	meta commitMeta
}

func (s eosSession) End(ctx context.Context, commit bool) (bool, error) {
	ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		for i := range req.Topics {
			s.meta.stamp(req.Topics[i].Topic, len(req.Topics[i].Partitions), func(j int) **string { return &req.Topics[i].Partitions[j].Metadata })
		}
		return nil
	})
	return s.GroupTransactSession.End(ctx, kgo.TransactionEndTry(commit))
}

// alosSession is a group consumer and idempotent producer without
// transactions.
type alosSession struct {
	cl   *kgo.Client
	meta commitMeta
}

func (s alosSession) PollRecords(ctx context.Context, n int) kgo.Fetches {
	return s.cl.PollRecords(ctx, n)
}

func (s alosSession) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	s.cl.Produce(ctx, r, promise)
}

func (s alosSession) Client() *kgo.Client { return s.cl }
func (s alosSession) Close()              { s.cl.Close() }
func (alosSession) Begin() error          { return nil }

// End flushes, then commits the offsets of everything polled; with commit
// false it only flushes: the caller rewinds (txn.rewind), since only it
// knows which records were written.
func (s alosSession) End(ctx context.Context, commit bool) (bool, error) {
	if err := s.cl.Flush(ctx); err != nil {
		return false, fmt.Errorf("flush: %w", err)
	}
	if !commit {
		return false, nil
	}
	if err := s.commit(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// commit commits the offsets of what was polled (or set by a rewind).
func (s alosSession) commit(ctx context.Context) error {
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			s.meta.stamp(req.Topics[i].Topic, len(req.Topics[i].Partitions), func(j int) **string { return &req.Topics[i].Partitions[j].Metadata })
		}
		return nil
	})
	if err := s.cl.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	return nil
}

// commitMeta is the commit metadata of the input topic's partitions:
// kit.CommitMetadata of the topic ID the session consumes.
type commitMeta struct{ topic, text string }

// stamp sets the metadata of each of a commit request's n partitions of
// topic to m.text, when topic is m's input topic; metadata(j) points at the
// metadata field of partition j.
func (m *commitMeta) stamp(topic string, n int, metadata func(j int) **string) {
	if topic != m.topic {
		return
	}
	for j := range n {
		*metadata(j) = &m.text
	}
}
