package serde

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const moneySchema = `{"type":"record","name":"Payment","namespace":"shop","fields":[
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"rate","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":6}},
 {"name":"big","type":{"type":"fixed","name":"Big","size":9,"logicalType":"decimal","precision":20,"scale":0}}
]}`

const typesSchema = `{"type":"record","name":"Event","fields":[
 {"name":"id","type":{"type":"string","logicalType":"uuid"}},
 {"name":"fid","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}},
 {"name":"at_ms","type":{"type":"long","logicalType":"timestamp-millis"}},
 {"name":"at_us","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"t_ms","type":{"type":"int","logicalType":"time-millis"}},
 {"name":"t_us","type":{"type":"long","logicalType":"time-micros"}},
 {"name":"note","type":["null","string"],"default":null},
 {"name":"n","type":"int"},
 {"name":"l","type":"long"},
 {"name":"f","type":"float"},
 {"name":"d","type":"double"},
 {"name":"ok","type":"boolean"},
 {"name":"raw","type":"bytes"},
 {"name":"color","type":{"type":"enum","name":"Color","symbols":["RED","GREEN"]}},
 {"name":"tags","type":{"type":"array","items":"string"}},
 {"name":"attrs","type":{"type":"map","values":"long"}},
 {"name":"either","type":["null","long","string"]}
]}`

const v1Schema = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"event_id","type":"string"},
 {"name":"old","type":"int","default":0}
]}`

const v2Schema = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"event_id","type":"string"},
 {"name":"source","type":"string","default":"legacy"}
]}`

