package serde

import (
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// defaultCases are field defaults as the Avro specification reads them
// ("Complex Types / Records", the table of default values): a bytes or
// fixed default is a string whose code points 0-255 are the bytes, a
// union's is of its first branch, and records, arrays and maps nest them.
var defaultCases = []struct {
	name, typ, def string
	want           any
}{
	{"bytes", `"bytes"`, `"\u00ff"`, []byte{0xff}},
	{"bytes of every width", `"bytes"`, `"\u0000\u007f\u0080\u00ff"`, []byte{0x00, 0x7f, 0x80, 0xff}},
	{"empty bytes", `"bytes"`, `""`, []byte{}},
	{"bytes as plain text", `"bytes"`, `"ab"`, []byte("ab")},
	{"fixed of 2", `{"type":"fixed","name":"F2","size":2}`, `"\u00ff\u00fe"`, []byte{0xff, 0xfe}},
	{"fixed of 4", `{"type":"fixed","name":"F4","size":4}`, `"\u00ff\u00fe\u0001\u0000"`, []byte{0xff, 0xfe, 0x01, 0x00}},
	{"union, bytes first", `["bytes","null"]`, `"\u00ff"`, []byte{0xff}},
	{"union, fixed first", `[{"type":"fixed","name":"U2","size":2},"null"]`, `"\u0080\u0081"`, []byte{0x80, 0x81}},
	{"union, null first", `["null","bytes"]`, `null`, nil},
	{"record of fixed and bytes", `{"type":"record","name":"Inner","fields":[
		{"name":"a","type":{"type":"fixed","name":"F1","size":1}},
		{"name":"b","type":"bytes","default":"\u00fe"}]}`,
		`{"a":"\u00ff"}`, map[string]any{"a": []byte{0xff}, "b": []byte{0xfe}}},
	{"array of bytes", `{"type":"array","items":"bytes"}`, `["\u00ff","a"]`, []any{[]byte{0xff}, []byte("a")}},
	{"map of fixed", `{"type":"map","values":{"type":"fixed","name":"M1","size":1}}`, `{"k":"\u00e9"}`, map[string]any{"k": []byte{0xe9}}},
	{"recursive record, null first", `["null","R"]`, `null`, nil},
	{"map of arrays of unions of bytes", `{"type":"map","values":{"type":"array","items":["bytes","null"]}}`,
		`{"k":["\u00ff",""]}`, map[string]any{"k": []any{[]byte{0xff}, []byte{}}}},
}

// defaultRecordSchema is a record of an id and field f of type typ with
// default def; without def, of the id alone.
func defaultRecordSchema(typ, def string) string {
	if def == "" {
		return `{"type":"record","name":"R","fields":[{"name":"id","type":"string"}]}`
	}
	return `{"type":"record","name":"R","fields":[{"name":"id","type":"string"},{"name":"f","type":` + typ + `,"default":` + def + `}]}`
}

// TestAvroDefaultsAsSpecified reads each default on every path that uses
// one: a reader schema's field the writer lacks (raw codec and registry),
// a field the value to encode leaves out, and a registry writer schema
// that has the default (which decoding never uses, but must accept).
func TestAvroDefaultsAsSpecified(t *testing.T) {
	for _, tc := range defaultCases {
		t.Run(tc.name, func(t *testing.T) {
			schema := defaultRecordSchema(tc.typ, tc.def)
			if err := CheckSchema([]byte(schema)); err != nil {
				t.Fatalf("CheckSchema: %v", err)
			}
			got, err := resolveWith(t, defaultRecordSchema("", ""), schema, map[string]any{"id": "x"})
			if err != nil {
				t.Fatalf("reader default: %v", err)
			}
			if f := got.(map[string]any)["f"]; !reflect.DeepEqual(f, tc.want) {
				t.Errorf("reader default = %#v, want %#v", f, tc.want)
			}
			c := mustCodec(t, Config{Format: Avro, Schema: schema})
			_, back := roundTrip(t, c, map[string]any{"id": "x"})
			if f := back.(map[string]any)["f"]; !reflect.DeepEqual(f, tc.want) {
				t.Errorf("encoded default = %#v, want %#v", f, tc.want)
			}
			reg := srfake.New()
			defer reg.Close()
			id := register(t, reg, "s", sr.Schema{Schema: schema, Type: sr.TypeAvro})
			datum := rawAvro(t, schema, map[string]any{"id": "y"})
			got, err = mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL()}}).Decode(frame(id, datum))
			if err != nil {
				t.Fatalf("registry writer schema with the default: %v", err)
			}
			if f := got.(map[string]any)["f"]; !reflect.DeepEqual(f, tc.want) {
				t.Errorf("registry decode = %#v, want %#v", f, tc.want)
			}
		})
	}
}

