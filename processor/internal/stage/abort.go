package stage

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/serde"
)

func retryCause(err error) string {
	if serde.IsTransient(err) {
		return RetryTransientRecord
	}
	return RetryProduce
}

// poison is a record whose output the broker refused; envelope when its
// full dead letter was refused too.
type poison struct {
	err      error
	envelope bool
}

// windowID identifies one window of one group key in one input
// partition: an emit-final result the broker refused is poisoned by it
// (Stage.poisonedWindows), not by the input record that closed it, since
// every later record that advances stream time would close it again.
type windowID struct {
	partition int32
	key       string
	start     int64
}

func (w windowID) String() string {
	return fmt.Sprintf("partition %d, key %q, window from %d ms", w.partition, w.key, w.start)
}

// source identifies an input record.
type source struct {
	topic     string
	partition int32
	offset    int64
}

func (s source) String() string { return fmt.Sprintf("%s/%d@%d", s.topic, s.partition, s.offset) }

func isTopicGone(err error) bool {
	return errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)
}

// retryError is a transaction aborted for a fault that may pass; the
// session stays, and the records are polled again after a backoff.
type retryError struct{ err error }

func (e *retryError) Error() string { return "transaction aborted: " + e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// afterAbort decides what follows a transaction of n input records that
// End aborted. With no produce error it was a rebalance: the session has
// rewound, and polling goes on (nil). A produce error is classified:
//   - a fault that may pass: *retryError, to poll the records again after
//     a backoff; a topic that is gone returns the error itself, to rebuild
//     the client, which alone forgets the old topic ID;
//   - the broker refused a record (too large, say): the next n
//     transactions carry one input record each, to find it; once found,
//     its output is replaced by its dead letter, its dead letter by a
//     size-bounded envelope, and an envelope refused too is fatal
//     (*fault.FatalError).
func (s *Stage) afterAbort(t *txn, produceErr error, n int) error {
	if produceErr == nil {
		s.metrics.abort(AbortRebalance)
		s.log.Info("transaction aborted; resuming from the last committed offsets", "topic", s.cfg.Input, "records", n)
		return nil
	}
	if kafkaconn.IsFatal(produceErr) {
		return produceErr // the schema registry refused us, say: no retry mends it
	}
	s.metrics.abort(AbortRetry)
	s.metrics.Retry(retryCause(produceErr))
	if refused := t.refusedWindows(); len(refused) > 0 && dlq.IsRecordFault(produceErr) {
		// The broker refused window results (their timestamp, their
		// size). A refusal in a batch of several may be another's: such a
		// result becomes a suspect, produced alone on the retry; refused
		// alone, it is poisoned, and the retry writes it as a dead letter,
		// then as an envelope.
		for w, err := range refused {
			p, seen := s.poisonedWindows[w]
			switch {
			case seen && p.envelope:
				return &fault.FatalError{Err: fmt.Errorf("dead-letter topic %s refused even the envelope of the window result of %s: %w", s.cfg.DeadLetter, w, err)}
			case seen:
				s.poisonedWindows[w] = poison{err: p.err, envelope: true}
				s.log.Warn("the broker refused the dead letter of a window result; sending a size-bounded envelope instead", "window", w.String(), "err", err)
			case t.windowsAlone:
				delete(s.suspectWindows, w)
				s.poisonedWindows[w] = poison{err: err}
				s.log.Warn("the broker refused a window result; dead-lettering it", "window", w.String(), "err", err)
			default:
				s.suspectWindows[w] = err
				s.log.Warn("the broker refused a window result; retrying the results one at a time to find it", "window", w.String(), "err", err)
			}
		}
		return &retryError{produceErr}
	}
	switch {
	case !dlq.IsRecordFault(produceErr):
		if isTopicGone(produceErr) {
			return produceErr
		}
	case s.isolate == 0:
		s.isolate = n
		s.log.Warn("the broker refused a record; retrying one input record per transaction to find it", "records", n, "err", produceErr)
	case t.outputs == 0 && t.deadLetters > 0 && s.poisoned[t.last].envelope:
		return &fault.FatalError{Err: fmt.Errorf("dead-letter topic %s refused even the envelope of %s: %w", s.cfg.DeadLetter, t.last, produceErr)}
	case t.outputs == 0 && t.deadLetters > 0:
		s.poisoned[t.last] = poison{err: produceErr, envelope: true}
		s.log.Warn("the broker refused a dead letter; sending a size-bounded envelope instead", "source", t.last.String(), "err", produceErr)
	default:
		s.poisoned[t.last] = poison{err: produceErr}
		s.log.Warn("the broker refused the output of a record; dead-lettering it", "source", t.last.String(), "err", produceErr)
	}
	return &retryError{produceErr}
}