func mustCodec(t testing.TB, cfg Config) Codec {
	t.Helper()
	c, err := NewCodec(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// roundTrip encodes v with c and decodes the bytes again, failing the
// test on an error; it returns both.
func roundTrip(t *testing.T, c Codec, v any) ([]byte, any) {
	t.Helper()
	b, err := c.Encode(v)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	back, err := c.Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return b, back
}

// register registers s under subject in reg and returns its ID, failing
// tb on an error.
func register(tb testing.TB, reg *srfake.Registry, subject string, s sr.Schema) int {
	tb.Helper()
	id, _, err := reg.RegisterSchema(subject, s)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

func jsonValue(t testing.TB, s string) any {
	t.Helper()
	v, err := jsonCodec{}.Decode([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAvroJSONRoundTrip converts JSON -> Avro -> JSON and back through the
// codecs a stage would use, and checks the plain JSON text.
func TestAvroJSONRoundTrip(t *testing.T) {
	tests := []struct {
		name, schema, in, want string
	}{
		{"decimals", moneySchema,
			`{"amount":"12.34","rate":"0.000123","big":"9223372036854775808"}`,
			`{"amount":"12.34","big":"9223372036854775808","rate":"0.000123"}`},
		{"decimals from JSON numbers are padded to the scale", moneySchema,
			`{"amount":12.3,"rate":1,"big":-99999999999999999999}`,
			`{"amount":"12.30","big":"-99999999999999999999","rate":"1.000000"}`},
		{"negative decimals", moneySchema,
			`{"amount":"-0.01","rate":"-128","big":"-1"}`,
			`{"amount":"-0.01","big":"-1","rate":"-128.000000"}`},
		{"logical types and plain types", typesSchema,
			`{"id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","fid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8",
			  "at_ms":"2024-02-29T12:34:56.789Z","at_us":"1969-12-31T23:59:59.000001Z","day":"2024-02-29",
			  "t_ms":"23:59:59.999","t_us":"00:00:00.000001","note":"hi","n":-7,"l":9007199254740993,
			  "f":0.1,"d":1e300,"ok":true,"raw":"AP8=","color":"GREEN","tags":["a"],"attrs":{"x":1},"either":"s"}`,
			`{"at_ms":"2024-02-29T12:34:56.789Z","at_us":"1969-12-31T23:59:59.000001Z","attrs":{"x":1},"color":"GREEN","d":1e+300,"day":"2024-02-29","either":"s","f":0.1,"fid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","l":9007199254740993,"n":-7,"note":"hi","ok":true,"raw":"AP8=","t_ms":"23:59:59.999","t_us":"00:00:00.000001","tags":["a"]}`},
		{"timestamps in every RFC 3339 spelling (a space, t, z, an offset)", typesSchema,
			`{"id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","fid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8",
			  "at_ms":"2024-02-29 13:34:56.789+01:00","at_us":"1969-12-31t23:59:59.000001z","day":"2024-02-29",
			  "t_ms":"23:59:59.999","t_us":"00:00:00.000001","note":"hi","n":-7,"l":9007199254740993,
			  "f":0.1,"d":1e300,"ok":true,"raw":"AP8=","color":"GREEN","tags":["a"],"attrs":{"x":1},"either":"s"}`,
			`{"at_ms":"2024-02-29T12:34:56.789Z","at_us":"1969-12-31T23:59:59.000001Z","attrs":{"x":1},"color":"GREEN","d":1e+300,"day":"2024-02-29","either":"s","f":0.1,"fid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","l":9007199254740993,"n":-7,"note":"hi","ok":true,"raw":"AP8=","t_ms":"23:59:59.999","t_us":"00:00:00.000001","tags":["a"]}`},
		{"timestamps as epoch numbers, nullable field absent", typesSchema,
			`{"id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","fid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8",
			  "at_ms":0,"at_us":1,"day":0,"t_ms":0,"t_us":0,"n":0,"l":0,"f":0,"d":0,"ok":false,
			  "raw":"","color":"RED","tags":[],"attrs":{},"either":5}`,
			`{"at_ms":"1970-01-01T00:00:00Z","at_us":"1970-01-01T00:00:00.000001Z","attrs":{},"color":"RED","d":0.0,"day":"1970-01-01","either":5,"f":0.0,"fid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","l":0,"n":0,"note":null,"ok":false,"raw":"","t_ms":"00:00:00","t_us":"00:00:00","tags":[]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCodec(t, Config{Format: Avro, Schema: tc.schema})
			bin, v := roundTrip(t, c, jsonValue(t, tc.in))
			out, err := jsonCodec{}.Encode(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("JSON =\n%s\nwant\n%s", out, tc.want)
			}
			// And back: the JSON text encodes to the same bytes.
			bin2, err := c.Encode(jsonValue(t, string(out)))
			if err != nil {
				t.Fatalf("re-Encode: %v", err)
			}
			if string(bin2) != string(bin) {
				t.Fatalf("Avro -> JSON -> Avro changed the bytes:\n%x\n%x", bin, bin2)
			}
		})
	}
}

// TestAvroDecodedShape checks that Avro decodes to the shapes JSON does
// (after transform.Normalize), so transforms work alike.
func TestAvroDecodedShape(t *testing.T) {
	c := mustCodec(t, Config{Format: Avro, Schema: typesSchema})
	in := jsonValue(t, `{"id":"6ba7b810-9dad-11d1-80b4-00c04fd430c8","fid":"6ba7b810-9dad-11d1-80b4-00c04fd430c8",
	  "at_ms":0,"at_us":0,"day":0,"t_ms":0,"t_us":0,"n":1,"l":2,"f":1.5,"d":2.5,"ok":true,
	  "raw":"AA==","color":"RED","tags":["x"],"attrs":{"k":3},"either":null}`)
	_, v := roundTrip(t, c, in)
	m := v.(map[string]any)
	for field, want := range map[string]any{
		"n": int64(1), "l": int64(2), "f": 1.5, "d": 2.5, "ok": true, "raw": []byte{0},
		"color": "RED", "tags": []any{"x"}, "attrs": map[string]any{"k": int64(3)}, "either": nil,
		"day": "1970-01-01",
	} {
		if !reflect.DeepEqual(m[field], want) {
			t.Errorf("%s = %#v, want %#v", field, m[field], want)
		}
	}
}

func TestAvroEncodeErrors(t *testing.T) {
	tests := []struct {
		name, schema, in, wantMsg string
	}{
		{"decimal scale does not fit", moneySchema, `{"amount":"12.345","rate":"0","big":"0"}`, "more than 2 fractional digits"},
		{"decimal float scale does not fit", moneySchema, `{"amount":0.001,"rate":"0","big":"0"}`, "not rounded"},
		{"decimal precision exceeded", moneySchema, `{"amount":"123456789.00","rate":"0","big":"0"}`, "precision 10"},
		{"decimal not a number", moneySchema, `{"amount":"12,34","rate":"0","big":"0"}`, "not a decimal"},
		{"decimal fraction text", moneySchema, `{"amount":"1/3","rate":"0","big":"0"}`, "not a decimal"},
		{"missing field without default", v1Schema, `{"old":1}`, `field "event_id"`},
		{"unknown field is not dropped", v1Schema, `{"event_id":"e","extra":1}`, `field "extra" is not in`},
		{"unknown fields are named in order", v1Schema, `{"zeta":1,"event_id":"e","beta":2,"alpha":3}`, `fields "alpha", "beta", "zeta" are not in`},
		{"int overflow", v1Schema, `{"event_id":"e","old":2147483648}`, "overflows int"},
		{"wrong type", v1Schema, `{"event_id":5}`, "number for Avro string"},
		{"not a record", v1Schema, `[1]`, "array for Avro"},
		{"bad uuid", `{"type":"string","logicalType":"uuid"}`, `"nope"`, "not a UUID"},
		{"bad timestamp", `{"type":"long","logicalType":"timestamp-millis"}`, `"yesterday"`, "RFC 3339"},
		{"timestamp finer than millis", `{"type":"long","logicalType":"timestamp-millis"}`, `"2024-01-01T00:00:00.0001Z"`, "more precision"},
		{"enum symbol", `{"type":"enum","name":"E","symbols":["A"]}`, `"B"`, "not a symbol"},
		{"null for non-nullable union", `["long","string"]`, `{"a":1}`, "no branch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCodec(t, Config{Format: Avro, Schema: tc.schema})
			_, err := c.Encode(jsonValue(t, tc.in))
			if !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Encode error = %v, want ErrUnsupported", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Encode error = %q, want it to mention %q", err, tc.wantMsg)
			}
		})
	}
}

func TestAvroRawDecodeErrors(t *testing.T) {
	c := mustCodec(t, Config{Format: Avro, Schema: v1Schema})
	good, err := c.Encode(map[string]any{"event_id": "e-1", "old": int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      []byte
		wantErr error
		wantMsg string
	}{
		{"tombstone", nil, ErrNullValue, ""},
		{"trailing bytes", append(append([]byte{}, good...), 0, 0), ErrSyntax, "2 trailing bytes"},
		{"truncated", good[:len(good)-2], ErrSyntax, "does not match its schema"},
		{"string length past the end", []byte{0x7e}, ErrSyntax, "does not match its schema"},
		{"empty", []byte{}, ErrSyntax, "does not match its schema"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkBadRecord(t, c, tc.in, tc.wantErr, tc.wantMsg) })
	}
}

// frame builds a Confluent wire-format record by hand.
func frame(id int, datum []byte) []byte {
	b, _ := new(sr.ConfluentHeader).AppendEncode(nil, id, nil)
	return append(b, datum...)
}

func rawAvro(t testing.TB, schema string, v any) []byte {
	t.Helper()
	b, err := mustCodec(t, Config{Format: Avro, Schema: schema}).Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRegistryEvolution is the evolution check: a topic mixing v1
// and v2 frames read with v2 as the reader schema.
func TestRegistryEvolution(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id1 := register(t, reg, "orders-value", sr.Schema{Schema: v1Schema, Type: sr.TypeAvro})
	id2 := register(t, reg, "orders-value", sr.Schema{Schema: v2Schema, Type: sr.TypeAvro})
	dir := t.TempDir()
	readerFile := filepath.Join(dir, "v2.avsc")
	if err := os.WriteFile(readerFile, []byte(v2Schema), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		reader string
		in     []byte
		want   map[string]any
	}{
		{"v1 frame gets the default, loses the removed field", readerFile,
			frame(id1, rawAvro(t, v1Schema, map[string]any{"event_id": "a", "old": int64(7)})),
			map[string]any{"event_id": "a", "source": "legacy"}},
		{"v2 frame as written", readerFile,
			frame(id2, rawAvro(t, v2Schema, map[string]any{"event_id": "b", "source": "web"})),
			map[string]any{"event_id": "b", "source": "web"}},
		{"inline reader schema", v2Schema,
			frame(id1, rawAvro(t, v1Schema, map[string]any{"event_id": "c"})),
			map[string]any{"event_id": "c", "source": "legacy"}},
		{"no reader schema: the writer's", "",
			frame(id1, rawAvro(t, v1Schema, map[string]any{"event_id": "d"})),
			map[string]any{"event_id": "d", "old": int64(0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCodec(t, Config{Format: Avro, Topic: "orders", Registry: Registry{URL: reg.URL(), ReaderSchema: tc.reader}})
			got, err := c.Decode(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Decode = %#v, want %#v", got, tc.want)
			}
		})
	}
}

func TestRegistryEncodeRegistersUnderTopicName(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	out := mustCodec(t, Config{Format: Avro, Topic: "orders", Schema: v2Schema, Registry: Registry{URL: reg.URL()}})
	b, err := out.Encode(map[string]any{"event_id": "e"})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := reg.GetSchema("orders-value", 1)
	if !ok {
		t.Fatal("schema not registered under orders-value")
	}
	if b[0] != 0 || int(b[1])<<24|int(b[2])<<16|int(b[3])<<8|int(b[4]) != got.ID {
		t.Fatalf("frame header %x, want magic 0 and id %d", b[:5], got.ID)
	}
	in := mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL()}})
	v, err := in.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"event_id": "e", "source": "legacy"}; !reflect.DeepEqual(v, want) {
		t.Fatalf("Decode = %#v, want %#v", v, want)
	}
	custom := mustCodec(t, Config{Format: Avro, Topic: "orders", Schema: v2Schema, Registry: Registry{URL: reg.URL(), Subject: "shop.Order"}})
	if _, err := custom.Encode(map[string]any{"event_id": "e"}); err != nil {
		t.Fatal(err)
	}
	if !reg.SubjectExists("shop.Order") {
		t.Fatal("explicit subject not used")
	}
}

func TestRegistryDecodeErrors(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := register(t, reg, "t-value", sr.Schema{Schema: v1Schema, Type: sr.TypeAvro})
	jsonID := register(t, reg, "j-value", sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON})
	good := rawAvro(t, v1Schema, map[string]any{"event_id": "x"})
	tests := []struct {
		name    string
		in      []byte
		wantErr error
		wantMsg string
	}{
		{"shorter than the header", []byte{0, 0, 1}, ErrFrame, "3 bytes, shorter than the 5-byte header"},
		{"empty", []byte{}, ErrFrame, "0 bytes"},
		{"wrong magic", append([]byte{1, 0, 0, 0, 1}, good...), ErrFrame, "magic byte 0x01"},
		{"json where avro frames were expected", []byte(`{"event_id":"x"}`), ErrFrame, "magic byte 0x7b"},
		{"unknown schema id", frame(999, good), ErrUnknownSchema, "schema id 999"},
		{"trailing bytes", frame(id, append(append([]byte{}, good...), 1)), ErrSyntax, "1 trailing bytes after the datum with schema id"},
		{"datum does not match", frame(id, []byte{0x7e}), ErrSyntax, "does not match its schema"},
		{"schema is not avro", frame(jsonID, good), ErrSyntax, "not avro"},
	}
	c := mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL(), ReaderSchema: v2Schema}})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkBadRecord(t, c, tc.in, tc.wantErr, tc.wantMsg) })
	}
}

func TestRegistryIncompatibleReader(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := register(t, reg, "t-value", sr.Schema{Schema: v1Schema, Type: sr.TypeAvro})
	reader := `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"event_id","type":"string"},{"name":"must","type":"string"}]}`
	c := mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL(), ReaderSchema: reader}})
	_, err := c.Decode(frame(id, rawAvro(t, v1Schema, map[string]any{"event_id": "x"})))
	if !errors.Is(err, ErrIncompatible) || IsTransient(err) {
		t.Fatalf("Decode error = %v, want a permanent ErrIncompatible", err)
	}
}

// TestRegistryTransient: a registry that is down or answers 5xx is
// transient, and the failure is not cached.
func TestRegistryTransient(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	id := register(t, reg, "t-value", sr.Schema{Schema: v1Schema, Type: sr.TypeAvro})
	var calls atomic.Int64
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
	in := mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL()}})
	out := mustCodec(t, Config{Format: Avro, Topic: "t", Schema: v1Schema, Registry: Registry{URL: reg.URL()}})
	rec := frame(id, rawAvro(t, v1Schema, map[string]any{"event_id": "x"}))
	if _, err := in.Decode(rec); !IsTransient(err) {
		t.Fatalf("Decode with a 503 registry: %v, want transient", err)
	}
	if _, err := out.Encode(map[string]any{"event_id": "x"}); !IsTransient(err) {
		t.Fatalf("Encode with a 503 registry: %v, want transient", err)
	}
	reg.ClearInterceptors()
	if _, err := in.Decode(rec); err != nil {
		t.Fatalf("Decode after recovery: %v", err)
	}
	if _, err := out.Encode(map[string]any{"event_id": "x"}); err != nil {
		t.Fatalf("Encode after recovery: %v", err)
	}
	n := calls.Load()
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		calls.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
		return true
	})
	for range 3 { // cached now: no more requests
		if _, err := in.Decode(rec); err != nil {
			t.Fatal(err)
		}
		if _, err := out.Encode(map[string]any{"event_id": "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if calls.Load() != n {
		t.Fatalf("cached schemas were fetched again")
	}

	down := mustCodec(t, Config{Format: Avro, Registry: Registry{URL: "http://127.0.0.1:1", Timeout: 2e9}})
	if _, err := down.Decode(rec); !IsTransient(err) {
		t.Fatalf("Decode with an unreachable registry: %v, want transient", err)
	}
}

func TestRegistryBasicAuth(t *testing.T) {
	reg := srfake.New(srfake.WithAuth("Basic dXNlcjpzM2NyZXQ=")) // user:s3cret
	defer reg.Close()
	out := mustCodec(t, Config{Format: Avro, Topic: "t", Schema: v1Schema, Registry: Registry{URL: reg.URL(), Username: "user", Password: "s3cret"}})
	if _, err := out.Encode(map[string]any{"event_id": "x"}); err != nil {
		t.Fatal(err)
	}
	bad := mustCodec(t, Config{Format: Avro, Topic: "t", Schema: v1Schema, Registry: Registry{URL: reg.URL(), Username: "user", Password: "wrong"}})
	_, err := bad.Encode(map[string]any{"event_id": "x"})
	// Refused credentials are no record's fault and no retry mends them:
	// the stage stops, naming the status (ErrRegistryRefused, not
	// transient).
	if !IsRegistryRefused(err) || IsTransient(err) || !strings.Contains(err.Error(), "HTTP 403") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("Encode with bad credentials: %v, want refused (not transient), naming the status, without the password", err)
	}
	if s := (Registry{URL: "http://u:pw@h:1", Password: "pw"}).String(); strings.Contains(s, "pw") {
		t.Fatalf("Registry.String shows a credential: %s", s)
	}
}

func TestNewCodecConfig(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.avsc")
	os.WriteFile(bad, []byte(`{"type":"record","name":"R","fields":[{"name":"a","type":"nope"}]}`), 0o644)
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"avro without schema or registry", Config{Format: Avro}, ErrConfig},
		{"missing schema file", Config{Format: Avro, SchemaFile: filepath.Join(dir, "none.avsc")}, ErrConfig},
		{"bad schema file", Config{Format: Avro, SchemaFile: bad}, ErrConfig},
		{"schema on json", Config{Format: JSON, Schema: v1Schema}, ErrConfig},
		{"reader schema without registry", Config{Format: Avro, Schema: v1Schema, Registry: Registry{ReaderSchema: v2Schema}}, ErrConfig},
		{"bad registry url", Config{Format: Avro, Registry: Registry{URL: "ftp://x"}}, ErrConfig},
		{"unknown format", Config{Format: "xml"}, ErrUnknownFormat},
		{"avro through New", Config{Format: "json"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewCodec(tc.cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("NewCodec error = %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := New(Avro); !errors.Is(err, ErrConfig) {
		t.Fatalf("New(avro) = %v, want ErrConfig", err)
	}
}

// TestSchemaResolution covers the promotions and unions of the
// specification's schema resolution.
func TestSchemaResolution(t *testing.T) {
	tests := []struct {
		name, writer, reader string
		in                   any
		want                 any
		wantErr              error
	}{
		{"int to long", `"int"`, `"long"`, int64(5), int64(5), nil},
		{"int to double", `"int"`, `"double"`, int64(5), float64(5), nil},
		{"long to float", `"long"`, `"float"`, int64(3), float64(3), nil},
		{"string to bytes", `"string"`, `"bytes"`, "ab", []byte("ab"), nil},
		{"bytes to string", `"bytes"`, `"string"`, []byte("ab"), "ab", nil},
		{"value into nullable union", `"string"`, `["null","string"]`, "x", "x", nil},
		{"union branch into plain", `["null","long"]`, `"long"`, int64(9), int64(9), nil},
		{"null branch into plain", `["null","long"]`, `"long"`, nil, nil, ErrIncompatible},
		{"long to int is not allowed", `"long"`, `"int"`, int64(1), nil, ErrIncompatible},
		{"enum default", `{"type":"enum","name":"E","symbols":["A","B"]}`, `{"type":"enum","name":"E","symbols":["A"],"default":"A"}`, "B", "A", nil},
		{"enum without default", `{"type":"enum","name":"E","symbols":["A","B"]}`, `{"type":"enum","name":"E","symbols":["A"]}`, "B", nil, ErrIncompatible},
		// Logical types: the specification resolves the physical types
		// only, so the same long would be another instant in another
		// unit; differing logical types are incompatible. A plain number
		// read as a logical type is the reader's to interpret.
		{"timestamp-millis read as timestamp-micros", `{"type":"long","logicalType":"timestamp-millis"}`, `{"type":"long","logicalType":"timestamp-micros"}`,
			int64(1700000000123), nil, ErrIncompatible},
		{"timestamp-micros read as timestamp-millis", `{"type":"long","logicalType":"timestamp-micros"}`, `{"type":"long","logicalType":"timestamp-millis"}`,
			int64(1700000000123000), nil, ErrIncompatible},
		{"date read as timestamp-millis", `{"type":"int","logicalType":"date"}`, `{"type":"long","logicalType":"timestamp-millis"}`,
			int64(19782), nil, ErrIncompatible},
		{"timestamp-millis read as local-timestamp-millis", `{"type":"long","logicalType":"timestamp-millis"}`, `{"type":"long","logicalType":"local-timestamp-millis"}`,
			int64(1700000000123), nil, ErrIncompatible},
		{"timestamp-millis into a nullable timestamp-micros", `{"type":"long","logicalType":"timestamp-millis"}`, `["null",{"type":"long","logicalType":"timestamp-micros"}]`,
			int64(1700000000123), nil, ErrIncompatible},
		{"timestamp-millis as itself", `{"type":"long","logicalType":"timestamp-millis"}`, `{"type":"long","logicalType":"timestamp-millis"}`,
			int64(1700000000123), "2023-11-14T22:13:20.123Z", nil},
		{"timestamp-millis read as a plain long", `{"type":"long","logicalType":"timestamp-millis"}`, `"long"`,
			int64(1700000000123), int64(1700000000123), nil},
		{"plain long read as timestamp-millis", `"long"`, `{"type":"long","logicalType":"timestamp-millis"}`,
			int64(1700000000123), "2023-11-14T22:13:20.123Z", nil},
		{"plain int read as timestamp-millis (promoted)", `"int"`, `{"type":"long","logicalType":"timestamp-millis"}`,
			int64(86400000), "1970-01-02T00:00:00Z", nil},
		{"plain int read as date", `"int"`, `{"type":"int","logicalType":"date"}`, int64(19782), "2024-02-29", nil},
		{"record renamed via alias", `{"type":"record","name":"Old","fields":[{"name":"a","type":"int"}]}`,
			`{"type":"record","name":"New","aliases":["Old"],"fields":[{"name":"b","aliases":["a"],"type":"long"}]}`,
			map[string]any{"a": int64(1)}, map[string]any{"b": int64(1)}, nil},
		{"default of a nested record and bytes", `{"type":"record","name":"R","fields":[]}`,
			`{"type":"record","name":"R","fields":[{"name":"p","type":{"type":"record","name":"P","fields":[{"name":"x","type":"long"}]},"default":{"x":3}},
			  {"name":"amt","type":{"type":"bytes","logicalType":"decimal","precision":4,"scale":2},"default":"\u0004\u00d2"},
			  {"name":"u","type":["null","long"],"default":null}]}`,
			map[string]any{}, map[string]any{"p": map[string]any{"x": int64(3)}, "amt": "12.34", "u": nil}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveWith(t, tc.writer, tc.reader, tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Decode error = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Decode = %#v, want %#v", got, tc.want)
			}
		})
	}
}

// encodeRaw writes v without the tombstone checks of Decode's inverse, for
// tests that need a null datum.
func (c *avroCodec) encodeRaw(v any) ([]byte, error) {
	n, err := toAvro(c.writer.typ, v)
	if err != nil {
		return nil, err
	}
	return c.writer.codec.BinaryFromNative(nil, n)
}

func TestDecimalBytes(t *testing.T) {
	tests := []struct {
		text  string
		scale int
		hex   string
	}{
		{"0", 0, "00"}, {"127", 0, "7f"}, {"128", 0, "0080"}, {"-1", 0, "ff"}, {"-128", 0, "80"},
		{"-129", 0, "ff7f"}, {"12.34", 2, "04d2"}, {"-12.34", 2, "fb2e"},
		{"9223372036854775808", 0, "008000000000000000"},
	}
	for _, tc := range tests {
		typ := &avroType{kind: kindBytes, logical: logicalDecimal, precision: 38, scale: tc.scale}
		b, err := decimalBytes(typ, tc.text)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(jsonHex(b))); got != tc.hex {
			t.Errorf("decimalBytes(%s) = %s, want %s", tc.text, got, tc.hex)
		}
		if back := decimalString(b, tc.scale); back != tc.text {
			t.Errorf("decimalString = %s, want %s", back, tc.text)
		}
	}
}

// TestDecimalScaleBounded refuses a decimal whose schema's scale would
// make its text, or the power of ten that scales it, gigabytes long.
func TestDecimalScaleBounded(t *testing.T) {
	const schema = `{"type":"record","name":"r","fields":[{"name":"n","type":{"type":"bytes","logicalType":"decimal","precision":2147483647,"scale":2147483646}}]}`
	c := mustCodec(t, Config{Format: Avro, Schema: schema})
	if _, err := c.Decode([]byte{2, 1}); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "decimal scale 2147483646 is beyond") {
		t.Fatalf("decode: %v; want the scale refused", err)
	}
	if _, err := c.Encode(map[string]any{"n": "1"}); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "decimal scale 2147483646 is beyond") {
		t.Fatalf("encode: %v; want the scale refused", err)
	}
}

func jsonHex(b []byte) []byte {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

var _ = json.Number("") // keep encoding/json for table values

// checkBadRecord requires c.Decode(in) to fail with an error that wraps
// wantErr, mentions wantMsg, and is not transient.
func checkBadRecord(t *testing.T, c Codec, in []byte, wantErr error, wantMsg string) {
	t.Helper()
	_, err := c.Decode(in)
	if !errors.Is(err, wantErr) || !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("Decode error = %v, want %v mentioning %q", err, wantErr, wantMsg)
	}
	if IsTransient(err) {
		t.Fatal("a bad record must not be transient")
	}
}

// TestAvroEncodeNumbersExact: JSON numbers into Avro number fields read by
// the same rules as a transform reads them. An integer beyond int64 is
// refused on every number type and union, with the words a transform
// uses, though a double may hold it (2^63, 2^64); integer text within
// int64 goes into a float or double only if exact; a decimal takes any
// number it holds exactly, trailing zeros beyond the scale included.
func TestAvroEncodeNumbersExact(t *testing.T) {
	const beyond = `field "n": integer %s is beyond the range of a 64-bit integer (int64)`
	tests := []struct {
		name, typ, n string
		want         string // the JSON read back, or
		wantErr      string // the whole error
	}{
		{"2^63 into double", `"double"`, "9223372036854775808", "", fmt.Sprintf(beyond, "9223372036854775808")},
		{"2^64 into double", `"double"`, "18446744073709551616", "", fmt.Sprintf(beyond, "18446744073709551616")},
		{"-2^63-1 into double", `"double"`, "-9223372036854775809", "", fmt.Sprintf(beyond, "-9223372036854775809")},
		{"2^63 into float", `"float"`, "9223372036854775808", "", fmt.Sprintf(beyond, "9223372036854775808")},
		{"2^63 into long", `"long"`, "9223372036854775808", "", fmt.Sprintf(beyond, "9223372036854775808")},
		{"2^63 into int", `"int"`, "9223372036854775808", "", fmt.Sprintf(beyond, "9223372036854775808")},
		{"2^63 into timestamp-millis", `{"type":"long","logicalType":"timestamp-millis"}`, "9223372036854775808", "", fmt.Sprintf(beyond, "9223372036854775808")},
		{"2^63 into null|long|double", `["null","long","double"]`, "9223372036854775808", "", fmt.Sprintf(beyond, "9223372036854775808")},
		{"2^64 into long|double", `["long","double"]`, "18446744073709551616", "", fmt.Sprintf(beyond, "18446744073709551616")},
		{"2^63 into null|double|string", `["null","double","string"]`, "9223372036854775808", "", fmt.Sprintf(beyond, "9223372036854775808")},
		{"2^63 in an array of doubles", `{"type":"array","items":"double"}`, "[1,9223372036854775808]", "",
			`field "n[1]": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		{"2^63 in a map of doubles", `{"type":"map","values":"double"}`, `{"k":9223372036854775808}`, "",
			`field "n.k": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		{"2^63 in a nested record", `{"type":"record","name":"In","fields":[{"name":"x","type":["null","double"]}]}`, `{"x":9223372036854775808}`, "",
			`field "n.x": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		{"2^53+1 into double", `"double"`, "9007199254740993", "",
			"n: unsupported value: number for Avro double: integer 9007199254740993 is not exactly a double (it would be rounded)"},
		{"int64 max into double", `"double"`, "9223372036854775807", "",
			"n: unsupported value: number for Avro double: integer 9223372036854775807 is not exactly a double (it would be rounded)"},
		{"2^24+1 into float", `"float"`, "16777217", "",
			"n: unsupported value: number for Avro float: integer 16777217 is not exactly a float (it would be rounded)"},
		{"2^53+1 into double|float", `["null","double","float"]`, "9007199254740993", "",
			"n: unsupported value: number matches no branch of the union (first: unsupported value: number for Avro double: integer 9007199254740993 is not exactly a double (it would be rounded))"},
		{"2^63 into double|decimal takes the decimal", `["double",{"type":"bytes","logicalType":"decimal","precision":20,"scale":0}]`, "9223372036854775808", `"9223372036854775808"`, ""},
		{"2^53 into double", `"double"`, "9007199254740992", `9007199254740992.0`, ""},
		{"-2^63 into double", `"double"`, "-9223372036854775808", `-9223372036854776000.0`, ""}, // the shortest text of the double -2^63
		{"2^24 into float", `"float"`, "16777216", `16777216.0`, ""},
		{"2^53+1 into long|double takes long", `["long","double"]`, "9007199254740993", `9007199254740993`, ""},
		// A float holds 16777217.0 only rounded; the union's double holds
		// it as read, so the value goes there, whatever the branch order.
		{"2^24+1 as a double into null|float|double takes the double", `["null","float","double"]`, "16777217.0", `16777217.0`, ""},
		{"0.1 into float|double takes the double", `["float","double"]`, "0.1", `0.1`, ""},
		// An integer goes to an integer branch first: its type follows
		// its text (2147483648 is a long, not the float 2147483648.0, which
		// value.v + 1 would refuse).
		{"2^31 into null|int|float|long|double takes the long", `["null","int","float","long","double"]`, "2147483648", `2147483648`, ""},
		{"2^31-1 into null|int|float|long|double takes the int", `["null","int","float","long","double"]`, "2147483647", `2147483647`, ""},
		{"5 into double|long takes the long", `["double","long"]`, "5", `5`, ""},
		{"5.0 into double|long takes the double", `["double","long"]`, "5.0", `5.0`, ""},
		{"5 into double|string takes the double", `["double","string"]`, "5", `5.0`, ""},
		{"0.5 into float|double takes the float", `["float","double"]`, "0.5", `0.5`, ""},
		{"2^63 into a decimal", `{"type":"bytes","logicalType":"decimal","precision":30,"scale":0}`, "9223372036854775808", `"9223372036854775808"`, ""},
		{"trailing zero beyond the scale", `{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, `"1.230"`, `"1.23"`, ""},
		{"trailing zero beyond the scale, a number", `{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, `1.2300`, `"1.23"`, ""},
		{"a nonzero digit beyond the scale", `{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`, `"1.231"`, "",
			"n: unsupported value: decimal 1.231 has more than 2 fractional digits (scale 2); it is not rounded"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			schema := `{"type":"record","name":"D","fields":[{"name":"id","type":"string"},{"name":"n","type":` + tc.typ + `}]}`
			c := mustCodec(t, Config{Format: Avro, Schema: schema})
			b, err := c.Encode(jsonValue(t, `{"id":"r2","n":`+tc.n+`}`))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Encode error = %v, want\n%s", err, tc.wantErr)
				}
				if strings.Contains(tc.wantErr, "64-bit") && (!errors.Is(err, ErrInexact) || !errors.As(err, new(*ValueError))) {
					t.Fatalf("Encode error %v: want a *ValueError wrapping ErrInexact", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			v, err := c.Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			out, err := jsonCodec{}.Encode(v)
			if err != nil {
				t.Fatal(err)
			}
			if want := `{"id":"r2","n":` + tc.want + `}`; string(out) != want {
				t.Fatalf("JSON = %s, want %s", out, want)
			}
		})
	}
}

// TestSchemaResolutionExact: a promotion (int to float or double, long to
// float or double) holds the value the writer wrote, or the record is a
// dead letter naming the field; never a rounded value. The stage and the
// sink both read Avro through Decode.
func TestSchemaResolutionExact(t *testing.T) {
	const writer = `{"type":"record","name":"P","fields":[{"name":"id","type":"string"},{"name":"l","type":"long"},{"name":"i","type":"int"}]}`
	const reader = `{"type":"record","name":"P","fields":[{"name":"id","type":"string"},{"name":"l","type":"double"},{"name":"i","type":"float"}]}`
	rec := func(l int64, i int32) map[string]any { return map[string]any{"id": "p1", "l": l, "i": i} }
	tests := []struct {
		name, writer, reader string
		in                   any
		want                 string // the JSON read, or
		wantErr              string // what the error ends with
	}{
		{"long 2^53+1 to double", writer, reader, rec(9007199254740993, 0), "",
			`field "l": long 9007199254740993 is not exactly a double, the reader schema's type (it would be rounded)`},
		{"int 2^24+1 to float", writer, reader, rec(1, 16777217), "",
			`field "i": int 16777217 is not exactly a float, the reader schema's type (it would be rounded)`},
		{"long int64 max to double", writer, reader, rec(9223372036854775807, 0), "",
			`field "l": long 9223372036854775807 is not exactly a double, the reader schema's type (it would be rounded)`},
		{"exact promotions pass", writer, reader, rec(9007199254740992, 16777216),
			`{"i":16777216.0,"id":"p1","l":9007199254740992.0}`, ""},
		{"long int64 min to double", writer, reader, rec(-9223372036854775808, -16777216),
			`{"i":-16777216.0,"id":"p1","l":-9223372036854776000.0}`, ""},
		{"long to float", `"long"`, `"float"`, int64(16777217), "",
			`value: long 16777217 is not exactly a float, the reader schema's type (it would be rounded)`},
		{"long 2^40 to float", `"long"`, `"float"`, int64(1) << 40, `1099511627776.0`, ""},
		{"int to double always", `"int"`, `"double"`, int64(2147483647), `2147483647.0`, ""},
		{"int to long", `"int"`, `"long"`, int64(-2147483648), `-2147483648`, ""},
		{"float to double", `"float"`, `"double"`, float32(0.5), `0.5`, ""},
		// float to double is float64(f), the value the writer wrote, written
		// as the double's shortest text; never the float's shortest text
		// read as a double (0x3DCCCCCD is not 0.1, 0x00000001 not 1e-45).
		{"float 0x3DCCCCCD to double", `"float"`, `"double"`, math.Float32frombits(0x3DCCCCCD), `0.10000000149011612`, ""},
		{"float 0x00000001 to double", `"float"`, `"double"`, math.Float32frombits(0x00000001), `1.401298464324817e-45`, ""},
		{"float 0x7F7FFFFF to double", `"float"`, `"double"`, math.Float32frombits(0x7F7FFFFF), `3.4028234663852886e+38`, ""},
		{"float 0x80000001 to double", `"float"`, `"double"`, math.Float32frombits(0x80000001), `-1.401298464324817e-45`, ""},
		{"float 0x3DCCCCCD to float", `"float"`, `"float"`, math.Float32frombits(0x3DCCCCCD), `0.1`, ""},
		{"float 0x00000001 to float", `"float"`, `"float"`, math.Float32frombits(0x00000001), `1e-45`, ""},
		// An integral float is its integer: its shortest float text
		// (2.1474836e+09) is another number to a reader of doubles.
		{"float 2^31 to float", `"float"`, `"float"`, float32(2147483648), `2147483648.0`, ""},
		{"float 2^40 to float", `"float"`, `"float"`, float32(1 << 40), `1099511627776.0`, ""},
		{"float max to float", `"float"`, `"float"`, float32(math.MaxFloat32), `3.4028234663852886e+38`, ""},
		{"float -3 to float", `"float"`, `"float"`, float32(-3), `-3.0`, ""},
		{"float 0x3DCCCCCD to a nullable double", `"float"`, `["null","double"]`, math.Float32frombits(0x3DCCCCCD), `0.10000000149011612`, ""},
		{"float 0x3DCCCCCD to float|double takes the float", `"float"`, `["float","double"]`, math.Float32frombits(0x3DCCCCCD), `0.1`, ""},
		{"float 0x3DCCCCCD from a writer union to double", `["null","float"]`, `["null","double"]`, math.Float32frombits(0x3DCCCCCD), `0.10000000149011612`, ""},
		// A union branch of the writer's own type before a promotion (as
		// Java's bestBranch): the long a ["double","long"] writer wrote
		// reads back as that long with the same schema, not as a double.
		{"long in a double|long union, same schema", `["double","long"]`, `["double","long"]`, int64(9007199254740993), `9007199254740993`, ""},
		{"long into a double|long union", `"long"`, `["double","long"]`, int64(9223372036854775807), `9223372036854775807`, ""},
		{"double in a double|long union", `["double","long"]`, `["double","long"]`, 1.5, `1.5`, ""},
		{"int into a double|long union is promoted to the first", `"int"`, `["double","long"]`, int64(5), `5.0`, ""},
		{"floats in an array to doubles", `{"type":"array","items":"float"}`, `{"type":"array","items":"double"}`,
			[]any{math.Float32frombits(0x3DCCCCCD), math.Float32frombits(0x00000001)}, `[0.10000000149011612,1.401298464324817e-45]`, ""},
		{"floats in a map to doubles", `{"type":"map","values":"float"}`, `{"type":"map","values":"double"}`,
			map[string]any{"a": math.Float32frombits(0x3DCCCCCD), "b": math.Float32frombits(0x00000001)}, `{"a":0.10000000149011612,"b":1.401298464324817e-45}`, ""},
		{"long 2^40 to double", `"long"`, `"double"`, int64(1) << 40, `1099511627776.0`, ""},
		{"int 2^24 to float", `"int"`, `"float"`, int64(1) << 24, `16777216.0`, ""},
		{"into a nullable union", `{"type":"record","name":"U","fields":[{"name":"l","type":"long"}]}`,
			`{"type":"record","name":"U","fields":[{"name":"l","type":["null","double"]}]}`, map[string]any{"l": int64(9007199254740993)}, "",
			`field "l": long 9007199254740993 is not exactly a double, the reader schema's type (it would be rounded)`},
		{"from a writer union", `{"type":"record","name":"U","fields":[{"name":"l","type":["null","long"]}]}`,
			`{"type":"record","name":"U","fields":[{"name":"l","type":["null","double"]}]}`, map[string]any{"l": int64(9007199254740993)}, "",
			`field "l": long 9007199254740993 is not exactly a double, the reader schema's type (it would be rounded)`},
		{"in an array", `{"type":"record","name":"U","fields":[{"name":"a","type":{"type":"array","items":"long"}}]}`,
			`{"type":"record","name":"U","fields":[{"name":"a","type":{"type":"array","items":"double"}}]}`, map[string]any{"a": []any{int64(1), int64(9007199254740993)}}, "",
			`field "a[1]": long 9007199254740993 is not exactly a double, the reader schema's type (it would be rounded)`},
		{"in a map", `{"type":"record","name":"U","fields":[{"name":"m","type":{"type":"map","values":"int"}}]}`,
			`{"type":"record","name":"U","fields":[{"name":"m","type":{"type":"map","values":"float"}}]}`, map[string]any{"m": map[string]any{"k": int64(16777217)}}, "",
			`field "m.k": int 16777217 is not exactly a float, the reader schema's type (it would be rounded)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveWith(t, tc.writer, tc.reader, tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.HasSuffix(err.Error(), ": "+tc.wantErr) || !errors.Is(err, ErrInexact) || IsTransient(err) {
					t.Fatalf("Decode error = %v, want a permanent ErrInexact ending\n%s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			out, err := jsonCodec{}.Encode(got)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tc.want {
				t.Fatalf("Decode = %s, want %s", out, tc.want)
			}
		})
	}
}

// resolveWith encodes in with the writer schema, registered in a fake
// registry, and decodes it with the reader schema (Avro schema
// resolution).
func resolveWith(t *testing.T, writer, reader string, in any) (any, error) {
	t.Helper()
	reg := srfake.New()
	defer reg.Close()
	id := register(t, reg, "s", sr.Schema{Schema: writer, Type: sr.TypeAvro})
	datum, err := mustCodec(t, Config{Format: Avro, Schema: writer}).(*avroCodec).encodeRaw(in)
	if err != nil {
		t.Fatal(err)
	}
	c := mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL(), ReaderSchema: reader}})
	return c.Decode(frame(id, datum))
}

// decodeForeign decodes in as written by another writer: encoded by goavro
// with plain, a schema of the same wire form that checks no logical type,
// and read with schema, the writer schema in the registry.
func decodeForeign(t *testing.T, schema, plain string, in map[string]any) (any, error) {
	t.Helper()
	pc, err := goavro.NewCodec(plain)
	if err != nil {
		t.Fatal(err)
	}
	native := make(map[string]any, len(in))
	for k, v := range in {
		if i, ok := v.(int64); ok && strings.Contains(plain, `"name":"`+k+`","type":"int"`) {
			native[k] = int32(i)
		} else {
			native[k] = v
		}
	}
	datum, err := pc.BinaryFromNative(nil, native)
	if err != nil {
		t.Fatal(err)
	}
	reg := srfake.New()
	defer reg.Close()
	id := register(t, reg, "s", sr.Schema{Schema: schema, Type: sr.TypeAvro})
	return mustCodec(t, Config{Format: Avro, Registry: Registry{URL: reg.URL()}}).Decode(frame(id, datum))
}

// A date or timestamp whose year RFC 3339 text cannot hold (four digits,
// 0000 to 9999) has no exact text: its record is a dead letter naming the
// field, on every path (Avro to JSON, to Avro through the in-memory text,
// to the sink), never text that no RFC 3339 reader reads back, this
// codec's own included. Long.MAX_VALUE milliseconds, a common "never", is
// the year 292278994.
func TestAvroYearsOutsideRFC3339(t *testing.T) {
	const schema = `{"type":"record","name":"T","fields":[{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
	  {"name":"lts","type":{"type":"long","logicalType":"local-timestamp-micros"}},{"name":"d","type":{"type":"int","logicalType":"date"}}]}`
	rec := func(ts, lts int64, d int64) map[string]any { return map[string]any{"ts": ts, "lts": lts, "d": d} }
	for _, tc := range []struct {
		name    string
		in      map[string]any
		want    string
		wantErr string
	}{
		{"the last instant of 9999 and the first day of year 0", rec(253402300799999, 253402300799999999, -719528),
			`{"d":"0000-01-01","lts":"9999-12-31T23:59:59.999999","ts":"9999-12-31T23:59:59.999Z"}`, ""},
		{"timestamp in 10000", rec(253402300800000, 0, 0), "", `field "ts": timestamp-millis 253402300800000 is in the year 10000`},
		{"timestamp Long.MAX_VALUE", rec(math.MaxInt64, 0, 0), "", `field "ts": timestamp-millis 9223372036854775807 is in the year 292278994`},
		{"local timestamp in 10000", rec(0, 253402300800000000, 0), "", `field "lts": local-timestamp-micros 253402300800000000 is in the year 10000`},
		{"date in 10000", rec(0, 0, 2932897), "", `field "d": date 2932897 is in the year 10000`},
		{"date before year 0", rec(0, 0, -719529), "", `field "d": date -719529 is in the year -1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Another writer's datum: the same fields without logical
			// types, which check nothing; this codec refuses to write
			// what it would refuse to read.
			got, err := decodeForeign(t, schema, `{"type":"record","name":"T","fields":[{"name":"ts","type":"long"},{"name":"lts","type":"long"},{"name":"d","type":"int"}]}`, tc.in)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrInexact) || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Decode error = %v, want ErrInexact with %q", err, tc.wantErr)
				}
				if _, err := mustCodec(t, Config{Format: Avro, Schema: schema}).Encode(tc.in); !errors.Is(err, ErrInexact) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Encode error = %v, want ErrInexact with %q, as on decode", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			out, err := jsonCodec{}.Encode(got)
			if err != nil || string(out) != tc.want {
				t.Fatalf("Decode = %s, %v; want %s", out, err, tc.want)
			}
		})
	}
}

// CheckRegistry asks at start what the first record would: an output
// codec registers its schema, an input codec checks its credentials. A
// status that asking again cannot change is ErrRegistryRefused; the rest
// is transient.
func TestCheckRegistry(t *testing.T) {
	for _, tc := range []struct {
		name             string
		register, lookup int // HTTP statuses
		types, subjects  int
		output           bool
		want             error // nil, ErrRegistryRefused or ErrTransient
	}{
		{"output schema registered", 200, 404, 200, 200, true, nil},
		{"output schema incompatible with the subject", 409, 404, 200, 200, true, ErrRegistryRefused},
		{"output schema invalid for the registry", 422, 404, 200, 200, true, ErrRegistryRefused},
		{"output schema not registrable but registered already", 403, 200, 200, 200, true, nil},
		{"output: credentials refused", 401, 401, 200, 200, true, ErrRegistryRefused},
		{"output: registry failing", 503, 503, 200, 200, true, ErrTransient},
		// A 404 without a registry's error code 404xx is a path the
		// server does not serve: a wrong URL, which no retry mends.
		{"output: no registry API at the URL", 404, 404, 404, 404, true, ErrRegistryRefused},
		{"input: credentials accepted", 0, 0, 200, 200, false, nil},
		{"input: credentials refused", 0, 0, 401, 200, false, ErrRegistryRefused},
		{"input: not authorized", 0, 0, 403, 200, false, ErrRegistryRefused},
		{"input: too many requests", 0, 0, 429, 200, false, ErrTransient},
		{"input: a registry without /schemas/types", 0, 0, 404, 200, false, nil},
		{"input: no registry API at the URL", 0, 0, 404, 404, false, ErrRegistryRefused},
		{"input: no registry API at the URL, no error body", 0, 0, 404, 404, false, ErrRegistryRefused},
		{"input: a URL that names a resource of the API (405)", 0, 0, 405, 405, false, ErrRegistryRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				status := tc.types
				switch {
				case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/versions"):
					status = tc.register
				case r.Method == http.MethodPost:
					status = tc.lookup
				case strings.HasSuffix(r.URL.Path, "/subjects"):
					status = tc.subjects
				}
				if status == 404 && strings.HasSuffix(tc.name, "no error body") {
					w.WriteHeader(status)
					fmt.Fprint(w, "<html>Not Found</html>")
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				switch {
				case status != 200:
					fmt.Fprintf(w, `{"error_code":%d,"message":"no"}`, status)
				case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/versions"):
					fmt.Fprint(w, `{"id":7}`)
				case r.Method == http.MethodPost:
					fmt.Fprint(w, `{"subject":"t-value","id":7,"version":1,"schema":"\"string\""}`)
				case strings.HasSuffix(r.URL.Path, "/subjects"):
					fmt.Fprint(w, `[]`)
				default:
					fmt.Fprint(w, `["AVRO"]`)
				}
			}))
			defer srv.Close()
			cfg := Config{Format: Avro, Topic: "t", Registry: Registry{URL: srv.URL}}
			if tc.output {
				cfg.Schema = v1Schema
			}
			err := CheckRegistry(context.Background(), mustCodec(t, cfg))
			switch {
			case tc.want == nil && err != nil, tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("CheckRegistry = %v, want %v", err, tc.want)
			case errors.Is(err, ErrRegistryRefused) && IsTransient(err):
				t.Fatalf("CheckRegistry = %v: refused and transient", err)
			}
		})
	}
	if err := CheckRegistry(context.Background(), mustCodec(t, Config{Format: JSON})); err != nil {
		t.Fatalf("CheckRegistry(json) = %v", err)
	}
}

// A uuid string datum that is no UUID does not match its schema (the Avro
// spec: it conforms to RFC 4122). Encoding refuses it, so decoding does
// too: the same record is a dead letter whether the stage writes JSON or
// Avro, never passed on one path and refused on the other.
func TestAvroUUIDStringMustBeAUUID(t *testing.T) {
	const schema = `{"type":"record","name":"T","fields":[{"name":"u","type":{"type":"string","logicalType":"uuid"}}]}`
	// A uuid string is a string on the wire: another writer's datum is
	// made with the plain string schema, which checks nothing.
	decode := func(u string) (any, error) {
		return decodeForeign(t, schema, `{"type":"record","name":"T","fields":[{"name":"u","type":"string"}]}`, map[string]any{"u": u})
	}
	got, err := decode("123e4567-e89b-12d3-a456-426614174000")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := (jsonCodec{}).Encode(got); err != nil || string(out) != `{"u":"123e4567-e89b-12d3-a456-426614174000"}` {
		t.Fatalf("Decode = %s, %v", out, err)
	}
	enc := mustCodec(t, Config{Format: Avro, Schema: schema})
	for _, bad := range []string{"not-a-uuid", "", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"} {
		if _, err := decode(bad); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), "is not a UUID") {
			t.Errorf("Decode of uuid %q: error %v, want ErrSyntax naming it", bad, err)
		}
		if _, err := enc.Encode(map[string]any{"u": bad}); err == nil {
			t.Errorf("Encode of uuid %q succeeded, want it refused as on decode", bad)
		}
	}
}

