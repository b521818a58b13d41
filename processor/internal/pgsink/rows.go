package pgsink

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// op is one change a record makes to the target table: insert (or upsert)
// row, or delete the row whose event ID is id.
type op struct {
	rec *kgo.Record
	del bool
	id  string // the event ID, as text
	row []any  // one string or nil per column, in Config.Columns order
	// keep marks the columns whose value the record did not capture
	// (Config.UnavailableValue): they keep the stored value; nil for none.
	keep []bool
}

var errMissingEventID = errors.New("missing event id")

// toOp turns a record into an op, or says why the record is a dead letter
// (a *dlq.RecordError). ok is false, with a nil error, for a
// tombstone that the policy skips.
func (s *Sink) toOp(r *kgo.Record) (o op, ok bool, err error) {
	if s.isTombstone(r) { // tombstone.go
		if s.cfg.Tombstones != topology.TombstonesDelete {
			return op{}, false, nil
		}
		if len(r.Key) == 0 {
			return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID,
				Err: fmt.Errorf("%w: a tombstone to delete needs the event id as its key", errMissingEventID)}
		}
		return s.tombstoneOp(r) // changekey.go
	}
	if s.cfg.Envelope == topology.EnvelopeDebezium && !s.typed.avro {
		return s.changeOp(r)
	}
	v, obj, keys, err := s.decodeRow(r)
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
	}
	if s.typed.avro {
		return s.avroOp(r, v, obj)
	}
	if s.passJSON && obj != nil && len(obj) == 0 && len(s.fieldSources) > 0 {
		// Connect's JSON converter with schemas.enable wraps the row:
		// {"schema": ..., "payload": {...}}.
		if body, sch, err := s.unwrapPayload(r.Value); err == nil && sch != nil {
			obj, err := serde.JSONFields(body, s.fieldSources)
			if err != nil {
				return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("payload: %w", err)}
			}
			return s.rowOpKeys(r, obj, sch, keys)
		}
	}
	return s.rowOpKeys(r, obj, nil, keys)
}

// decode decodes r's value: of json input only the fields srcs (the rest
// is checked, not decoded: $value is the bytes as they came, and a field
// no column maps never decides a record's fate), else the whole value v.
// obj is the value's fields when it is an object or record.
func (s *Sink) decode(r *kgo.Record, srcs []string) (v any, obj map[string]any, err error) {
	if s.passJSON {
		obj, err = serde.JSONFields(r.Value, srcs)
		return obj, obj, err
	}
	v, err = s.codec.Decode(r.Value)
	obj, _ = v.(map[string]any)
	return v, obj, err
}

// valueKeys is the verdict on the duplicate keys of a record's json value
// (serde.CheckKeys), found in the pass that decoded it: for the jsonb
// columns of $value, which need it, without a second pass over the value.
type valueKeys struct{ err error }

// decodeRow is decode of r's value for its row's columns: of json input
// whose $value goes to a jsonb column, with the verdict on its keys from
// the same pass (nil otherwise: each such column checks its text).
func (s *Sink) decodeRow(r *kgo.Record) (v any, obj map[string]any, keys *valueKeys, err error) {
	if !s.passJSON || !s.valueToJSONB() {
		v, obj, err = s.decode(r, s.fieldSources)
		return v, obj, nil, err
	}
	obj, kerr, err := serde.JSONFieldsKeys(r.Value, s.fieldSources)
	if err != nil {
		return nil, nil, nil, err
	}
	return obj, obj, &valueKeys{err: kerr}, nil
}

// valueToJSONB reports whether a column maps $value to a jsonb column.
func (s *Sink) valueToJSONB() bool {
	for i, c := range s.cfg.Columns {
		if c.Source == topology.SourceValue && s.typeAt(i).base == "jsonb" {
			return true
		}
	}
	return false
}

// avroOp is toOp for a decoded Avro value v (obj when it is a record).
func (s *Sink) avroOp(r *kgo.Record, v any, obj map[string]any) (op, bool, error) {
	if s.cfg.Envelope == topology.EnvelopeDebezium {
		return s.avroChangeOp(r, obj)
	}
	if s.cfg.Types == topology.TypesFromSchema {
		if err := s.checkSchema(r); err != nil {
			return op{}, false, err
		}
	}
	if err := s.avroValue(obj, v); err != nil {
		return op{}, false, err
	}
	return s.rowOp(r, obj)
}

