package pgsink

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

func TestDecodeBinary(t *testing.T) {
	for _, tc := range []struct {
		mode, in string
		want     []byte
		bad      bool
	}{
		{topology.BinaryBytes, "AP8Q", []byte{0x00, 0xff, 0x10}, false},
		{topology.BinaryBase64, "AP8Q", []byte{0x00, 0xff, 0x10}, false},
		{topology.BinaryBase64, "+/8=", []byte{0xfb, 0xff}, false},
		{topology.BinaryBase64, "-_8=", nil, true}, // url-safe alphabet
		{topology.BinaryBase64, "AP8", nil, true},  // padding missing
		{topology.BinaryBase64, "AP9=", nil, true}, // unused bits set: not the encoder's text
		{topology.BinaryBase64URLSafe, "-_8=", []byte{0xfb, 0xff}, false},
		{topology.BinaryBase64URLSafe, "+/8=", nil, true},
		{topology.BinaryHex, "00ff10", []byte{0x00, 0xff, 0x10}, false},
		{topology.BinaryHex, "00FF10", []byte{0x00, 0xff, 0x10}, false},
		{topology.BinaryHex, `\x00ff10`, nil, true}, // bytea's text input, not the connector's
		{topology.BinaryHex, "0f1", nil, true},
		{topology.BinaryBytes, "", []byte{}, false},
		{topology.BinaryBase64URLSafe, "", []byte{}, false},
		{topology.BinaryHex, "", []byte{}, false},
	} {
		t.Run(tc.mode+"/"+tc.in, func(t *testing.T) {
			got, err := decodeBinary(tc.in, tc.mode)
			if (err != nil) != tc.bad || (!tc.bad && string(got) != string(tc.want)) {
				t.Fatalf("decodeBinary(%q, %s) = %x, %v; want %x (error %v)", tc.in, tc.mode, got, err, tc.want, tc.bad)
			}
		})
	}
}

// A change event's string for a bytea or bytea[] column is read by the
// binary handling mode where no schema types it as bytes; a value that
// does not decode is a decode dead letter naming the field and the mode;
// the placeholder, as Debezium writes it in each mode, keeps the stored
// value.
func TestChangeOpBinary(t *testing.T) {
	const ph = "__debezium_unavailable_value"
	event := func(b string) string { return `{"op":"c","after":{"id":1,"b":` + b + `}}` }
	wrapped := func(typ, b string) string {
		return `{"schema":{"type":"struct","fields":[{"field":"after","type":"struct","fields":[{"field":"id","type":"int32"},{"field":"b","type":"` + typ + `"}]}]},"payload":` + event(b) + `}`
	}
	for _, tc := range []struct {
		name     string
		envelope string
		mode     string // "" leaves the default
		arr      bool   // column b is bytea[]
		value    string
		want     any    // column b's staging text
		keep     bool   // column b is the placeholder
		errWant  string // a decode dead letter saying this
	}{
		{name: "default base64", value: event(`"AP8Q"`), want: `\x00ff10`},
		{name: "bytes", mode: topology.BinaryBytes, value: event(`"AP8Q"`), want: `\x00ff10`},
		{name: "base64", mode: topology.BinaryBase64, value: event(`"+/8="`), want: `\xfbff`},
		{name: "base64-url-safe", mode: topology.BinaryBase64URLSafe, value: event(`"-_8="`), want: `\xfbff`},
		{name: "hex", mode: topology.BinaryHex, value: event(`"00ff10"`), want: `\x00ff10`},
		{name: "empty", value: event(`""`), want: `\x`},
		{name: "null", value: event(`null`), want: nil},
		{name: "not base64", value: event(`"\\x00ff10"`), errWant: `field "b" (binary_handling bytes): not base64`},
		{name: "not hex", mode: topology.BinaryHex, value: event(`"AP8Q"`), errWant: `field "b" (binary_handling hex): not hex`},
		{name: "url-safe text in base64", mode: topology.BinaryBase64, value: event(`"-_8="`), errWant: `(binary_handling base64): not base64`},
		{name: "a number", value: event(`12`), errWant: `field "b" (binary_handling bytes): want text, got 12`},
		{name: "placeholder base64", value: event(`"` + base64.StdEncoding.EncodeToString([]byte(ph)) + `"`), keep: true},
		{name: "placeholder text", value: event(`"` + ph + `"`), keep: true},
		{name: "placeholder text in hex mode", mode: topology.BinaryHex, value: event(`"` + ph + `"`), keep: true},
		{name: "placeholder text in url-safe mode", mode: topology.BinaryBase64URLSafe, value: event(`"` + ph + `"`), keep: true},
		// The connector writes the placeholder's bytes only in bytes mode:
		// in another, text that decodes to them is a value.
		{name: "placeholder's bytes in hex mode", mode: topology.BinaryHex, value: event(`"` + hex.EncodeToString([]byte(ph)) + `"`), want: `\x` + hex.EncodeToString([]byte(ph))},
		{name: "placeholder's bytes in base64 mode", mode: topology.BinaryBase64, value: event(`"` + base64.StdEncoding.EncodeToString([]byte(ph)) + `"`), want: `\x` + hex.EncodeToString([]byte(ph))},
		{name: "placeholder base64 in hex mode", mode: topology.BinaryHex, value: event(`"` + base64.StdEncoding.EncodeToString([]byte(ph)) + `"`), errWant: "not hex"},
		{name: "array", arr: true, value: event(`["AP8Q",null,""]`), want: `{"\\x00ff10",NULL,"\\x"}`},
		{name: "array hex", arr: true, mode: topology.BinaryHex, value: event(`[["00ff"],["10"]]`), want: `{{"\\x00ff"},{"\\x10"}}`},
		{name: "array bad element", arr: true, value: event(`["AP8Q","A"]`), errWant: `field "b[1]" (binary_handling bytes): not base64`},
		{name: "array of numbers", arr: true, value: event(`[1]`), errWant: `field "b[0]" (binary_handling bytes): want text, got 1`},
		{name: "array placeholder", arr: true, value: event(`["` + base64.StdEncoding.EncodeToString([]byte(ph)) + `"]`), keep: true},
		// A schema's bytes is Connect's base64 whatever the mode: read once.
		{name: "bytes schema", mode: topology.BinaryHex, value: wrapped("bytes", `"AP8Q"`), want: `\x00ff10`},
		// In bytes mode a string schema is a text column's: its text, as before.
		{name: "string schema bytes mode", value: wrapped("string", `"AP8Q"`), want: "AP8Q"},
		{name: "string schema hex mode", mode: topology.BinaryHex, value: wrapped("string", `"00ff10"`), want: `\x00ff10`},
		// Rows without the envelope: no mode unless set.
		{name: "row without mode", envelope: topology.EnvelopeNone, value: `{"id":1,"b":"\\x00ff10"}`, want: `\x00ff10`},
		{name: "row with mode", envelope: topology.EnvelopeNone, mode: topology.BinaryBytes, value: `{"id":1,"b":"AP8Q"}`, want: `\x00ff10`},
		{name: "row with mode, bad", envelope: topology.EnvelopeNone, mode: topology.BinaryBytes, value: `{"id":1,"b":"\\x00ff10"}`, errWant: "(binary_handling bytes): not base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) {
				c.EventID = "id"
				c.Columns = []Column{{"id", "id"}, {"b", "b"}}
				c.Mode = topology.ModeUpsert
				c.Envelope = topology.EnvelopeDebezium
				if tc.envelope != "" {
					c.Envelope = tc.envelope
				}
				c.BinaryHandling = tc.mode
				c.UnavailableValue = ph
			})
			b := plainType("bytea")
			if tc.arr {
				b = colType{name: "bytea[]", base: "bytea[]", full: "bytea[]", mod: -1}
			}
			s.types = []colType{plainType("integer"), b}
			o, ok, err := s.toOp(&kgo.Record{Topic: "in", Value: []byte(tc.value)})
			if tc.errWant != "" {
				var re *dlq.RecordError
				if !errors.As(err, &re) || re.Reason != deadletter.ReasonDecode || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err = %v; want a decode dead letter with %q", err, tc.errWant)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("toOp: %v, %v", ok, err)
			}
			if tc.keep {
				if len(o.keep) < 2 || !o.keep[1] {
					t.Fatalf("column b is %v, not kept", o.row[1])
				}
				return
			}
			if len(o.keep) > 1 && o.keep[1] {
				t.Fatal("column b kept as a placeholder")
			}
			if o.row[1] != tc.want {
				t.Fatalf("column b = %#v; want %#v", o.row[1], tc.want)
			}
		})
	}
}

