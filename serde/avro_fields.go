package serde

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/twmb/franz-go/pkg/sr"
)

// Field is one top-level field of an Avro record schema, described for a
// consumer that maps fields to typed columns (the Postgres sink).
type Field struct {
	Name string
	Type FieldType
}

// FieldType is the type of a Field. A union of null and one other type is
// that type with Nullable set; a union of several non-null types has Kind
// "union".
type FieldType struct {
	// Kind is the Avro type: boolean, int, long, float, double, bytes,
	// string, record, enum, array, map, fixed, null or union.
	Kind string
	// Logical is the logical type this package implements (decimal,
	// uuid, date, time-millis, time-micros, timestamp-millis,
	// timestamp-micros, timestamp-nanos, local-timestamp-*), or "".
	Logical string
	// Precision and Scale are a decimal's.
	Precision, Scale int
	// Nullable is set for a union holding null.
	Nullable bool
	// Connect is Kafka Connect's logical type of the value, as its
	// AvroConverter names it (connect.name: "io.debezium.time.MicroTimestamp"),
	// with its parameters; "" for none.
	Connect           string
	ConnectParameters map[string]string
	// Fields are a record's fields (nil for a record that encloses
	// itself, met again).
	Fields []Field
	// Items is an array's item type.
	Items *FieldType
}

// RecordSchema is the record schema a codec reads a value with: its
// registry ID (0 without a registry) and its top-level fields in schema
// order.
type RecordSchema struct {
	ID     int
	Fields []Field
}

// ValueSchema returns the record schema that c.Decode(b) reads b with:
// the reader schema when the codec has one, else the writer schema named
// by b's frame (fetched from the registry and cached, as Decode does).
// Errors are Decode's (ErrFrame, ErrUnknownSchema, ErrTransient), or
// ErrUnsupported for a codec that is not Avro or a schema that is not a
// record.
func ValueSchema(c Codec, b []byte) (RecordSchema, error) {
	ac, ok := c.(*avroCodec)
	if !ok {
		return RecordSchema{}, fmt.Errorf("%w: format %s has no schema", ErrUnsupported, c.Format())
	}
	s, id := ac.writer, 0
	if ac.reg != nil {
		if len(b) < 5 || b[0] != 0 {
			return RecordSchema{}, fmt.Errorf("%w: not a 5-byte header with magic byte 0", ErrFrame)
		}
		wid, _, err := confluent.DecodeID(b)
		if err != nil {
			return RecordSchema{}, fmt.Errorf("%w: %v", ErrFrame, err)
		}
		id = wid
		if s, err = ac.reg.schema(id); err != nil {
			return RecordSchema{}, err
		}
		if ac.reader != nil {
			s = ac.reader
		}
	}
	return recordSchema(s, id)
}

// LatestSchema returns the record schema a codec reads new values with:
// its reader schema, its schema file, or else the latest version
// registered under its subject (<topic>-value by default). A subject with
// no version yet is ErrUnknownSchema; a registry that does not answer,
// ErrTransient.
func LatestSchema(ctx context.Context, c Codec) (RecordSchema, error) {
	ac, ok := c.(*avroCodec)
	if !ok {
		return RecordSchema{}, fmt.Errorf("%w: format %s has no schema", ErrUnsupported, c.Format())
	}
	switch {
	case ac.reader != nil:
		return recordSchema(ac.reader, 0)
	case ac.reg == nil || ac.writer != nil:
		return recordSchema(ac.writer, 0)
	}
	ctx, cancel := context.WithTimeout(ctx, ac.reg.timeout)
	defer cancel()
	got, err := ac.reg.cl.SchemaByVersion(ctx, ac.subject, -1)
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
			return RecordSchema{}, fmt.Errorf("%w: subject %q has no schema registered yet", ErrUnknownSchema, ac.subject)
		}
		return RecordSchema{}, fmt.Errorf("%w: latest schema of subject %q: %v", ErrTransient, ac.subject, err)
	}
	s, err := ac.reg.schema(got.ID)
	if err != nil {
		return RecordSchema{}, err
	}
	return recordSchema(s, got.ID)
}

func recordSchema(s *avroSchema, id int) (RecordSchema, error) {
	if s == nil || s.typ.kind != kindRecord {
		return RecordSchema{}, fmt.Errorf("%w: schema id %d is not a record", ErrUnsupported, id)
	}
	return RecordSchema{ID: id, Fields: recordFields(s.typ, map[*avroType]bool{})}, nil
}

// recordFields are the fields of record t; open holds the records being
// described, so that a recursive one ends.
func recordFields(t *avroType, open map[*avroType]bool) []Field {
	if open[t] {
		return nil
	}
	open[t] = true
	defer delete(open, t)
	out := make([]Field, 0, len(t.fields))
	for _, f := range t.fields {
		out = append(out, Field{Name: f.name, Type: fieldType(f.typ, open)})
	}
	return out
}

func fieldType(t *avroType, open map[*avroType]bool) FieldType {
	if t.kind == kindUnion {
		var other []*avroType
		for _, b := range t.branches {
			if b.kind != kindNull {
				other = append(other, b)
			}
		}
		nullable := len(other) < len(t.branches)
		if len(other) == 1 {
			ft := fieldType(other[0], open)
			ft.Nullable = nullable
			return ft
		}
		return FieldType{Kind: "union", Nullable: nullable}
	}
	ft := FieldType{Kind: t.kind.String(), Logical: t.logical.String(), Precision: t.precision, Scale: t.scale, Nullable: t.kind == kindNull,
		Connect: t.connect, ConnectParameters: t.connectParams}
	if t.kind == kindRecord {
		ft.Fields = recordFields(t, open)
	}
	if t.kind == kindArray && t.items != nil {
		items := fieldType(t.items, open)
		ft.Items = &items
	}
	return ft
}