// rowOp turns obj, the fields of record r's row, into an insert (or
// upsert) op.
func (s *Sink) rowOp(r *kgo.Record, obj map[string]any) (o op, ok bool, err error) {
	return s.rowOpSchema(r, obj, nil)
}

// rowOpSchema is rowOp with the Connect schemas of obj's fields, by name
// (nil for none): a field's logical type decides its text (schemaText).
func (s *Sink) rowOpSchema(r *kgo.Record, obj map[string]any, sch map[string]connectSchema) (o op, ok bool, err error) {
	return s.rowOpKeys(r, obj, sch, nil)
}

// rowOpKeys is rowOpSchema with the verdict on the keys of r's value
// (nil: not checked yet), for its jsonb columns of $value.
func (s *Sink) rowOpKeys(r *kgo.Record, obj map[string]any, sch map[string]connectSchema, keys *valueKeys) (o op, ok bool, err error) {
	row := make([]any, len(s.cfg.Columns))
	var keep []bool
	for i, c := range s.cfg.Columns {
		var t colType
		if i < len(s.types) {
			t = s.types[i]
		}
		if i != s.eventIDIndex && i != s.versionIndex && s.unavailable(obj[c.Source], t, sch[c.Source]) {
			if keep == nil {
				keep = make([]bool, len(s.cfg.Columns))
			}
			keep[i] = true
			continue
		}
		row[i], err = s.columnTextKeys(r, obj, c.Source, t, sch, keys)
		if err != nil {
			return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("column %q: %w", c.Name, err)}
		}
	}
	id, _ := row[s.eventIDIndex].(string)
	if id == "" {
		src := s.cfg.Columns[s.eventIDIndex].Source
		why := fmt.Errorf("%w: field %q is missing, null or empty", errMissingEventID, src)
		if obj == nil && src[0] != '$' {
			why = fmt.Errorf("%w: value is not a json object", errMissingEventID)
		}
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: why}
	}
	if s.versionIndex >= 0 && row[s.versionIndex] == nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonVersion,
			Err: fmt.Errorf("%w: field %q of version column %q is missing or null", errMissingVersion, s.cfg.Columns[s.versionIndex].Source, s.cfg.Version)}
	}
	if s.versionIndex >= 0 {
		if v, _ := row[s.versionIndex].(string); unbeatable(v) {
			return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonVersion,
				Err: fmt.Errorf("%w: field %q of version column %q is %q, which no later version could ever replace", errUnorderedVersion, s.cfg.Columns[s.versionIndex].Source, s.cfg.Version, v)}
		}
	}
	return op{rec: r, id: id, row: row, keep: keep}, true, nil
}

// unbeatable reports whether v, a version's text, is one that Postgres
// reads as NaN or an infinity in some ordered type (numeric, double
// precision, timestamptz: "NaN", "Infinity", "-inf", "infinity"): NaN and
// +Infinity sort above every number and +infinity after every time, so a
// row stored with one could never be replaced, and -Infinity is below
// every version, including a stored row's first.
func unbeatable(v string) bool {
	switch strings.ToLower(strings.TrimLeft(strings.TrimSpace(v), "+-")) {
	case "nan", "inf", "infinity":
		return true
	}
	return false
}

// columnText is the staging text of the column of type t whose source is
// src: an Avro bytes or fixed field by its column's type (bytesText), any
// other by columnValue.
func (s *Sink) columnText(r *kgo.Record, obj map[string]any, src string, t colType, sch map[string]connectSchema) (any, error) {
	return s.columnTextKeys(r, obj, src, t, sch, nil)
}

// columnTextKeys is columnText with the verdict on the keys of r's value
// (nil: not checked yet), for a jsonb column of $value.
func (s *Sink) columnTextKeys(r *kgo.Record, obj map[string]any, src string, t colType, sch map[string]connectSchema, keys *valueKeys) (any, error) {
	if fs, ok := sch[src]; ok {
		if v, ok, err := schemaText(obj[src], fs, t, src); ok || err != nil {
			return v, err
		}
	}
	if b, ok := obj[src].([]byte); ok {
		return bytesText(b, t), nil
	}
	if v, ok, err := s.binaryText(obj, src, t, sch); ok || err != nil {
		return v, err
	}
	if v, ok, err := s.modeText(obj, src, t, sch); ok || err != nil {
		return v, err
	}
	if t.base == "bytea" {
		if v, ok := s.recordBytes(r, src, t); ok {
			return v, nil
		}
	}
	if elem, ok := arrayElement(t); ok {
		if v, ok, err := s.arrayText(obj, src, elem); ok || err != nil {
			return v, err
		}
	}
	v, err := s.columnValue(r, obj, src)
	if err == nil && t.base == "jsonb" {
		err = keys.check(v, src)
	}
	return v, err
}

