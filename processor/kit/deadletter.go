package kit

import (
	"strconv"
	"time"

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
	HeaderStage           = "exactly.dlq.stage"            // stage or sink name
	HeaderSourceTopic     = "exactly.dlq.source.topic"     // input topic
	HeaderSourcePartition = "exactly.dlq.source.partition" // decimal
	HeaderSourceOffset    = "exactly.dlq.source.offset"    // decimal
	HeaderSourceTimestamp = "exactly.dlq.source.timestamp" // Unix milliseconds, decimal
)

// Dead-letter reasons, written to the HeaderReason header. They name the
// step of the pipeline that rejected the record. A sink adds its own
// (pgsink.ReasonEventID, pgsink.ReasonPostgres).
const (
	ReasonDecode    = "decode"    // the input value is not valid in its format
	ReasonTransform = "transform" // a transform step failed; HeaderStep names it
	ReasonKey       = "key"       // the key field is missing
	ReasonEncode    = "encode"    // the output value does not fit the output format
	ReasonProduce   = "produce"   // the broker refused the output, e.g. too large
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
