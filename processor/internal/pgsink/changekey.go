package pgsink

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// tombstoneOp is the delete of a tombstone (a null value, tombstones
// delete). With event id column $key, the key is the event ID as it
// came. Otherwise a key that is a JSON object, as Kafka Connect's JSON
// converter writes a row's key ({"id": 1}, or {"schema": ...,
// "payload": {"id": 1}} with schemas.enable), is read by its fields:
// they must be the event id column's field, nothing more or less, for
// the delete to name one row. A key that is no object is the event ID's
// text, as for a key written by a string converter.
func (s *Sink) tombstoneOp(r *kgo.Record) (op, bool, error) {
	src := s.cfg.Columns[s.eventIDIndex].Source
	if src == topology.SourceKey {
		return op{rec: r, del: true, id: s.keyIDText(r)}, true, nil
	}
	if !looksLikeObject(r.Key) {
		return op{rec: r, del: true, id: string(r.Key)}, true, nil
	}
	if err := serde.CheckJSON(r.Key); err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: fmt.Errorf("%w: the key is not json: %w", errMissingEventID, err)}
	}
	body, fieldSchemas, err := s.unwrapPayload(r.Key)
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: fmt.Errorf("%w: key: %w", errMissingEventID, err)}
	}
	if !looksLikeObject(body) {
		// A key schema of one value, not a struct: the value is the ID.
		v, err := serde.FieldValue(body)
		if err != nil {
			return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("key: %w", err)}
		}
		return s.keyDelete(r, map[string]any{src: v}, src, map[string]connectSchema{src: fieldSchemas[""]})
	}
	names, err := memberNames(body)
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID, Err: fmt.Errorf("%w: key: %w", errMissingEventID, err)}
	}
	if len(names) != 1 || names[0] != src {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID,
			Err: fmt.Errorf("%w: the key's fields (%s) are not the key column's: column %q holds field %q (a tombstone deletes one row by its whole key)",
				errKeyFields, strings.Join(quoteAll(names), ", "), s.cfg.EventID, src)}
	}
	obj, err := serde.JSONFields(body, []string{src})
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("key: %w", err)}
	}
	return s.keyDelete(r, obj, src, fieldSchemas)
}

// keyIDText is the event ID of r when the event id column's source is
// $key, the text an inserted row's holds (columnText): of a bytea column
// the key's bytes in hex, which any key is, where the bytes themselves
// may be no text (an Avro key starts with the byte 0x00).
func (s *Sink) keyIDText(r *kgo.Record) string {
	v, _ := s.columnText(r, nil, topology.SourceKey, s.typeAt(s.eventIDIndex), nil)
	id, _ := v.(string)
	return id
}

// keyDelete is the delete of tombstone r whose key's field src (in obj,
// with Connect schemas sch) is the event ID.
func (s *Sink) keyDelete(r *kgo.Record, obj map[string]any, src string, sch map[string]connectSchema) (op, bool, error) {
	id, err := s.columnText(r, obj, src, s.typeAt(s.eventIDIndex), sch)
	if err != nil {
		return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: fmt.Errorf("key: %w", err)}
	}
	if id, _ := id.(string); id != "" {
		return op{rec: r, del: true, id: id}, true, nil
	}
	return op{}, false, &dlq.RecordError{Reason: deadletter.ReasonEventID,
		Err: fmt.Errorf("%w: the key's field %q is null or empty", errMissingEventID, src)}
}

// looksLikeObject reports whether b, past leading white space, starts a
// JSON object.
func looksLikeObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

// unwrapPayload returns the object a Connect JSON value carries: with
// schemas.enable, {"schema": {...}, "payload": {...}}, its payload and
// the schemas of its fields (by name); else obj itself and no schemas.
// A payload that is one value, not an object, comes with its schema as
// the field "". obj passed CheckJSON.
func (s *Sink) unwrapPayload(obj []byte) (body []byte, fields map[string]connectSchema, err error) {
	names, err := memberNames(obj)
	if err != nil {
		return nil, nil, err
	}
	if len(names) != 2 || !slices.Contains(names, "schema") || !slices.Contains(names, envPayload) {
		return obj, nil, nil
	}
	p, _, _, _ := serde.TopLevelField(obj, envPayload)
	raw, _, _, _ := serde.TopLevelField(obj, "schema")
	if len(p) == 0 || len(raw) == 0 || raw[0] != '{' {
		return obj, nil, nil
	}
	sc, err := s.typed.schemas.parse(raw)
	if err != nil {
		return nil, nil, err
	}
	if p[0] != '{' {
		return p, map[string]connectSchema{"": *sc}, nil
	}
	return p, sc.fieldMap(), nil
}

