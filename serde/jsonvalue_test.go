package serde

import (
	"encoding/json"
	"errors"
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
		{`{"d":1e400,"f":0.5,"l":1,"i":1,"s":"x"}`, "d: unsupported value: number for Avro double: number 1e400 is beyond the range of a double"},
		{`{"d":1e-400,"f":0.5,"l":1,"i":1,"s":"x"}`, "d: unsupported value: number for Avro double: number 1e-400 underflows to zero as a double"},
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
