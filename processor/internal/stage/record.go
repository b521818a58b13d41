package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// Lineage headers that every output record carries, replacing any lineage
// headers its input had: the stage that wrote it and the input record it
// came from. With them an auditor (exactly verify) tells an output that
// was committed twice from two distinct events, and accounts for filter,
// route and explode steps: the outputs of one input share its source
// triple, and an exploded one is told apart by its index. Values are
// UTF-8 text; numbers are decimal.
const (
	HeaderLineageStage     = "exactly.stage"            // stage name
	HeaderLineageTopic     = "exactly.source.topic"     // input topic
	HeaderLineagePartition = "exactly.source.partition" // decimal
	HeaderLineageOffset    = "exactly.source.offset"    // decimal
	HeaderLineageIndex     = "exactly.source.index"     // 0, or the output's position among its input's outputs
)

// lineage returns a new slice of headers: hs without lineage headers (an
// upstream stage's), then this stage's lineage of the index-th output of
// in. A new slice, so that the outputs of one input share no backing array.
func (s *Stage) lineage(in *kgo.Record, hs []kgo.RecordHeader, index int) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+5)
	for _, h := range hs {
		switch h.Key {
		case HeaderLineageStage, HeaderLineageTopic, HeaderLineagePartition, HeaderLineageOffset, HeaderLineageIndex,
			HeaderLineageTimestamp, deadletter.HeaderRedriveTimestamp:
		default:
			out = append(out, h)
		}
	}
	// The three numbers share one allocation; each value is capped at
	// its own length, so that appending to one cannot overwrite the next.
	// The stage and input topic names are the stage's own bytes, shared
	// by every output: nothing writes to a header value once it is made.
	b := make([]byte, 0, 3*20)
	b = strconv.AppendInt(b, int64(in.Partition), 10)
	pe := len(b)
	b = strconv.AppendInt(b, in.Offset, 10)
	oe := len(b)
	b = strconv.AppendInt(b, int64(index), 10)
	topic := s.inputName
	if in.Topic != s.cfg.Input {
		topic = []byte(in.Topic)
	}
	if s.cfg.OutputTimestamp == topology.OutputTimestampWrite {
		out = append(out, kgo.RecordHeader{Key: HeaderLineageTimestamp, Value: strconv.AppendInt(nil, in.Timestamp.UnixMilli(), 10)})
	}
	return append(out,
		kgo.RecordHeader{Key: HeaderLineageStage, Value: s.stageName},
		kgo.RecordHeader{Key: HeaderLineageTopic, Value: topic},
		kgo.RecordHeader{Key: HeaderLineagePartition, Value: b[:pe:pe]},
		kgo.RecordHeader{Key: HeaderLineageOffset, Value: b[pe:oe:oe]},
		kgo.RecordHeader{Key: HeaderLineageIndex, Value: b[oe:len(b):len(b)]},
	)
}

// recordOutputs decodes one input record, runs the stage's transform steps,
// re-keys and encodes the results. It returns the output records, none when
// a step filtered the record out. Any error it returns is a *dlq.RecordError: a
// permanent fault of that record, which then has no outputs at all.
func (s *Stage) recordOutputs(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error) {
	if s.passJSON {
		return s.passThroughJSON(r)
	}
	in, err := s.decodeInput(r)
	if err != nil {
		return nil, err
	}
	return s.transformOutputs(ctx, r, in)
}

// decodeInput decodes input record r for the transform steps (a
// *dlq.RecordError if it does not decode).
func (s *Stage) decodeInput(r *kgo.Record) (transform.Record, error) {
	steps := s.pipeline != nil && (s.pipeline.Len() > 0 || s.step != nil)
	var v any
	var err error
	if steps && s.cfg.InputFormat == serde.JSON {
		v, err = transform.FromJSON(r.Value) // decoded field by field, as steps read
	} else {
		v, err = s.in.Decode(r.Value)
	}
	if err != nil {
		return transform.Record{}, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
	}
	in := transform.Record{
		Key: r.Key, Value: v, Raw: r.Value,
		SourceTopic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
	}
	if steps {
		in.Headers = make([]transform.Header, len(r.Headers))
		for i, h := range r.Headers {
			in.Headers[i] = transform.Header{Key: h.Key, Value: h.Value}
		}
	}
	return in, nil
}

