package pgsink

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/exactly-io/exactly/processor/deadletter"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/fault"
)

// deadLetter is one record of a batch that goes to the dead-letter topic.
type deadLetter struct {
	rec *kgo.Record      // what is produced: the full dead letter, or its envelope once that was refused; nil for a table
	src *kgo.Record      // the input record
	re  *dlq.RecordError // why
}

// newDeadLetter returns the deadLetter of input record r, failed for re.
func (s *Sink) newDeadLetter(r *kgo.Record, re *dlq.RecordError) deadLetter {
	if s.deadLettersToTable() {
		return deadLetter{src: r, re: re} // a row, built by deadLetterArgs
	}
	return deadLetter{rec: s.deadLetterOf(r, re), src: r, re: re}
}

// deadLetterOf returns the dead letter of r: its key, value and headers as
// they came, plus the exactly.dlq.* headers of dlq.DeadLetter, with the
// sink's name as the stage, and the SQLSTATE for a Postgres rejection.
func (s *Sink) deadLetterOf(r *kgo.Record, re *dlq.RecordError) *kgo.Record {
	return dlq.DeadLetter(s.cfg.DeadLetter, s.cfg.Sink, r, re, s.extraHeaders(r, re)...)
}

// envelopeOf returns the size-bounded envelope of r (dlq.Envelope), sent
// instead of its dead letter when the broker refused that.
func (s *Sink) envelopeOf(r *kgo.Record, re *dlq.RecordError) *kgo.Record {
	return dlq.Envelope(s.cfg.DeadLetter, s.cfg.Sink, r, re, s.extraHeaders(r, re)...)
}

// extraHeaders are the sink's headers of r's dead letter: the input
// topic's ID (deadletter.HeaderSourceTopicID) and the SQLSTATE.
func (s *Sink) extraHeaders(r *kgo.Record, re *dlq.RecordError) []kgo.RecordHeader {
	s.mu.Lock()
	id := s.pos[r.Partition].current
	s.mu.Unlock()
	return append(dlq.SourceTopicIDHeader(id), s.sqlStateHeader(re)...)
}

func (s *Sink) sqlStateHeader(re *dlq.RecordError) []kgo.RecordHeader {
	if code := sqlState(re.Err); code != "" {
		return []kgo.RecordHeader{{Key: deadletter.HeaderSQLState, Value: []byte(code)}}
	}
	return nil
}

// produceDeadLetters produces the batch's dead letters and returns once the
// broker acknowledged every one of them (the batch's positions commit only
// after that), or with the error that fails this attempt at the batch.
//
// A dead letter the broker refuses as a fault of the record itself
// (dlq.IsRecordFault: MESSAGE_TOO_LARGE for the dead-letter topic's
// max.message.bytes, INVALID_RECORD, ...) would be refused at every retry.
// Since a batch of refused records may have been refused as a whole, each
// is produced again alone; one refused alone is replaced by its
// size-bounded envelope (dlq.Envelope: no value, header
// exactly.dlq.value.omitted), in the same attempt. An envelope refused too
// is a *fault.FatalError naming the input record and the dead-letter topic:
// no retry could write the batch.
//
// Any other produce error fails the attempt, and writeBatch retries the
// batch (its dead letters are at least once), except one that no retry
// mends: kafkaconn.IsFatal (TOPIC_AUTHORIZATION_FAILED, ...) or, wrapped in a
// *fault.FatalError, an invalid dead-letter topic name
// (INVALID_TOPIC_EXCEPTION).
func (s *Sink) produceDeadLetters(ctx context.Context, dead []deadLetter) error {
	recs := make([]*kgo.Record, len(dead))
	for i := range dead {
		recs[i] = dead[i].rec
	}
	refused, err := s.produceAll(ctx, recs, "dead letters")
	if err != nil || len(refused) == 0 {
		return err
	}
	if len(refused) > 1 {
		// Refused in one produce request, perhaps for one record's size:
		// find those refused on their own.
		var alone []refusal
		for _, f := range refused {
			again, err := s.produceAll(ctx, recs[f.i:f.i+1], "dead letters")
			if err != nil {
				return err
			}
			if len(again) > 0 {
				alone = append(alone, refusal{f.i, again[0].err})
			}
		}
		refused = alone
	}
	for _, f := range refused {
		d := &dead[f.i]
		s.log.Warn("the broker refused a dead letter; sending a size-bounded envelope instead",
			"source", sourceOf(d.src), "dead_letter_topic", s.cfg.DeadLetter, "value_bytes", len(d.src.Value),
			"reason", d.re.Reason, "err", f.err)
		d.rec = s.envelopeOf(d.src, d.re)
		again, err := s.produceAll(ctx, []*kgo.Record{d.rec}, "dead-letter envelope")
		if err != nil {
			return err
		}
		if len(again) > 0 {
			return &fault.FatalError{Err: fmt.Errorf("dead-letter topic %s refused even the envelope of %s (dead letter refused: %v): %w",
				s.cfg.DeadLetter, sourceOf(d.src), f.err, again[0].err)}
		}
	}
	return nil
}

// refusal is a record the broker refused as its own fault: the index of
// the record and the error.
type refusal struct {
	i   int
	err error
}

// produceAll produces recs (what names them in an error) and waits for all
// of them. It returns those the broker refused as a fault of the record
// (dlq.IsRecordFault), or the first other error.
func (s *Sink) produceAll(ctx context.Context, recs []*kgo.Record, what string) ([]refusal, error) {
	at := make(map[*kgo.Record]int, len(recs))
	for i, r := range recs {
		at[r] = i
	}
	var refused []refusal
	var other error
	// Results come in the order of acknowledgment, not that of recs.
	for _, res := range s.cl.ProduceSync(ctx, recs...) {
		switch {
		case res.Err == nil:
		case dlq.IsRecordFault(res.Err):
			refused = append(refused, refusal{at[res.Record], res.Err})
		case other == nil:
			other = res.Err
		}
	}
	switch {
	case other == nil:
		slices.SortFunc(refused, func(a, b refusal) int { return a.i - b.i })
		return refused, nil
	case errors.Is(other, kerr.InvalidTopicException):
		// The dead-letter topic's name is not a valid topic name.
		return nil, &fault.FatalError{Err: fmt.Errorf("produce %s to %s: %w", what, s.cfg.DeadLetter, other)}
	}
	return nil, fmt.Errorf("produce %s to %s: %w", what, s.cfg.DeadLetter, other)
}

// sourceOf names input record r as topic/partition@offset.
func sourceOf(r *kgo.Record) string { return fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset) }
