package serde

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		format  string
		in      []byte
		want    any
		wantErr error
	}{
		{"json object", JSON, []byte(`{"a":1,"b":"x"}`), map[string]any{"a": json.Number("1"), "b": "x"}, nil},
		{"json big number keeps its digits", JSON, []byte(`{"n":123456789012345678901234567890}`), map[string]any{"n": json.Number("123456789012345678901234567890")}, nil},
		{"json whitespace around", JSON, []byte(" [1] \n"), []any{json.Number("1")}, nil},
		{"json tombstone", JSON, nil, nil, ErrNullValue},
		{"json literal null", JSON, []byte("null"), nil, ErrNullValue},
		{"json invalid utf-8", JSON, []byte("{\"a\":\"\xff\xfe\"}"), nil, ErrInvalidUTF8},
		{"json truncated", JSON, []byte(`{"a":`), nil, ErrSyntax},
		{"json empty", JSON, []byte{}, nil, ErrSyntax},
		{"json trailing data", JSON, []byte(`{"a":1}{"b":2}`), nil, ErrSyntax},
		{"string", String, []byte("héllo"), "héllo", nil},
		{"string invalid utf-8", String, []byte{0xc3}, nil, ErrInvalidUTF8},
		{"string tombstone", String, nil, nil, ErrNullValue},
		{"bytes any", Bytes, []byte{0xff, 0}, []byte{0xff, 0}, nil},
		{"bytes empty is not null", Bytes, []byte{}, []byte{}, nil},
		{"bytes tombstone", Bytes, nil, nil, ErrNullValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := codecCall(t, tc.format, "Decode", tc.wantErr, func(c Codec) (any, error) { return c.Decode(tc.in) })
			if ok && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Decode = %#v, want %#v", got, tc.want)
			}
		})
	}
}

// codecCall calls op (named name) on a codec of format, and fails the test
// unless its error is wantErr; ok is true when there was none to want.
func codecCall[T any](t *testing.T, format, name string, wantErr error, op func(Codec) (T, error)) (got T, ok bool) {
	t.Helper()
	got, err := op(mustCodec(t, Config{Format: format})) // NewCodec is New for a format without settings
	if !errors.Is(err, wantErr) {
		t.Fatalf("%s error = %v, want %v", name, err, wantErr)
	}
	return got, wantErr == nil
}

func TestEncode(t *testing.T) {
	tests := []struct {
		name    string
		format  string
		in      any
		want    string
		wantErr error
	}{
		{"json keeps number text and does not escape html", JSON, map[string]any{"n": json.Number("1.50"), "s": "<a>"}, `{"n":1.50,"s":"<a>"}`, nil},
		{"json unsupported", JSON, make(chan int), "", ErrUnsupported},
		{"string from string", String, "plain", "plain", nil},
		{"string from object", String, map[string]any{"a": true}, `{"a":true}`, nil},
		{"string from invalid bytes", String, []byte{0xff}, "", ErrUnsupported},
		{"bytes from bytes", Bytes, []byte("raw"), "raw", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := codecCall(t, tc.format, "Encode", tc.wantErr, func(c Codec) ([]byte, error) { return c.Encode(tc.in) })
			if ok && string(got) != tc.want {
				t.Fatalf("Encode = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestNewUnknownFormat(t *testing.T) {
	if _, err := New("xml"); !errors.Is(err, ErrUnknownFormat) {
		t.Fatalf("New(xml) error = %v, want ErrUnknownFormat", err)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	c, _ := New(JSON)
	in := []byte(`{"event_id":"e-1","items":[{"sku":"a","qty":2}],"total":12.340}`)
	v, err := c.Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	_, v2 := roundTrip(t, c, v)
	if !reflect.DeepEqual(v, v2) {
		t.Fatalf("round trip changed the value: %#v != %#v", v, v2)
	}
}