// dbzAvroBinarySchema is a Debezium change event in Avro with a bytea
// column b as binary.handling.mode writes it: bytes, or a string.
func dbzAvroBinarySchema(b string) string {
	return `{"type":"record","name":"Envelope","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
   {"name":"id","type":"long"},{"name":"b","type":["null","` + b + `"],"default":null}]}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"op","type":"string"}]}`
}

// In Avro, bytes are bytes in any mode; a string is read by the mode
// unless that is bytes.
func TestAvroChangeBinary(t *testing.T) {
	for _, tc := range []struct {
		name, mode, typ string
		b               any
		want            any
		errWant         string
	}{
		{"bytes", topology.BinaryBytes, "bytes", []byte{0x00, 0xff, 0x10}, `\x00ff10`, ""},
		{"bytes in hex mode", topology.BinaryHex, "bytes", []byte{0x00, 0xff, 0x10}, `\x00ff10`, ""},
		{"hex string", topology.BinaryHex, "string", "00ff10", `\x00ff10`, ""},
		{"base64 string", topology.BinaryBase64, "string", "AP8Q", `\x00ff10`, ""},
		{"bad hex string", topology.BinaryHex, "string", "AP8Q", nil, `field "b" (binary_handling hex): not hex`},
		{"string in bytes mode", topology.BinaryBytes, "string", "AP8Q", "AP8Q", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := dbzAvroBinarySchema(tc.typ)
			s := newTestSink(t, func(c *Config) {
				c.InputFormat = serde.Avro
				c.InputCodec = serde.Config{Schema: schema}
				c.EventID = "id"
				c.Columns = []Column{{"id", "id"}, {"b", "b"}}
				c.Mode = topology.ModeUpsert
				c.Envelope = topology.EnvelopeDebezium
				c.BinaryHandling = tc.mode
			})
			s.types = []colType{plainType("bigint"), plainType("bytea")}
			o, ok, err := s.toOp(avroRecord(t, schema, map[string]any{"before": nil, "after": map[string]any{"id": int64(1), "b": tc.b}, "op": "c"}))
			if tc.errWant != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err = %v; want %q", err, tc.errWant)
				}
				return
			}
			if err != nil || !ok || o.row[1] != tc.want {
				t.Fatalf("column b = %#v (%v, %v); want %#v", o.row[1], ok, err, tc.want)
			}
		})
	}
}