// TestAvroDefaultsRefused: a default the specification does not allow
// makes the schema invalid, with an error that names the field and says
// why, on every path that parses a schema.
func TestAvroDefaultsRefused(t *testing.T) {
	tests := []struct {
		name, typ, def string
		want           string
	}{
		{"bytes above 255", `"bytes"`, `"a\u0100"`,
			`record "R" field "f": invalid default: code point U+0100 at index 1 is above 255: a bytes default is a string of code points 0-255, one per byte`},
		{"fixed above 255", `{"type":"fixed","name":"F","size":1}`, `"\u20ac"`,
			`record "R" field "f": invalid default: code point U+20AC at index 0 is above 255`},
		{"fixed too short by its code points", `{"type":"fixed","name":"F","size":4}`, `"\u00ff\u00fe"`,
			`record "R" field "f": invalid default: 2 bytes for F of size 4`},
		{"fixed too long", `{"type":"fixed","name":"F","size":1}`, `"ab"`,
			`record "R" field "f": invalid default: 2 bytes for F of size 1`},
		{"bytes not a string", `"bytes"`, `[255]`,
			`record "R" field "f": invalid default: a bytes default is a JSON string of code points 0-255, not an array`},
		{"union's first branch bytes above 255", `["bytes","null"]`, `"\u0100"`,
			`record "R" field "f": invalid default: a union's default is of its first branch, bytes: code point U+0100`},
		{"union's first branch null", `["null","bytes"]`, `"\u00ff"`,
			`record "R" field "f": invalid default: a union's default is of its first branch, null, not a string`},
		{"record field above 255", `{"type":"record","name":"In","fields":[{"name":"a","type":"bytes"}]}`, `{"a":"\u0100"}`,
			`record "R" field "f": invalid default: a: code point U+0100`},
		{"record field missing", `{"type":"record","name":"In","fields":[{"name":"a","type":"bytes"}]}`, `{}`,
			`record "R" field "f": invalid default: field "a" missing`},
		{"array element above 255", `{"type":"array","items":"bytes"}`, `["\u00ff","\u0100"]`,
			`record "R" field "f": invalid default: [1]: code point U+0100`},
		{"map value above 255", `{"type":"map","values":"bytes"}`, `{"k":"\u0100"}`,
			`record "R" field "f": invalid default: k: code point U+0100`},
		{"nested record in array in map", `{"type":"map","values":{"type":"array","items":{"type":"record","name":"In","fields":[{"name":"a","type":{"type":"fixed","name":"F","size":1}}]}}}`,
			`{"k":[{"a":"\u00ff"},{"a":"\u00ff\u00ff"}]}`,
			`record "R" field "f": invalid default: k: [1]: a: 2 bytes for F of size 1`},
		{"string for a number", `"string"`, `5`,
			`record "R" field "f": invalid default: a string default is a JSON string, not an integer`},
		{"double text for an int", `"int"`, `1.5`,
			`record "R" field "f": invalid default: an int default is a JSON integer, not a number`},
		{"int overflow", `"int"`, `2147483648`,
			`record "R" field "f": invalid default: unsupported value: 2147483648 overflows int`},
		{"timestamp as text", `{"type":"long","logicalType":"timestamp-millis"}`, `"2024-01-01T00:00:00Z"`,
			`record "R" field "f": invalid default: a long default is a JSON integer, not a string`},
		{"a record's default that needs itself", `"R"`, `{"id":"x"}`,
			`record "R" field "f": invalid default: f: field "f" of R is left out of its own default, which never ends`},
		{"enum symbol unknown", `{"type":"enum","name":"E","symbols":["A"]}`, `"B"`,
			`record "R" field "f": invalid default: unsupported value: "B" is not a symbol of E`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			schema := defaultRecordSchema(tc.typ, tc.def)
			err := CheckSchema([]byte(schema))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckSchema = %v, want it to contain %q", err, tc.want)
			}
			if _, err := NewCodec(Config{Format: Avro, Schema: schema}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewCodec with the writer schema = %v, want %q", err, tc.want)
			}
			if _, err := NewCodec(Config{Format: Avro, Registry: Registry{URL: "http://127.0.0.1:1", ReaderSchema: schema}}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewCodec with the reader schema = %v, want %q", err, tc.want)
			}
			reg := srfake.New()
			defer reg.Close()
			id := register(t, reg, "s", sr.Schema{Schema: schema, Type: sr.TypeAvro})
			_, err = mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL()}}).Decode(frame(id, []byte{2, 'x'}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("registry writer schema: Decode = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestAvroDefaultKeepsRegisteredText: the schema registered for an output
// is the text as written, defaults and all; only goavro's copy has none.
func TestAvroDefaultKeepsRegisteredText(t *testing.T) {
	schema := defaultRecordSchema(`{"type":"fixed","name":"F2","size":2}`, `"\u00ff\u00fe"`)
	s, err := newAvroSchema(schema)
	if err != nil {
		t.Fatal(err)
	}
	if s.text != schema {
		t.Fatalf("text = %s, want %s", s.text, schema)
	}
	if f := s.typ.fields[1]; !f.hasDef || f.def != "\u00ff\u00fe" {
		t.Fatalf("field default = %#v (has %v), want the string of code points ff fe", f.def, f.hasDef)
	}
}

// FuzzAvroDefaults: any default text for the types of defaultCases either
// makes the schema invalid or is read the same by the encoder (a value
// without the field) and by schema resolution (a writer without it).
func FuzzAvroDefaults(f *testing.F) {
	for i, tc := range defaultCases {
		f.Add(i, tc.def)
	}
	f.Fuzz(func(t *testing.T, i int, def string) {
		if i < 0 || def == "" || strings.ContainsAny(def, "\n\r") {
			return
		}
		tc := defaultCases[i%len(defaultCases)]
		schema := defaultRecordSchema(tc.typ, def)
		if CheckSchema([]byte(schema)) != nil {
			return
		}
		c := mustCodec(t, Config{Format: Avro, Schema: schema})
		_, back := roundTrip(t, c, map[string]any{"id": "x"})
		got, err := resolveWith(t, defaultRecordSchema("", ""), schema, map[string]any{"id": "x"})
		if err != nil {
			t.Fatalf("schema %s: reader default: %v", schema, err)
		}
		if a, b := back.(map[string]any)["f"], got.(map[string]any)["f"]; !reflect.DeepEqual(a, b) {
			t.Fatalf("schema %s: encoded default %#v, reader default %#v", schema, a, b)
		}
	})
}