// memberNames are the keys of JSON object obj (checked), in order.
func memberNames(obj []byte) ([]string, error) {
	var buf [8]serde.Member
	ms, err := serde.AppendMembers(buf[:0], obj[skipSpaces(obj):], "")
	if err != nil {
		return nil, err
	}
	body := obj[skipSpaces(obj):]
	names := make([]string, len(ms))
	for i, m := range ms {
		if names[i], err = serde.Unquote(m.Key(body), ""); err != nil {
			return nil, err
		}
	}
	return names, nil
}

func skipSpaces(b []byte) int {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func quoteAll(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return q
}

// typeAt is the type of column i as read from the table; the zero
// colType before it is read (exactly verify reads event IDs without it).
func (s *Sink) typeAt(i int) colType {
	if i < len(s.types) {
		return s.types[i]
	}
	return colType{}
}

// checkChangeKey refuses change event r when its key names the row by
// more fields than the event id column's one: the event ID is then a
// part of the row's key, and an upsert or delete by it would merge or
// delete the other rows that share that part (tenant 2's id 1 deleting
// tenant 1's). A tombstone's delete is refused the same way
// (tombstoneOp). Keys that are no object, or no Avro record, pass: the
// key says nothing of the row's fields. A dead letter, reason event_id.
func (s *Sink) checkChangeKey(r *kgo.Record) error {
	src := s.cfg.Columns[s.eventIDIndex].Source
	if src == topology.SourceKey || len(r.Key) == 0 {
		return nil
	}
	names := s.keyFieldNames(r.Key)
	if len(names) <= 1 {
		return nil
	}
	return &dlq.RecordError{Reason: deadletter.ReasonEventID,
		Err: fmt.Errorf("%w: the key's fields (%s) name the row, and column %q holds only field %q (the sink never writes or deletes by a part of a key: map the event id column to $key)",
			errKeyFields, strings.Join(quoteAll(names), ", "), s.cfg.EventID, src)}
}

// keyFieldNames are the fields of record key k: a JSON object's members
// (a Connect JSON payload's, with schemas.enable), or the fields of the
// Avro record a registry frame names; nil for any other key.
func (s *Sink) keyFieldNames(k []byte) []string {
	if s.typed.avro {
		return s.avroKeyFields(k)
	}
	if !looksLikeObject(k) || serde.CheckJSON(k) != nil {
		return nil
	}
	body, _, err := s.unwrapPayload(k)
	if err != nil || !looksLikeObject(body) {
		return nil
	}
	names, _ := memberNames(body)
	return names
}

// avroKeyFields are the fields of the Avro record key k, read with its
// writer schema from the registry (cached by schema ID); nil when k is
// no registry frame or its schema cannot be read.
func (s *Sink) avroKeyFields(k []byte) []string {
	if len(k) < 5 || k[0] != 0 || s.cfg.InputCodec.Registry.URL == "" {
		return nil
	}
	id := binary.BigEndian.Uint32(k[1:5])
	s.typed.keyMu.Lock()
	defer s.typed.keyMu.Unlock()
	if names, ok := s.typed.keyFields[id]; ok {
		return names
	}
	if s.typed.keyCodec == nil {
		// The value's reader schema and subject do not apply to keys.
		cfg := s.cfg.inputCodec()
		cfg.SchemaFile, cfg.Schema, cfg.Registry.ReaderSchema, cfg.Registry.Subject = "", "", "", cfg.Topic+"-key"
		c, err := serde.NewCodec(cfg)
		if err != nil {
			return nil
		}
		s.typed.keyCodec = c
	}
	rs, err := serde.ValueSchema(s.typed.keyCodec, k)
	if err != nil {
		return nil // a registry hiccup: not cached, tried again
	}
	var names []string
	for _, f := range rs.Fields {
		names = append(names, f.Name)
	}
	if s.typed.keyFields == nil {
		s.typed.keyFields = map[uint32][]string{}
	}
	s.typed.keyFields[id] = names
	return names
}
