package serde

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/linkedin/goavro/v2"
)

func TestParseNumber(t *testing.T) {
	for _, tc := range []struct {
		text    string
		want    any
		wantErr string
	}{
		{"2", int64(2), ""},
		{"-0", int64(0), ""},
		{"2.0", 2.0, ""},
		{"1E2", 100.0, ""},
		{"1e-2", 0.01, ""},
		{"-0.0", math.Copysign(0, -1), ""},
		{"9223372036854775807", int64(math.MaxInt64), ""},
		{"-9223372036854775808", int64(math.MinInt64), ""},
		{"9223372036854775808", nil, `field "n": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		{"18446744073709551615", nil, "beyond the range of a 64-bit integer"},
		{"1e400", nil, `field "n": number 1e400 is beyond the range of a double`},
		{"-1e400", nil, "beyond the range of a double"},
		{"1e-400", nil, `field "n": number 1e-400 underflows to zero as a double`},
		{"0e-400", 0.0, ""},
		{"0.000e5", 0.0, ""},
		{"4.9e-324", 5e-324, ""},
	} {
		got, err := ParseNumber(tc.text, "n")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInexact) {
				t.Errorf("%s: error %v, want %q wrapping ErrInexact", tc.text, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.text, err)
			continue
		}
		if f, ok := tc.want.(float64); ok {
			g, ok := got.(float64)
			if !ok || math.Float64bits(f) != math.Float64bits(g) {
				t.Errorf("%s = %#v, want %#v", tc.text, got, tc.want)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s = %#v, want %#v", tc.text, got, tc.want)
		}
	}
}

func TestUnquote(t *testing.T) {
	for _, tc := range []struct {
		raw, want, wantErr string
	}{
		{`"plain"`, "plain", ""},
		{`"a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t", ""},
		{`"\u00e9\u20ac"`, "é€", ""},
		{`"\ud83d\ude00"`, "😀", ""},
		{`"\uD83D\uDE00"`, "😀", ""},
		{`"\ud800x"`, "", `field "s": string has a lone surrogate \ud800, which is not text`},
		{`"\udc00"`, "", `string has a lone surrogate \udc00`},
		{`"\ud800\u0041"`, "", `lone surrogate \ud800`},
		{`"\ud800\ud800"`, "", `lone surrogate \ud800`},
		{`"x\ude00"`, "", `lone surrogate \ude00`},
	} {
		got, err := Unquote([]byte(tc.raw), "s")
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInexact) {
				t.Errorf("%s: error %v, want %q", tc.raw, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
		// encoding/json agrees where there is no lone surrogate
		var std string
		if err := json.Unmarshal([]byte(tc.raw), &std); err != nil || std != got {
			t.Errorf("%s: encoding/json reads %q", tc.raw, std)
		}
	}
}

func TestAppendJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       any
		want    string
		wantErr string
	}{
		{"integral double keeps a point", 3.0, "3.0", ""},
		{"negative zero", math.Copysign(0, -1), "-0.0", ""},
		{"shortest double", 0.1, "0.1", ""},
		{"large double", 1e21, "1e+21", ""},
		{"small double", 1e-7, "1e-7", ""},
		{"float32 keeps a point", float32(2), "2.0", ""},
		{"NaN", math.NaN(), "", `field "x": NaN cannot be written as JSON`},
		{"+Inf", math.Inf(1), "", `field "x": +Inf cannot be written as JSON`},
		{"-Inf in a list", []any{1.0, math.Inf(-1)}, "", `field "x[1]": -Inf cannot be written as JSON`},
		{"NaN in an object", map[string]any{"a": map[string]any{"b": math.NaN()}}, "", `field "x.a.b": NaN`},
		{"invalid UTF-8", "a\xffb", "", `field "x": string is not valid UTF-8`},
		{"escapes as encoding/json, no HTML escaping", "<\"\\\n\t\x01\u2028>", `"<\"\\\n\t\u0001\u2028>"`, ""},
		{"json.Number keeps its text", json.Number("1.50"), "1.50", ""},
		{"bad json.Number", json.Number("1."), "", "not a JSON number"},
		{"bytes as base64", []byte{0, 0xff}, `"AP8="`, ""},
		{"sorted keys", map[string]any{"b": int64(1), "a": uint64(18446744073709551615)}, `{"a":18446744073709551615,"b":1}`, ""},
		{"no JSON form", make(chan int), "", "has no JSON form"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AppendJSON(nil, tc.v, "x")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("= %s, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// Every double's text reads back as the same double, and as a double.
func FuzzAppendDouble(f *testing.F) {
	for _, x := range []float64{0, 1, -1.5, 1e21, 1e-7, 5e-324, math.MaxFloat64, 123456789} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, x float64) {
		b, err := AppendDouble(nil, x, 64, "")
		if math.IsNaN(x) || math.IsInf(x, 0) {
			if err == nil {
				t.Fatalf("%v written as %s", x, b)
			}
			return
		}
		v, err := ParseNumber(string(b), "")
		if err != nil || math.Float64bits(v.(float64)) != math.Float64bits(x) {
			t.Fatalf("%v written as %s, reads as %v, %v", x, b, v, err)
		}
	})
}

// TestAvroValues: JSON -> Avro refuses, naming the field, what a type
// cannot hold exactly; Avro -> JSON refuses NaN and ±Inf.
func TestAvroValues(t *testing.T) {
	c := mustCodec(t, Config{Format: Avro, Schema: numbersSchema})
	const ok = `"d":1.5,"f":0.5,"l":1,"i":1,"s":"x"`
	for _, tc := range []struct {
		in      string
		wantErr string // "" means it converts
	}{
		{`{` + ok + `}`, ""},
		{`{"d":1e400,"f":0.5,"l":1,"i":1,"s":"x"}`, `field "d": number 1e400 is beyond the range of a double`},
		{`{"d":1e-400,"f":0.5,"l":1,"i":1,"s":"x"}`, `field "d": number 1e-400 underflows to zero as a double`},
		{`{"d":9007199254740993,"f":0.5,"l":1,"i":1,"s":"x"}`, "d: unsupported value: number for Avro double: integer 9007199254740993 is not exactly a double"},
		{`{"d":9007199254740992,"f":0.5,"l":1,"i":1,"s":"x"}`, ""},
		{`{"d":1.5,"f":3.5e38,"l":1,"i":1,"s":"x"}`, "f: unsupported value: number for Avro float: number 3.5e38 is beyond the range of a float"},
		{`{"d":1.5,"f":1e-46,"l":1,"i":1,"s":"x"}`, "f: unsupported value: number for Avro float: number 1e-46 underflows to zero as a float"},
		{`{"d":1.5,"f":16777217,"l":1,"i":1,"s":"x"}`, "f: unsupported value: number for Avro float: integer 16777217 is not exactly a float"},
		{`{"d":1.5,"f":0.5,"l":1,"i":2.0,"s":"x"}`, "i: unsupported value: number for Avro int: 2.0 is a double by its text, not an integer"},
		{`{"d":1.5,"f":0.5,"l":1E2,"i":1,"s":"x"}`, "l: unsupported value: number for Avro long: 1E2 is a double by its text"},
		{`{"d":1.5,"f":0.5,"l":9223372036854775808,"i":1,"s":"x"}`, `field "l": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		{`{"d":1.5,"f":0.5,"l":1,"i":2147483648,"s":"x"}`, "i: unsupported value: 2147483648 overflows int"},
	} {
		v, err := jsonCodec{}.Decode([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Encode(v)
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v\nwant %q", tc.in, err, tc.wantErr)
		}
	}
	// A lone surrogate is no string: the JSON decode refuses it first.
	if _, err := (jsonCodec{}).Decode([]byte(`{"s":"\udc00"}`)); !errors.Is(err, ErrInexact) || !strings.Contains(err.Error(), `field "s"`) {
		t.Errorf("lone surrogate: %v", err)
	}
	// A double computed by a transform is no int either.
	if _, err := c.Encode(map[string]any{"d": 1.0, "f": 1.0, "l": int64(1), "i": 2.0, "s": "x"}); err == nil || !strings.Contains(err.Error(), "i: unsupported value") {
		t.Errorf("float64 for int: %v", err)
	}

	// Avro -> JSON: NaN and infinities have no JSON form.
	raw, err := goavro.NewCodec(numbersSchema)
	if err != nil {
		t.Fatal(err)
	}
	for name, d := range map[string]float64{"NaN": math.NaN(), "+Inf": math.Inf(1), "-Inf": math.Inf(-1)} {
		bin, err := raw.BinaryFromNative(nil, map[string]any{"d": d, "f": float32(1), "l": int64(1), "i": int32(1), "s": "x"})
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Decode(bin)
		if err != nil {
			t.Fatalf("%s: Avro decode: %v", name, err)
		}
		if _, err := c.Encode(v); err != nil {
			t.Errorf("%s: Avro -> Avro must keep it: %v", name, err)
		}
		if _, err := (jsonCodec{}).Encode(v); err == nil || !strings.Contains(err.Error(), `field "d": `+name+` cannot be written as JSON`) {
			t.Errorf("%s: Avro -> JSON error %v", name, err)
		}
	}
	// An Avro double that is integral stays a double in JSON.
	bin, err := raw.BinaryFromNative(nil, map[string]any{"d": 2.0, "f": float32(0.1), "l": int64(1), "i": int32(1), "s": "x"})
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.Decode(bin)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := (jsonCodec{}).Encode(v); err != nil || string(out) != `{"d":2.0,"f":0.1,"i":1,"l":1,"s":"x"}` {
		t.Errorf("Avro -> JSON = %s, %v", out, err)
	}
}

// bigObject returns an object of n members k0..k(n-1), then extra members.
func bigObject(n int, extra string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	return b.String() + extra + "}"
}

// TestDuplicateKeys: an object with two members of one key (by their
// text) is refused wherever it is read, naming the key's path; an object
// that is not read (a nested one, for a top-level lookup) is no error.
func TestDuplicateKeys(t *testing.T) {
	tests := []struct {
		name, in string
		decode   string // DecodeValue's error, "" for none
		top      string // the error of a top-level lookup (JSONFields, TopLevelField), "" for none
	}{
		{name: "unique", in: `{"id":"t0","s":"a","t":{"s":1}}`},
		{name: "the last would win", in: `{"id":"t20","s":"x","id":"t20b"}`,
			decode: `field "id": duplicate key "id" in object`, top: `field "id": duplicate key "id" in object`},
		{name: "a duplicate value field", in: `{"id":"t02","s":"a","s":"b"}`,
			decode: `field "s": duplicate key "s" in object`, top: `field "s": duplicate key "s" in object`},
		{name: "an escaped duplicate", in: `{"id":"t01","s":"a","\u0073":"b"}`,
			decode: `field "s": duplicate key "s" in object (written "s" and "\u0073")`, top: `duplicate key "s"`},
		{name: "both escaped", in: `{"\u0073":1,"\u0073":2}`, decode: `field "s": duplicate key "s" in object`, top: `field "s": duplicate key "s"`},
		{name: "a pair and its character", in: `{"\ud83d\ude00":1,"😀":2}`, decode: `duplicate key "😀"`, top: `duplicate key "😀"`},
		{name: "escaped solidus", in: `{"a/b":1,"a\/b":2}`, decode: `duplicate key "a/b"`, top: `duplicate key "a/b"`},
		{name: "escaped control", in: `{"a\nb":1,"a\u000ab":2}`, decode: `duplicate key "a\nb"`, top: `duplicate key "a\nb"`},
		{name: "a lone surrogate key equals itself", in: `{"\ud800":1,"\uD800":2}`, decode: `lone surrogate`, top: `duplicate key "\\uD800"`},
		{name: "lone surrogates differ", in: `{"\ud800":1,"\udc00":2}`, decode: `lone surrogate`},
		{name: "an escape of another letter", in: `{"a":1,"\u0062":2,"ab":3,"a\u0062c":4}`},
		{name: "a prefix is another key", in: `{"a":1,"ab":2,"\u0061b\u0063":3,"abc ":4}`},
		{name: "nested", in: `{"id":"n1","n":{"a":1,"b":{"c":1,"c":2}}}`, decode: `field "n.b.c": duplicate key "c" in object`},
		{name: "in an array of objects", in: `{"id":"a1","items":[{"q":1},{"q":2,"q":3}]}`, decode: `field "items[1].q": duplicate key "q" in object`},
		{name: "top-level array", in: `[{"a":1},{"a":1,"\u0061":2}]`, decode: `field "[1].a": duplicate key "a"`},
		{name: "large, unique", in: bigObject(100, `,"\u006b100":1`)},
		{name: "large, at the end", in: bigObject(100, `,"k7":1`), decode: `field "k7": duplicate key "k7" in object`, top: `field "k7": duplicate key "k7"`},
		{name: "large, escaped", in: bigObject(40, `,"\u006b39":1`), decode: `field "k39": duplicate key "k39" in object (written "k39" and "\u006b39")`, top: `duplicate key "k39"`},
		{name: "large, lone surrogates", in: bigObject(40, `,"\ud800":1,"\udc00":2,"\uD800":3`), decode: `lone surrogate`, top: `duplicate key "\\uD800"`},
		{name: "large, nested", in: `{"n":` + bigObject(33, `,"k32":0`) + `}`, decode: `field "n.k32": duplicate key "k32"`},
	}
	check := func(t *testing.T, what string, err error, want string) {
		t.Helper()
		switch {
		case want == "" && err != nil:
			t.Fatalf("%s: %v", what, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("%s: error %v, want one containing %q", what, err, want)
		case want != "" && strings.Contains(want, "duplicate") && !(errors.Is(err, ErrDuplicateKey) && errors.Is(err, ErrInexact)):
			t.Fatalf("%s: error %v wraps neither ErrDuplicateKey nor ErrInexact", what, err)
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			if err := CheckJSON(in); err != nil {
				t.Fatal(err)
			}
			for _, nums := range []Numbers{AsText, Typed} {
				_, err := DecodeValue(in, "", nums)
				check(t, "DecodeValue", err, tc.decode)
			}
			_, err := jsonCodec{}.Decode(in)
			check(t, "Decode", err, tc.decode)
			if in[0] != '{' {
				return
			}
			_, err = JSONFields(in, []string{"id"})
			check(t, "JSONFields", err, tc.top)
			_, _, _, err = TopLevelField(in, "zz")
			check(t, "TopLevelField", err, tc.top)
			_, _, _, err = JSONField(in, "id")
			check(t, "JSONField", err, tc.top)
			_, err = AppendMembers(nil, in, "")
			check(t, "AppendMembers", err, tc.top)
		})
	}
}

// CheckKeys refuses a duplicate key at any depth, in the words of
// AppendMembers, and nothing else.
func TestCheckKeys(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"a":1,"b":{"c":[1,{"d":2}]}}`, ""},
		{`"{\"a\":1,\"a\":2}"`, ""}, // a string, not an object
		{`[1,"x",null]`, ""},
		{`{"a":1,"a":2}`, `field "o.a": duplicate key "a" in object`},
		{` {"a":{"b":1,"b":1}}`, `field "o.a.b": duplicate key "b" in object`},
		{`[{"x":1},{"a":1,"\u0061":2}]`, `field "o[1].a": duplicate key "a" in object (written "a" and "\u0061")`},
		{`{"k":[[{"z":{"y":1,"y":2}}]]}`, `field "o.k[0][0].z.y": duplicate key "y" in object`},
	} {
		err := CheckKeys([]byte(tt.in), "o")
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckKeys(%s) = %v, want nil", tt.in, err)
		case tt.want != "" && (err == nil || err.Error() != tt.want || !errors.Is(err, ErrDuplicateKey)):
			t.Errorf("CheckKeys(%s) = %v, want %s (ErrDuplicateKey)", tt.in, err, tt.want)
		}
	}
}