// A 404 for a schema ID is the record's only when the registry says so,
// with its error code 40403 (schema not found): the record is then a dead
// letter. A 404 without it is a path the server does not serve, a wrong
// URL: every record would get it, so it stops the stage instead
// (ErrRegistryRefused), never dead-letters a valid record.
func TestRegistrySchemaNotFoundOrWrongURL(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want error
	}{
		{"schema not found", `{"error_code":40403,"message":"Schema 1 not found"}`, ErrUnknownSchema},
		{"no such path, JSON body", `{"error_code":404,"message":"RESTEASY003210: Could not find resource for full path"}`, ErrRegistryRefused},
		{"no such path, HTML body", `<html><body>404 Not Found</body></html>`, ErrRegistryRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				fmt.Fprint(w, tc.body)
			}))
			defer srv.Close()
			c := mustCodec(t, Config{Format: Avro, Topic: "t", Registry: Registry{URL: srv.URL}})
			_, err := c.Decode(frame(1, []byte{0}))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v", err, tc.want)
			}
			if tc.want == ErrRegistryRefused && (!strings.Contains(err.Error(), "check the path of registry.url") || !strings.Contains(err.Error(), "GET "+srv.URL+"/schemas/ids/1")) {
				t.Errorf("Decode = %v, want the URL asked and the likely cause named", err)
			}
		})
	}
}