// check is jsonbKeys of v, the text of source src for a jsonb column:
// for $value, the verdict k found in the decode, unless k is nil.
func (k *valueKeys) check(v any, src string) error {
	if src == topology.SourceValue && k != nil {
		return k.err
	}
	return jsonbKeys(v, src)
}

// recordBytes is the text of the key's or the value's bytes as they
// came, for a bytea column of type t, never read as bytea's text input:
// "\x41" would be the one byte 0x41, and a byte that is no UTF-8 no text
// at all. ok is false for any other source, and for an Avro value.
func (s *Sink) recordBytes(r *kgo.Record, src string, t colType) (v any, ok bool) {
	switch src {
	case topology.SourceKey:
		if r.Key == nil {
			return nil, true
		}
		return bytesText(r.Key, t), true
	case topology.SourceValue:
		if !s.typed.avro {
			return bytesText(r.Value, t), true
		}
	}
	return nil, false
}

// arrayText is field src, an array going to an array column whose
// elements are of type elem, as Postgres's array literal; each element is
// then checked by its type's rules. An Avro array is read as its JSON
// (the conversion rules). ok is false when the field is no array.
func (s *Sink) arrayText(obj map[string]any, src string, elem colType) (v any, ok bool, err error) {
	raw, isJSON := obj[src].(json.RawMessage)
	if a, isAvro := obj[src].([]any); isAvro {
		enc, err := s.jsonCodec.Encode(a)
		if err != nil {
			return nil, false, err
		}
		raw, isJSON = enc, true
	}
	if !isJSON || len(raw) == 0 || raw[0] != '[' {
		return nil, false, nil
	}
	text, err := arrayLiteral(raw, src, elem.base == "jsonb" || elem.base == "json")
	return text, true, err
}

// arrayLiteral is raw, the JSON array of field src, as the text of a
// Postgres array literal ("Array Value Input", 8.15.2 in the PostgreSQL
// documentation): each element double-quoted, with its backslashes and
// double quotes escaped, null as an unquoted NULL, a nested array as a
// sub-array (Postgres refuses sub-arrays of different lengths, 22P02;
// but for asJSON, below). An
// element keeps its JSON text, for the element's type to read and check:
// a number as written (1.50 stays 1.50), a string its contents (a lone
// surrogate is an error naming the element, never U+FFFD), true and
// false, an object its bytes. With asJSON (jsonb[], json[]) every element
// but null is its JSON text, a string with its quotes; jsonb would keep
// the last of duplicate keys, so they are refused, as in a jsonb column.
func arrayLiteral(raw []byte, src string, asJSON bool) (string, error) {
	b := make([]byte, 0, len(raw)+8)
	b, err := appendArrayLiteral(b, raw, src, asJSON)
	return string(b), err
}

func appendArrayLiteral(b, arr []byte, path string, asJSON bool) ([]byte, error) {
	b = append(b, '{')
	var buf [32]int
	el := serde.AppendElements(buf[:0], arr)
	for i := 0; i < len(el); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendArrayElement(b, arr[el[i]:el[i+1]], serde.IndexPath(path, i/2), asJSON); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendArrayElement appends e, the JSON of the array element at path, as
// an element of an array literal (see arrayLiteral).
func appendArrayElement(b, e []byte, at string, asJSON bool) ([]byte, error) {
	text := string(e)
	switch e[0] {
	case 'n':
		return append(b, "NULL"...), nil
	case '[':
		if !asJSON { // a JSON array element of jsonb[] is its text
			return appendArrayLiteral(b, e, at, asJSON)
		}
	case '"':
		unquoted, err := serde.Unquote(e, at)
		if err != nil {
			return nil, err
		}
		if !asJSON {
			text = unquoted
		}
	case '{':
		if err := serde.CheckKeys(e, at); err != nil && asJSON {
			return nil, err
		}
	}
	b = append(b, '"')
	for k := 0; k < len(text); k++ {
		if c := text[k]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, text[k])
	}
	return append(b, '"'), nil
}

