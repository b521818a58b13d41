// Package dlq builds dead letters: the input record with the headers of
// the deadletter contract.
package dlq

import (
	"errors"
	"strconv"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// SourceTopicIDHeader is the HeaderSourceTopicID header of a dead letter
// of an input topic whose ID (kadm.TopicID.String()) is id; none when the
// ID is not known ("").
func SourceTopicIDHeader(id string) []kgo.RecordHeader {
	if id == "" {
		return nil
	}
	return []kgo.RecordHeader{{Key: deadletter.HeaderSourceTopicID, Value: []byte(id)}}
}

// RecordError is a permanent fault of one input record. The stage or sink
// writes the record to the dead-letter topic, with Reason and Err in its
// headers, in the same transaction that commits its offset.
type RecordError struct {
	Reason string // one of the Reason constants, or a sink's own reason
	Step   string // the failed transform step, for ReasonTransform
	Err    error
}

func (e *RecordError) Error() string {
	if e.Step != "" {
		return e.Reason + ": " + e.Step + ": " + e.Err.Error()
	}
	return e.Reason + ": " + e.Err.Error()
}
func (e *RecordError) Unwrap() error { return e.Err }

// DeadLetter returns the dead letter of r for topic: r's key, value and
// headers as they came, plus the exactly.dlq.* headers naming re, the stage
// (or sink) and r's source. extra headers go last.
func DeadLetter(topic, stage string, r *kgo.Record, re *RecordError, extra ...kgo.RecordHeader) *kgo.Record {
	h := append(make([]kgo.RecordHeader, 0, len(r.Headers)+9+len(extra)), r.Headers...)
	return &kgo.Record{
		Topic:     topic,
		Key:       r.Key,
		Value:     r.Value,
		Headers:   append(DeadLetterHeaders(h, stage, r, re), extra...),
		Timestamp: time.Now(),
	}
}

// DeadLetterHeaders appends the exactly.dlq.* headers of r and re, written
// by stage, to h.
func DeadLetterHeaders(h []kgo.RecordHeader, stage string, r *kgo.Record, re *RecordError) []kgo.RecordHeader {
	h = append(h,
		kgo.RecordHeader{Key: deadletter.HeaderReason, Value: []byte(re.Reason)},
		kgo.RecordHeader{Key: deadletter.HeaderError, Value: []byte(re.Err.Error())},
		kgo.RecordHeader{Key: deadletter.HeaderStage, Value: []byte(stage)},
		kgo.RecordHeader{Key: deadletter.HeaderSourceTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: deadletter.HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: deadletter.HeaderSourceOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		kgo.RecordHeader{Key: deadletter.HeaderSourceTimestamp, Value: strconv.AppendInt(nil, r.Timestamp.UnixMilli(), 10)},
	)
	if re.Step != "" {
		h = append(h, kgo.RecordHeader{Key: deadletter.HeaderStep, Value: []byte(re.Step)})
	}
	return h
}

// EnvelopeKeyMax bounds the key an envelope keeps, bytes.
const EnvelopeKeyMax = 1024

// Envelope returns the size-bounded dead letter of r for topic, sent when
// the broker refused r's full dead letter (DeadLetter) as a fault of the
// record, most often too large for the topic's max.message.bytes: the
// exactly.dlq.* headers naming re, the stage (or sink) and r's source, the
// key if it is at most EnvelopeKeyMax bytes, no value and none of r's own
// headers. HeaderValueOmitted gives the size of the value left out, and
// HeaderKeyOmitted that of a key left out, so that the record can be found
// at its source (HeaderSourceTopic, ...). extra headers go last.
func Envelope(topic, stage string, r *kgo.Record, re *RecordError, extra ...kgo.RecordHeader) *kgo.Record {
	h := make([]kgo.RecordHeader, 1, 10+len(extra))
	h[0] = kgo.RecordHeader{Key: deadletter.HeaderValueOmitted, Value: strconv.AppendInt(nil, int64(len(r.Value)), 10)}
	key := r.Key
	if len(key) > EnvelopeKeyMax {
		h = append(h, kgo.RecordHeader{Key: deadletter.HeaderKeyOmitted, Value: strconv.AppendInt(nil, int64(len(key)), 10)})
		key = nil
	}
	return &kgo.Record{Topic: topic, Key: key, Headers: append(DeadLetterHeaders(h, stage, r, re), extra...), Timestamp: time.Now()}
}

// IsRecordFault reports whether a produce error is the fault of the record
// itself, so that producing the same record again can never succeed: it is
// too large (MESSAGE_TOO_LARGE, for the topic's max.message.bytes or the
// client's ProducerBatchMaxBytes; RECORD_LIST_TOO_LARGE), or the broker
// refused it as invalid (INVALID_RECORD: a record without a key in a
// compacted topic, say) or its timestamp as out of range (INVALID_TIMESTAMP,
// message.timestamp.*.max.ms). See the error codes of the Kafka protocol,
// https://kafka.apache.org/protocol#protocol_error_codes.
func IsRecordFault(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.InvalidTimestamp)
}
