package kit

import (
	"errors"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers that every dead letter carries, beside the input record's own
// headers, whether a stage or a sink wrote it. Their values are UTF-8 text.
// The source triple identifies the input record exactly: it is what a
// replay or an audit needs.
const (
	HeaderReason          = "exactly.dlq.reason"           // one of the Reason constants, or a sink's own reason
	HeaderError           = "exactly.dlq.error"            // the error message
	HeaderStep            = "exactly.dlq.step"             // the transform step that failed, for reason transform
	HeaderValueOmitted    = "exactly.dlq.value.omitted"    // envelope: size of the value left out, bytes
	HeaderKeyOmitted      = "exactly.dlq.key.omitted"      // envelope: size of the key left out, bytes
	HeaderWindowResult    = "exactly.dlq.window.result"    // "true": the value is an aggregate window's result, not an input record
	HeaderStage           = "exactly.dlq.stage"            // stage or sink name
	HeaderSourceTopic     = "exactly.dlq.source.topic"     // input topic
	HeaderSourcePartition = "exactly.dlq.source.partition" // decimal
	HeaderSourceOffset    = "exactly.dlq.source.offset"    // decimal
	HeaderSourceTimestamp = "exactly.dlq.source.timestamp" // Unix milliseconds, decimal
	// HeaderSourceTopicID is the input topic's ID (KIP-516), base64 as
	// kadm.TopicID prints it: a topic deleted and created again under
	// its name starts its offsets at 0 again, and only the ID tells its
	// dead letters from the old topic's.
	HeaderSourceTopicID = "exactly.dlq.source.topic_id"
)

// SourceTopicIDHeader is the HeaderSourceTopicID header of a dead letter
// of an input topic whose ID (kadm.TopicID.String()) is id; none when the
// ID is not known ("").
func SourceTopicIDHeader(id string) []kgo.RecordHeader {
	if id == "" {
		return nil
	}
	return []kgo.RecordHeader{{Key: HeaderSourceTopicID, Value: []byte(id)}}
}

// Dead-letter reasons, written to the HeaderReason header. They name the
// step of the pipeline that rejected the record. A sink adds its own
// (pgsink.ReasonEventID, pgsink.ReasonPostgres).
const (
	ReasonDecode    = "decode"    // the input value is not valid in its format
	ReasonTransform = "transform" // a transform step failed; HeaderStep names it
	ReasonKey       = "key"       // the key field is missing
	ReasonEncode    = "encode"    // the output value does not fit the output format
	ReasonProduce   = "produce"   // the broker refused the output, e.g. too large
	ReasonLate      = "late"      // an aggregate step: every window of the record's event time has closed
)

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
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(re.Reason)},
		kgo.RecordHeader{Key: HeaderError, Value: []byte(re.Err.Error())},
		kgo.RecordHeader{Key: HeaderStage, Value: []byte(stage)},
		kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		kgo.RecordHeader{Key: HeaderSourceTimestamp, Value: strconv.AppendInt(nil, r.Timestamp.UnixMilli(), 10)},
	)
	if re.Step != "" {
		h = append(h, kgo.RecordHeader{Key: HeaderStep, Value: []byte(re.Step)})
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
	h[0] = kgo.RecordHeader{Key: HeaderValueOmitted, Value: strconv.AppendInt(nil, int64(len(r.Value)), 10)}
	key := r.Key
	if len(key) > EnvelopeKeyMax {
		h = append(h, kgo.RecordHeader{Key: HeaderKeyOmitted, Value: strconv.AppendInt(nil, int64(len(key)), 10)})
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