// jsonbKeys refuses text v of the field src, going to a jsonb column,
// that jsonb would read as JSON with an object of duplicate keys at any
// depth (serde.CheckKeys): jsonb keeps the last copy, where every other
// reader of an object refuses it. An object or array field and $value
// are their JSON text; a string field is its contents, which jsonb
// parses (text that is not JSON is left for Postgres to refuse). A json
// column keeps the bytes as they came, and is not checked.
func jsonbKeys(v any, src string) error {
	text, _ := v.(string)
	if !strings.ContainsAny(text, "{") {
		return nil
	}
	path := src
	if src == topology.SourceValue {
		path = ""
	}
	b := []byte(text)
	if serde.CheckJSON(b) != nil {
		return nil
	}
	return serde.CheckKeys(b, path)
}

// columnValue returns the staging text of one column, or nil for NULL.
// It is text, which the INSERT casts to the column's type (a jsonb column
// is staged as jsonb, and COPY reads it: stagedType), so that a value of
// the wrong type is a data error of its row.
func (s *Sink) columnValue(r *kgo.Record, obj map[string]any, src string) (any, error) {
	if v, ok := s.recordValue(r, obj, src); ok {
		return v, nil
	}
	fv, ok := obj[src]
	if !ok || fv == nil {
		return nil, nil
	}
	switch fv := fv.(type) {
	case string:
		return fv, nil
	case json.Number:
		return string(fv), nil
	case bool:
		return strconv.FormatBool(fv), nil
	case []byte:
		return bytesText(fv, colType{}), nil
	}
	b, err := s.jsonCodec.Encode(fv)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// recordValue is the staging text of a source that is the record's
// ($value, $key, $topic, $partition, $offset, $timestamp); ok is false
// for a field.
func (s *Sink) recordValue(r *kgo.Record, obj map[string]any, src string) (v any, ok bool) {
	switch src {
	case topology.SourceValue:
		if s.cfg.InputFormat == serde.Bytes {
			return `\x` + hex.EncodeToString(r.Value), true // bytea hex input
		}
		if s.typed.avro {
			return obj[topology.SourceValue], true // the record as JSON text (avroValue)
		}
		return recordText(r.Value), true // valid UTF-8: the codec checked
	case topology.SourceKey:
		if r.Key == nil {
			return nil, true
		}
		return string(r.Key), true
	case topology.SourceTopic:
		return r.Topic, true
	case topology.SourcePartition:
		return strconv.FormatInt(int64(r.Partition), 10), true
	case topology.SourceOffset:
		return strconv.FormatInt(r.Offset, 10), true
	case topology.SourceTimestamp:
		if !kafkaconn.HasTimestamp(r.Timestamp) {
			return nil, true // NULL, as Kafka Connect's null timestamp
		}
		return r.Timestamp.UTC().Format(time.RFC3339Nano), true
	}
	return nil, false
}

// recordText is b, a fetched record's value, as a string that shares its
// bytes rather than copy them (a KiB a record, the most garbage a row
// made): a fetched record's bytes are never written (the client reuses
// no buffer the sink could still hold), and the string, a row's text,
// is not kept past the record's batch.
func recordText(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// Debezium change-event ops (the envelope's "op" field).
const (
	opCreate   = "c"
	opUpdate   = "u"
	opRead     = "r" // a snapshot's row
	opDelete   = "d"
	envPayload = "payload" // the envelope's wrapper when the converter adds schemas
)

// changeOp turns a Debezium change event into an op: c, u and r upsert the
// row mapped from the event's after; d deletes the row whose event ID is
// in before (or is the record's key, when the event id column is $key).
// A value of the form {"schema": ..., "payload": {...}} is read from its
// payload. An event that cannot be applied is a *dlq.RecordError, reason
// deadletter.ReasonEnvelope (or deadletter.ReasonEventID for a missing event ID).
func (s *Sink) changeOp(r *kgo.Record) (op, bool, error) {
	body, raw, err := changeBody(r.Value)
	if err != nil {
		return op{}, false, err
	}
	sch, err := s.envelopeSchema(r.Value, body)
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
	}
	v, err := serde.FieldValue(raw)
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("field \"op\": %w", err)}
	}
	kind, _ := v.(string)
	if err := s.checkChangeKey(r); err != nil {
		return op{}, false, err
	}
	switch kind {
	case opCreate, opUpdate, opRead:
		return s.afterOp(r, body, kind, sch.field("after").fieldMap())
	case opDelete:
		return s.deleteOp(r, func(src string) (map[string]any, error) { return changeBefore(body, src) }, sch.field("before").fieldMap())
	}
	return op{}, false, envelopeError("unknown op %s (want c, u, r or d)", shownJSON(raw))
}

