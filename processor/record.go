package processor

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers that every dead letter carries, beside the input record's own
// headers. Their values are UTF-8 text. The source triple identifies the
// input record exactly: it is what a replay or an audit needs.
const (
	HeaderReason          = "exactly.dlq.reason"           // decode, key or encode
	HeaderError           = "exactly.dlq.error"            // the error message
	HeaderStage           = "exactly.dlq.stage"            // stage name
	HeaderSourceTopic     = "exactly.dlq.source.topic"     // input topic
	HeaderSourcePartition = "exactly.dlq.source.partition" // decimal
	HeaderSourceOffset    = "exactly.dlq.source.offset"    // decimal
	HeaderSourceTimestamp = "exactly.dlq.source.timestamp" // Unix milliseconds, decimal
)

// transform decodes, re-keys and encodes one input record. Any error it
// returns is a *RecordError: a permanent fault of that record.
func (s *Stage) transform(r *kgo.Record) (*kgo.Record, error) {
	v, err := s.in.Decode(r.Value)
	if err != nil {
		return nil, &RecordError{Reason: ReasonDecode, Err: err}
	}
	key := r.Key
	if s.cfg.KeyField != "" {
		if key, err = keyOf(v, s.cfg.KeyField); err != nil {
			return nil, &RecordError{Reason: ReasonKey, Err: err}
		}
	}
	value := r.Value
	if s.cfg.InputFormat != s.cfg.OutputFormat {
		// Same format and an unchanged value: the input bytes are already
		// valid output, and copying them keeps numbers and field order as
		// the producer wrote them.
		if value, err = s.out.Encode(v); err != nil {
			return nil, &RecordError{Reason: ReasonEncode, Err: err}
		}
	}
	return &kgo.Record{
		Topic:     s.cfg.Output,
		Key:       key,
		Value:     value,
		Headers:   r.Headers,
		Timestamp: r.Timestamp, // as Kafka Streams does: outputs keep the input's event time
	}, nil
}

var errMissingKey = errors.New("missing key field")

// keyOf returns the bytes of field in a JSON object: a string as its text,
// any other value as its JSON text.
func keyOf(v any, field string) ([]byte, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w %q: value is not a json object", errMissingKey, field)
	}
	fv, ok := obj[field]
	if !ok || fv == nil {
		return nil, fmt.Errorf("%w %q", errMissingKey, field)
	}
	switch fv := fv.(type) {
	case string:
		return []byte(fv), nil
	case json.Number:
		return []byte(fv), nil
	}
	b, err := json.Marshal(fv)
	if err != nil {
		return nil, fmt.Errorf("key field %q: %w", field, err)
	}
	return b, nil
}

// deadLetter returns the dead letter of r: its key, value and headers as
// they came, plus headers naming the error, the stage and the source.
func (s *Stage) deadLetter(r *kgo.Record, re *RecordError) *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(r.Headers)+7)
	h = append(h, r.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: HeaderReason, Value: []byte(re.Reason)},
		kgo.RecordHeader{Key: HeaderError, Value: []byte(re.Err.Error())},
		kgo.RecordHeader{Key: HeaderStage, Value: []byte(s.cfg.Stage)},
		kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderSourcePartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
		kgo.RecordHeader{Key: HeaderSourceTimestamp, Value: strconv.AppendInt(nil, r.Timestamp.UnixMilli(), 10)},
	)
	return &kgo.Record{
		Topic:     s.cfg.DeadLetter,
		Key:       r.Key,
		Value:     r.Value,
		Headers:   h,
		Timestamp: time.Now(),
	}
}