// A time of day is within one day: a time-millis of 86400000 or -1 is no
// time, so writing it is refused with the words reading uses, and no
// record goes out that every reader dead-letters.
func TestAvroTimeOutsideOneDay(t *testing.T) {
	const schema = `{"type":"record","name":"T","fields":[{"name":"tm","type":{"type":"int","logicalType":"time-millis"}},{"name":"tu","type":{"type":"long","logicalType":"time-micros"}}]}`
	c := mustCodec(t, Config{Format: Avro, Schema: schema})
	for _, tc := range []struct {
		in   map[string]any
		want string // "" when it is written
	}{
		{map[string]any{"tm": int64(86399999), "tu": int64(86399999999)}, ""},
		{map[string]any{"tm": "23:59:59.999", "tu": "00:00:00"}, ""},
		{map[string]any{"tm": int64(86400000), "tu": int64(0)}, "time-millis 86400000 is outside one day"},
		{map[string]any{"tm": int64(-1), "tu": int64(0)}, "time-millis -1 is outside one day"},
		{map[string]any{"tm": int64(0), "tu": int64(86400000000)}, "time-micros 86400000000 is outside one day"},
	} {
		_, err := c.Encode(tc.in)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Encode(%v) = %v", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Encode(%v) = %v, want %q", tc.in, err, tc.want)
		}
	}
}