// changeBody finds the change event in value, the value itself or its
// "payload" object, and the JSON of the event's "op" field.
func changeBody(value []byte) (body, opField []byte, err error) {
	if err := serde.CheckJSON(value); err != nil {
		return nil, nil, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
	}
	body = value
	raw, isObject, found, err := serde.TopLevelField(body, "op")
	if !isObject {
		return nil, nil, envelopeError("the value is not a json object")
	}
	if !found && err == nil {
		if p, _, ok, _ := serde.TopLevelField(body, envPayload); ok && len(p) > 0 && p[0] == '{' {
			body = p
			raw, _, found, err = serde.TopLevelField(body, "op")
		}
	}
	if err != nil { // duplicate keys
		return nil, nil, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
	}
	if !found {
		return nil, nil, envelopeError(`no "op" field (nor a "payload" object holding one)`)
	}
	return body, raw, nil
}

// afterOp is the op of a change event's c, u or r (kind): an upsert of
// the row mapped from the event's after.
func (s *Sink) afterOp(r *kgo.Record, body []byte, kind string, sch map[string]connectSchema) (op, bool, error) {
	after, _, _, _ := serde.TopLevelField(body, "after") // body's keys are checked
	if len(after) == 0 || after[0] != '{' {
		return op{}, false, envelopeError("op %q needs an \"after\" object (got %s)", kind, shownJSON(after))
	}
	obj, err := serde.JSONFields(after, s.fieldSources)
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("after: %w", err)}
	}
	return s.rowOpSchema(r, obj, sch)
}

// changeBefore decodes field src of the before object of a change
// event's body, for its d.
func changeBefore(body []byte, src string) (map[string]any, error) {
	before, _, _, _ := serde.TopLevelField(body, "before")
	if len(before) == 0 || before[0] != '{' {
		return nil, envelopeError("op \"d\" needs a \"before\" object holding the event id field %q (got %s)", src, shownJSON(before))
	}
	obj, err := serde.JSONFields(before, []string{src})
	if err != nil {
		return nil, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("before: %w", err)}
	}
	return obj, nil
}

// deleteOp is the op of a change event's "d", JSON or Avro: it deletes
// the row whose event ID is the record's key (event id column $key) or
// the event id field of the event's before, which before(src) returns
// decoded (a *dlq.RecordError when the event has no such object). A
// missing, null or empty event ID is a *dlq.RecordError, reason
// deadletter.ReasonEventID. sch are the Connect schemas of before's
// fields (nil for none).
func (s *Sink) deleteOp(r *kgo.Record, before func(src string) (map[string]any, error), sch map[string]connectSchema) (op, bool, error) {
	src := s.cfg.Columns[s.eventIDIndex].Source
	var id any
	if src == topology.SourceKey {
		id = s.keyIDText(r) // changekey.go
	} else {
		obj, err := before(src)
		if err != nil {
			return op{}, false, err
		}
		if sch != nil {
			id, err = s.columnText(r, obj, src, s.typeAt(s.eventIDIndex), sch)
		} else {
			id, err = s.columnValue(r, obj, src)
		}
		if err != nil {
			return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("before: field %q: %w", src, err)}
		}
	}
	if id, _ := id.(string); id != "" {
		return op{rec: r, del: true, id: id}, true, nil
	}
	return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID,
		Err: fmt.Errorf("%w: op \"d\": event id %q is missing, null or empty", errMissingEventID, src)}
}

func envelopeError(format string, args ...any) error {
	return &dlq.RecordError{Reason: deadletter.ReasonEnvelope, Err: fmt.Errorf("%w: "+format, append([]any{errBadChange}, args...)...)}
}

// shownJSON is raw JSON for a message, cut to 40 bytes; "nothing" when
// absent.
func shownJSON(raw []byte) string {
	switch {
	case len(raw) == 0:
		return "nothing"
	case len(raw) > 40:
		return strings.ToValidUTF8(string(raw[:40]), "") + "..."
	}
	return string(raw)
}
