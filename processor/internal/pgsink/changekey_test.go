package pgsink

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// TestAvroChangeKeyFields refuses Avro change events whose registry-framed
// key record has more fields than the event id column's, on c and d,
// and loads those whose key is the event id field alone.
func TestAvroChangeKeyFields(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	const composite = `{"type":"record","name":"Key","namespace":"srv.public.items","fields":[{"name":"tenant","type":"int"},{"name":"id","type":"long"}]}`
	const single = `{"type":"record","name":"Key","namespace":"srv.public.items","fields":[{"name":"id","type":"long"}]}`
	frame := func(schema string) []byte {
		id, _, err := reg.RegisterSchema("in-key", sr.Schema{Schema: schema, Type: sr.TypeAvro})
		if err != nil {
			t.Fatal(err)
		}
		k := []byte{0, 0, 0, 0, 0, 2, 2} // the record's bytes are not read
		binary.BigEndian.PutUint32(k[1:5], uint32(id))
		return k
	}
	compositeKey, singleKey := frame(composite), frame(single)
	s := newTestSink(t, func(c *Config) {
		c.InputFormat = serde.Avro
		c.InputCodec = serde.Config{Registry: serde.Registry{URL: reg.URL()}}
		c.EventID = "id"
		c.Columns = []Column{{"id", "id"}, {"ts", "ts"}, {"t", "t"}, {"amount", "amount"}, {"vs", "vs"}, {"d", "d"}}
		c.Mode = topology.ModeUpsert
		c.Envelope = topology.EnvelopeDebezium
	})
	s.types = []colType{plainType("bigint"), plainType("timestamp without time zone"), plainType("time without time zone"),
		plainType("numeric"), plainType("numeric"), plainType("date")}
	enc, err := serde.NewCodec(serde.Config{Format: serde.Avro, Schema: dbzAvroSchema, Topic: "in", Registry: serde.Registry{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	row := map[string]any{"id": int64(7)}
	for _, tc := range []struct {
		name   string
		key    []byte
		op     string
		reason string
	}{
		{"create, key of the event id", singleKey, "c", ""},
		{"delete, key of the event id", singleKey, "d", ""},
		{"create, composite key", compositeKey, "c", deadletter.ReasonEventID},
		{"delete, composite key", compositeKey, "d", deadletter.ReasonEventID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := map[string]any{"before": nil, "after": row, "op": tc.op}
			if tc.op == "d" {
				ev = map[string]any{"before": row, "after": nil, "op": tc.op}
			}
			v, err := enc.Encode(ev)
			if err != nil {
				t.Fatal(err)
			}
			_, ok, err := s.toOp(&kgo.Record{Topic: "in", Key: tc.key, Value: v})
			if tc.reason == "" {
				if err != nil || !ok {
					t.Fatalf("toOp: %v, %v", ok, err)
				}
				return
			}
			var re *dlq.RecordError
			if !errors.As(err, &re) || re.Reason != tc.reason || !errors.Is(err, errKeyFields) {
				t.Fatalf("err %v; want reason %s", err, tc.reason)
			}
		})
	}
}
