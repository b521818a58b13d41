package serde

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const fieldsSchema = `{"type":"record","name":"T","fields":[
  {"name":"id","type":"long"},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
  {"name":"at","type":["null",{"type":"long","logicalType":"timestamp-millis"}],"default":null},
  {"name":"either","type":["string","long"]},
  {"name":"tags","type":{"type":"array","items":"string"}}
]}`

func TestValueSchema(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id1 := register(t, reg, "t-value", sr.Schema{Schema: v1Schema, Type: sr.TypeAvro})
	id2 := register(t, reg, "t-value", sr.Schema{Schema: fieldsSchema, Type: sr.TypeAvro})
	c := mustCodec(t, Config{Format: Avro, Topic: "t", Registry: Registry{URL: reg.URL()}})
	wantFields := []Field{
		{"id", FieldType{Kind: "long"}},
		{"amount", FieldType{Kind: "bytes", Logical: "decimal", Precision: 12, Scale: 2}},
		{"at", FieldType{Kind: "long", Logical: "timestamp-millis", Nullable: true}},
		{"either", FieldType{Kind: "union"}},
		{"tags", FieldType{Kind: "array", Items: &FieldType{Kind: "string"}}},
	}
	t.Run("writer schema of a frame", func(t *testing.T) {
		got, err := ValueSchema(c, frame(id2, nil))
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != id2 || !reflect.DeepEqual(got.Fields, wantFields) {
			t.Fatalf("got %+v, want id %d fields %+v", got, id2, wantFields)
		}
	})
	t.Run("latest of the subject", func(t *testing.T) {
		got, err := LatestSchema(context.Background(), c)
		if err != nil || got.ID != id2 || len(got.Fields) != len(wantFields) {
			t.Fatalf("got %+v, %v; want id %d", got, err, id2)
		}
	})
	t.Run("another id", func(t *testing.T) {
		got, err := ValueSchema(c, frame(id1, nil))
		if err != nil || got.ID != id1 || got.Fields[0].Name != "event_id" {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("bad frames", func(t *testing.T) {
		for _, b := range [][]byte{nil, {0, 0}, {1, 0, 0, 0, 1}} {
			if _, err := ValueSchema(c, b); !errors.Is(err, ErrFrame) {
				t.Errorf("ValueSchema(%v) = %v, want ErrFrame", b, err)
			}
		}
		if _, err := ValueSchema(c, frame(9999, nil)); !errors.Is(err, ErrUnknownSchema) {
			t.Errorf("unknown id: %v, want ErrUnknownSchema", err)
		}
	})
	t.Run("subject with no schema", func(t *testing.T) {
		c := mustCodec(t, Config{Format: Avro, Topic: "none", Registry: Registry{URL: reg.URL()}})
		if _, err := LatestSchema(context.Background(), c); !errors.Is(err, ErrUnknownSchema) {
			t.Fatalf("err %v, want ErrUnknownSchema", err)
		}
	})
	t.Run("not avro", func(t *testing.T) {
		j, _ := New(JSON)
		if _, err := ValueSchema(j, []byte(`{}`)); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("err %v, want ErrUnsupported", err)
		}
	})
	t.Run("raw schema", func(t *testing.T) {
		raw := mustCodec(t, Config{Format: Avro, Schema: fieldsSchema})
		got, err := ValueSchema(raw, nil)
		if err != nil || got.ID != 0 || !reflect.DeepEqual(got.Fields, wantFields) {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
}
