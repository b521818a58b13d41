package serde

import (
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// FuzzAvroDecode: no input makes the raw Avro decoder panic, and whatever
// decodes encodes back.
func FuzzAvroDecode(f *testing.F) {
	c := mustCodec(f, Config{Format: Avro, Schema: typesSchema})
	m := mustCodec(f, Config{Format: Avro, Schema: moneySchema})
	f.Add([]byte{})
	f.Add([]byte{0x7e})
	f.Add(rawAvro(f, moneySchema, jsonValue(f, `{"amount":"12.34","rate":"0.000123","big":"9223372036854775808"}`)))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range []Codec{c, m} {
			v, err := c.Decode(b)
			if err != nil {
				continue
			}
			if _, err := c.Encode(v); err != nil {
				t.Fatalf("decoded %x but cannot encode it back: %v", b, err)
			}
		}
	})
}

// FuzzAvroRegistryDecode: framed input, through a registry, never panics
// and is never transient (the registry is up).
func FuzzAvroRegistryDecode(f *testing.F) {
	reg := srfake.New()
	f.Cleanup(reg.Close)
	id := register(f, reg, "t-value", sr.Schema{Schema: v1Schema, Type: sr.TypeAvro})
	c := mustCodec(f, Config{Format: Avro, Registry: Registry{URL: reg.URL(), ReaderSchema: v2Schema}})
	f.Add(frame(id, rawAvro(f, v1Schema, map[string]any{"event_id": "x"})))
	f.Add([]byte{0, 0, 0})
	f.Add([]byte{1, 2, 3, 4, 5, 6})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 5 && b[0] == 0 {
			b[1], b[2], b[3] = 0, 0, 0 // keep IDs small: unknown IDs cost a request each
			b[4] %= 4
		}
		if _, err := c.Decode(b); IsTransient(err) {
			t.Fatalf("transient error from an up registry: %v", err)
		}
	})
}

// FuzzJSONDecode: the JSON decoder never panics, and what it decodes
// encodes to Avro or fails cleanly.
func FuzzJSONDecode(f *testing.F) {
	a := mustCodec(f, Config{Format: Avro, Schema: typesSchema})
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"amount":"12.34"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := jsonCodec{}.Decode(b)
		if err != nil {
			return
		}
		_, _ = a.Encode(v)
		_, _ = stringCodec{}.Decode(b)
		_, _ = bytesCodec{}.Decode(b)
	})
}

// numbersSchema has one field of each number type and a string.
const numbersSchema = `{"type":"record","name":"Nums","fields":[
 {"name":"d","type":"double"},
 {"name":"f","type":"float"},
 {"name":"l","type":"long"},
 {"name":"i","type":"int"},
 {"name":"s","type":"string"}
]}`

// promotedSchema reads numbersSchema's records with the promotions of
// schema resolution: long and float to double, int to float.
const promotedSchema = `{"type":"record","name":"Nums","fields":[
 {"name":"d","type":"double"},
 {"name":"f","type":"double"},
 {"name":"l","type":"double"},
 {"name":"i","type":"float"},
 {"name":"s","type":"string"}
]}`