// A local timestamp has no zone: text with one is refused in words that
// say so, not as text that is not RFC 3339 (it is).
func TestAvroLocalTimestampWithZone(t *testing.T) {
	const schema = `{"type":"record","name":"T","fields":[{"name":"l","type":{"type":"long","logicalType":"local-timestamp-millis"}}]}`
	c := mustCodec(t, Config{Format: Avro, Schema: schema})
	if _, err := c.Encode(map[string]any{"l": "2024-01-01T00:00:00"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Encode(map[string]any{"l": "2024-01-01T00:00:00Z"})
	if err == nil || !strings.Contains(err.Error(), "without a zone or offset") {
		t.Fatalf("Encode of a local timestamp with Z = %v, want the zone named as the problem", err)
	}
}

// A null value is refused on encode as on decode, even where the schema
// is a union with null: no record goes out that every reader here
// refuses as a null value.
func TestAvroEncodeNullValue(t *testing.T) {
	c := mustCodec(t, Config{Format: Avro, Schema: `["null","string"]`})
	if _, err := c.Encode(nil); !errors.Is(err, ErrNullValue) {
		t.Fatalf("Encode(nil) = %v, want ErrNullValue", err)
	}
	b, err := c.Encode("x")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Decode(b); err != nil || v != "x" {
		t.Fatalf("Decode = %v, %v", v, err)
	}
}
