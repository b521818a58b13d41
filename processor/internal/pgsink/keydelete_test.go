package pgsink

import (
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// A delete by a $key event ID (a tombstone, a change event's "d") names
// the row by the text its insert stored, for every key column type: of
// a bytea column the key's bytes in hex, so that a key that is no text
// (an Avro key starts with 0x00) deletes its row.
func TestKeyDeleteIDs(t *testing.T) {
	for _, tt := range []struct {
		col  string
		key  string
		want string
	}{
		{"bytea", "\x00\x00\x00\x00\x07\x02\x06", `\x00000000070206`},
		{"bytea", `{"tenant":3,"id":3}`, `\x7b2274656e616e74223a332c226964223a337d`},
		{"text", `{"tenant":3,"id":3}`, `{"tenant":3,"id":3}`},
		{"bigint", "42", "42"},
		{"uuid", "0b7e7dee-87ac-4f52-b0a9-3b2b3e4c1d5a", "0b7e7dee-87ac-4f52-b0a9-3b2b3e4c1d5a"},
	} {
		t.Run(tt.col, func(t *testing.T) {
			sink := func(envelope, tombstones string) *Sink {
				s := newTestSink(t, func(c *Config) {
					c.EventID, c.Mode, c.Envelope, c.Tombstones = "k", topology.ModeUpsert, envelope, tombstones
					c.Columns = []Column{{"k", topology.SourceKey}, {"v", "v"}}
				})
				s.types = []colType{plainType(tt.col), plainType("text")}
				return s
			}
			rows, changes := sink(topology.EnvelopeNone, topology.TombstonesDelete), sink(topology.EnvelopeDebezium, topology.TombstonesSkip)
			key := []byte(tt.key)
			for _, c := range []struct {
				name string
				s    *Sink
				r    *kgo.Record
				del  bool
			}{
				{"insert", rows, &kgo.Record{Key: key, Value: []byte(`{"v":"x"}`)}, false},
				{"tombstone", rows, &kgo.Record{Key: key}, true},
				{"change insert", changes, &kgo.Record{Key: key, Value: []byte(`{"op":"c","after":{"v":"x"}}`)}, false},
				{"change delete", changes, &kgo.Record{Key: key, Value: []byte(`{"op":"d","before":{"v":"x"}}`)}, true},
			} {
				o, ok, err := c.s.toOp(c.r)
				if err != nil || !ok || o.del != c.del || o.id != tt.want {
					t.Errorf("%s: op id %q del %v, ok %v err %v; want id %q del %v", c.name, o.id, o.del, ok, err, tt.want, c.del)
				}
			}
		})
	}
}

// TestAvroKeyDeleteBytea loads Avro change events whose registry-framed
// composite key (0x00, the schema ID, the record) is the event ID in a
// bytea column: the "d" names the row by the hex its "c" stored.
func TestAvroKeyDeleteBytea(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	const keySchema = `{"type":"record","name":"Key","namespace":"srv.public.items","fields":[{"name":"tenant","type":"int"},{"name":"id","type":"long"}]}`
	id, _, err := reg.RegisterSchema("in-key", sr.Schema{Schema: keySchema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	key := binary.BigEndian.AppendUint32([]byte{0}, uint32(id))
	key = append(key, 0x06, 0x0e) // tenant 3, id 7: Avro's zigzag varints
	s := newTestSink(t, func(c *Config) {
		c.InputFormat = serde.Avro
		c.InputCodec = serde.Config{Registry: serde.Registry{URL: reg.URL()}}
		c.EventID = "k"
		c.Columns = []Column{{"k", topology.SourceKey}, {"id", "id"}}
		c.Mode, c.Envelope = topology.ModeUpsert, topology.EnvelopeDebezium
	})
	s.types = []colType{plainType("bytea"), plainType("bigint")}
	enc, err := serde.NewCodec(serde.Config{Format: serde.Avro, Schema: dbzAvroSchema, Topic: "in", Registry: serde.Registry{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	want := `\x` + hex.EncodeToString(key)
	row := map[string]any{"id": int64(7)}
	for _, ev := range []map[string]any{
		{"before": nil, "after": row, "op": "c"},
		{"before": row, "after": nil, "op": "d"},
	} {
		v, err := enc.Encode(ev)
		if err != nil {
			t.Fatal(err)
		}
		o, ok, err := s.toOp(&kgo.Record{Topic: "in", Key: key, Value: v})
		if err != nil || !ok || o.id != want || o.del != (ev["op"] == "d") {
			t.Fatalf("op %s: id %q del %v, ok %v err %v; want id %q", ev["op"], o.id, o.del, ok, err, want)
		}
	}
}