// transformOutputs runs the transform steps on in, decoded from input
// record r, and builds the output records (see recordOutputs).
func (s *Stage) transformOutputs(ctx context.Context, r *kgo.Record, in transform.Record) ([]*kgo.Record, error) {
	steps := s.pipeline != nil && s.pipeline.Len() > 0
	recs := []transform.Record{in}
	var err error
	if steps {
		if s.pipeline.HasFuncs() {
			// A Go transform must return well within the transaction
			// timeout, or the transaction would abort and the record be
			// retried forever: past this deadline it is a dead letter.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.cfg.TransactionTimeout/2)
			defer cancel()
		}
		if recs, err = s.pipeline.Apply(ctx, in); err != nil {
			var se *transform.StepError
			if errors.As(err, &se) {
				return nil, &dlq.RecordError{Reason: deadletter.ReasonTransform, Step: se.Step, Err: se.Err}
			}
			return nil, &dlq.RecordError{Reason: deadletter.ReasonTransform, Err: err}
		}
	}
	outs := make([]*kgo.Record, 0, len(recs))
	for i := range recs {
		out, err := s.output(r, &recs[i], i, s.pipeline != nil && s.pipeline.Len() > 0)
		if err != nil {
			return nil, err
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// output builds the Kafka record of one transform result, the index-th
// output of input record in.
func (s *Stage) output(in *kgo.Record, rec *transform.Record, index int, transformed bool) (*kgo.Record, error) {
	key := rec.Key
	if rec.Value == nil && rec.Raw == nil {
		// A step made the value null (explode of a list holding null):
		// no event, refused as every reader here refuses a null value
		// (JSON null, an Avro null datum), in every output format.
		err := fmt.Errorf("%w: a step made the value null, which carries no event (output format %s)", serde.ErrNullValue, s.cfg.OutputFormat)
		if _, eerr := s.out.Encode(nil); eerr != nil {
			err = eerr
		}
		return nil, &dlq.RecordError{Reason: deadletter.ReasonEncode, Err: err}
	}
	if s.cfg.KeyField != "" {
		var err error
		if key, err = keyOf(rec.Value, s.cfg.KeyField); err != nil {
			return nil, &dlq.RecordError{Reason: deadletter.ReasonKey, Err: err}
		}
	}
	value := rec.Raw
	if value == nil || s.cfg.InputFormat != s.cfg.OutputFormat || s.cfg.OutputFormat == serde.Avro {
		// The input bytes are reused only while no step changed the value
		// and the format is the same: they keep numbers and field order
		// exactly as the producer wrote them.
		var err error
		if value, err = s.out.Encode(rec.Value); err != nil {
			return nil, &dlq.RecordError{Reason: deadletter.ReasonEncode, Err: err}
		}
	}
	headers := in.Headers
	if transformed {
		headers = make([]kgo.RecordHeader, len(rec.Headers))
		for i, h := range rec.Headers {
			headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
	}
	headers = s.lineage(in, headers, index)
	topic := rec.Topic
	if topic == "" {
		topic = s.cfg.Output
	}
	return &kgo.Record{
		Topic:     topic,
		Key:       key,
		Value:     value,
		Headers:   headers,
		Timestamp: s.outputTimestamp(in.Timestamp), // by default, as Kafka Streams does: the input's event time
	}, nil
}

var errMissingKey = errors.New("missing key field")

// passThroughJSON is recordOutputs for a stage that copies JSON unchanged
// (json in and out, no transform steps). It validates the bytes and reads
// the key field in place, with the same results as decoding, at a fraction
// of the cost: nothing would look at the decoded value.
func (s *Stage) passThroughJSON(r *kgo.Record) ([]*kgo.Record, error) {
	if err := serde.CheckJSON(r.Value); err != nil {
		return nil, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
	}
	key := r.Key
	if s.cfg.KeyField != "" {
		fv, isObject, _, err := serde.JSONField(r.Value, s.cfg.KeyField)
		if err != nil {
			return nil, &dlq.RecordError{Reason: deadletter.ReasonKey, Err: err}
		}
		if key, err = keyText(fv, isObject, s.cfg.KeyField); err != nil {
			return nil, &dlq.RecordError{Reason: deadletter.ReasonKey, Err: err}
		}
	}
	return []*kgo.Record{{
		Topic:     s.cfg.Output,
		Key:       key,
		Value:     r.Value,
		Headers:   s.lineage(r, r.Headers, 0),
		Timestamp: s.outputTimestamp(r.Timestamp),
	}}, nil
}

// keyOf returns the bytes of field in a JSON object: a string as its text,
// any other value as its JSON text.
func keyOf(v any, field string) ([]byte, error) {
	fv, isObject, err := transform.Field(v, field)
	if err != nil {
		return nil, err // names the field
	}
	return keyText(fv, isObject, field)
}

// keyText is keyOf for the value fv of field (nil when null or absent) in
// a value that isObject says is an object.
func keyText(fv any, isObject bool, field string) ([]byte, error) {
	switch {
	case !isObject:
		return nil, fmt.Errorf("%w %q: value is not a json object", errMissingKey, field)
	case fv == nil:
		return nil, fmt.Errorf("%w %q", errMissingKey, field)
	}
	switch fv := fv.(type) {
	case string:
		return []byte(fv), nil
	case json.Number:
		// The key field is read: a number is the key as its text, but
		// only one that has an exact value, as every reader of a field
		// requires (values.md, rule 4: 1e400 or an integer beyond int64 is
		// a dead letter here as in a key step).
		if _, err := serde.ParseNumber(string(fv), field); err != nil {
			return nil, err
		}
		return []byte(fv), nil
	case int64:
		return strconv.AppendInt(nil, fv, 10), nil
	case uint64:
		return strconv.AppendUint(nil, fv, 10), nil
	}
	b, err := serde.AppendJSON(nil, fv, field)
	if err != nil {
		return nil, fmt.Errorf("key field %q: %w", field, err)
	}
	return b, nil
}

// envelope is the dead letter of r when its full dead letter is too large
// for the dead-letter topic (dlq.Envelope).
func (s *Stage) envelope(r *kgo.Record, re *dlq.RecordError) *kgo.Record {
	return dlq.Envelope(s.cfg.DeadLetter, s.cfg.Stage, r, re, s.topicIDHeader()...)
}

// topicIDHeader is the dead letters' header naming the input topic's ID
// (deadletter.HeaderSourceTopicID), from the session being run.
func (s *Stage) topicIDHeader() []kgo.RecordHeader {
	if s.lastTopicID == ([16]byte{}) {
		return nil
	}
	return dlq.SourceTopicIDHeader(kadm.TopicID(s.lastTopicID).String())
}
