package pgsink

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

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