// FuzzJSONAvroJSON is the JSON -> Avro -> JSON boundary: for any field
// texts, the record either converts and comes back with the same values
// by the text rule (an int as the same int, a double as the same double,
// still written as a double; a float as the nearest float), or it fails,
// and then exactly when a field has no exact form in its Avro type. Read
// again with promotedSchema as the reader schema, it decodes exactly when
// the long is exactly a double and the int exactly a float, with the
// same values, and the float promoted to double is the float's value
// exactly (float64 of it, written as that double's shortest text). A field text that adds a member of a key already there
// (`1,"d":2`) makes the decode fail with ErrDuplicateKey: no copy wins.
//
//	go test -run '^$' -fuzz '^FuzzJSONAvroJSON$' -fuzztime 60s ./serde/
func FuzzJSONAvroJSON(f *testing.F) {
	c := mustCodec(f, Config{Format: Avro, Schema: numbersSchema})
	reg := srfake.New()
	f.Cleanup(reg.Close)
	id := register(f, reg, "nums-value", sr.Schema{Schema: numbersSchema, Type: sr.TypeAvro})
	promoted := mustCodec(f, Config{Format: Avro, Registry: Registry{URL: reg.URL(), ReaderSchema: promotedSchema}})
	for _, s := range [][5]string{
		{"2.0", "0.1", "9007199254740993", "-2147483648", `"x"`},
		{"1e400", "1", "1", "1", `"\ud800"`},
		{"1e-400", "3.4e39", "9223372036854775808", "2.0", `"\u00e9\ud83d\ude00"`},
		{"-0.0", "1e-46", "-0", "1E2", `""`},
		{"9007199254740993", "16777217", "0", "2147483648", `"a\"b"`},
		{"9223372036854775808", "18446744073709551616", "9007199254740993", "16777217", `"x"`},
		{"-9223372036854775808", "16777216", "9007199254740992", "-16777216", `"x"`},
		{"1", "1", "9223372036854775807", "16777218", `"x"`},
		{`1,"d":2`, "1", "1", `1,"\u0069":2`, `"x","n":{"a":1,"a":2}`},
		{"0.10000000149011612", "1e-45", "1", "1", `"x"`},
		{"1", "1.401298464324817e-45", "1", "1", `"x"`},
		{"1", "3.4028235e38", "1", "1", `"x"`},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, d, fl, l, i, s string) {
		in := []byte(`{"d":` + d + `,"f":` + fl + `,"l":` + l + `,"i":` + i + `,"s":` + s + `}`)
		v, err := jsonCodec{}.Decode(in)
		if dup, known := topLevelDup(in); known && dup && CheckJSON(in) == nil && !errors.Is(err, ErrDuplicateKey) {
			t.Fatalf("%s: duplicate keys, but Decode gave %v, %v", in, v, err)
		}
		if err != nil {
			return // not JSON, a string with no text form, duplicate keys: a decode dead letter
		}
		obj := v.(map[string]any)
		if len(obj) != 5 {
			return // a field text that held more than one value
		}
		ok := fitsAvro(obj["d"], 64) && fitsAvro(obj["f"], 32) && fitsInt(obj["l"], 64) && fitsInt(obj["i"], 32)
		_, isString := obj["s"].(string)
		ok = ok && isString
		bin, err := c.Encode(v)
		if (err == nil) != ok {
			t.Fatalf("%s: Encode error %v, but each field fits its type: %v", in, err, ok)
		}
		if err != nil {
			return
		}
		back, err := c.Decode(bin)
		if err != nil {
			t.Fatalf("%s: decode what was encoded: %v", in, err)
		}
		out, err := jsonCodec{}.Encode(back)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		got, err := jsonCodec{}.Decode(out)
		if err != nil {
			t.Fatalf("%s -> %s: %v", in, out, err)
		}
		g := got.(map[string]any)
		for _, k := range []string{"l", "i"} {
			a, _ := strconv.ParseInt(string(obj[k].(json.Number)), 10, 64)
			b, err := strconv.ParseInt(string(g[k].(json.Number)), 10, 64)
			if err != nil || a != b {
				t.Fatalf("%s -> %s: %s changed", in, out, k)
			}
		}
		for k, bits := range map[string]int{"d": 64, "f": 32} {
			text := string(g[k].(json.Number))
			if !IsDoubleText(text) {
				t.Fatalf("%s -> %s: %s is written as an int", in, out, k)
			}
			want, _ := float(obj[k], bits)
			got, err := strconv.ParseFloat(text, bits)
			if err != nil || math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("%s -> %s: %s is %v, want %v", in, out, k, got, want)
			}
		}
		if g["s"] != obj["s"] {
			t.Fatalf("%s -> %s: s changed", in, out)
		}

		lv, _ := strconv.ParseInt(string(obj["l"].(json.Number)), 10, 64)
		iv, _ := strconv.ParseInt(string(obj["i"].(json.Number)), 10, 32)
		p, err := promoted.Decode(frame(id, bin))
		if exact := fitsAvro(obj["l"], 64) && fitsAvro(obj["i"], 32); (err == nil) != exact {
			t.Fatalf("%s: promoted Decode error %v, but l is exactly a double and i exactly a float: %v", in, err, exact)
		}
		if err != nil {
			if !errors.Is(err, ErrInexact) {
				t.Fatalf("%s: promoted Decode error %v, want ErrInexact", in, err)
			}
			return
		}
		pm := p.(map[string]any)
		if pm["l"] != float64(lv) || pm["i"] != float64(float32(iv)) || float64(float32(iv)) != float64(iv) {
			t.Fatalf("%s: promoted to l=%v i=%v", in, pm["l"], pm["i"])
		}
		// float to double: the float's value exactly, float64(f), not its
		// shortest float text read as a double (0.1 is the float
		// 0.10000000149011612); in JSON the double's shortest text.
		wantF, _ := float(obj["f"], 32)
		if pf, ok := pm["f"].(float64); !ok || math.Float64bits(pf) != math.Float64bits(wantF) {
			t.Fatalf("%s: promoted f to %v, want float64 of the float, %v", in, pm["f"], wantF)
		}
		pout, err := jsonCodec{}.Encode(p)
		if err != nil {
			t.Fatalf("%s: promoted JSON: %v", in, err)
		}
		pg, err := jsonCodec{}.Decode(pout)
		if err != nil {
			t.Fatalf("%s -> %s: %v", in, pout, err)
		}
		ftext := string(pg.(map[string]any)["f"].(json.Number))
		if back, err := strconv.ParseFloat(ftext, 64); err != nil || !IsDoubleText(ftext) || math.Float64bits(back) != math.Float64bits(wantF) ||
			ftext != string(mustAppendDouble(t, wantF)) {
			t.Fatalf("%s -> %s: promoted f is written %s, want the shortest text of the double %v", in, pout, ftext, wantF)
		}
	})
}

// mustAppendDouble is AppendDouble of f as a double.
func mustAppendDouble(t *testing.T, f float64) []byte {
	t.Helper()
	b, err := AppendDouble(nil, f, 64, "f")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fitsAvro says, independently of the encoder, whether a JSON number
// converts to a float of size bits by the rules: decimal text to the
// nearest float unless it overflows or underflows to zero, integer text
// only if exact.
func fitsAvro(v any, bits int) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	text := string(n)
	if IsDoubleText(text) {
		r, ok := new(big.Rat).SetString(text)
		if !ok {
			return false
		}
		f, _ := strconv.ParseFloat(text, bits)
		if math.IsInf(f, 0) {
			return false
		}
		return f != 0 || r.Sign() == 0
	}
	z, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return false
	}
	mant := 53
	if bits == 32 {
		mant = 24
	}
	a := new(big.Int).Abs(z)
	if a.Sign() == 0 {
		return true
	}
	if !z.IsInt64() {
		return false // integer text is an int64 first, whatever the type
	}
	// exact iff the significant bits fit the mantissa (and the exponent
	// is in range: any integer this size is)
	trailing := a.TrailingZeroBits()
	return a.BitLen()-int(trailing) <= mant && (bits == 64 || a.BitLen() <= 128)
}

func fitsInt(v any, bits int) bool {
	n, ok := v.(json.Number)
	if !ok || IsDoubleText(string(n)) {
		return false
	}
	_, err := strconv.ParseInt(string(n), 10, bits)
	return err == nil
}
