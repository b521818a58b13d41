package serde

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkAgainstDecode requires CheckJSON and TopLevelField to agree with
// Decode and a map lookup on in, and all three to refuse an object whose
// top-level keys are not unique (by encoding/json's reading of the keys).
func checkAgainstDecode(t *testing.T, in []byte, field string) {
	c, _ := New(JSON)
	v, decErr := c.Decode(in)
	chkErr := CheckJSON(in)
	checkFieldsKeys(t, in, field)
	if dup, known := topLevelDup(in); known && chkErr == nil {
		fields, err := JSONFields(in, []string{field})
		_, _, _, tlErr := TopLevelField(in, field)
		// Decode also fails for duplicates deeper down; the top-level
		// lookups only for the top level's.
		if dup && !(errors.Is(decErr, ErrDuplicateKey) && errors.Is(err, ErrDuplicateKey) && errors.Is(tlErr, ErrDuplicateKey)) ||
			!dup && (errors.Is(err, ErrDuplicateKey) || errors.Is(tlErr, ErrDuplicateKey)) {
			t.Fatalf("%q field %q: duplicate top-level keys %v, but Decode: %v, JSONFields: %v, %v, TopLevelField: %v", in, field, dup, decErr, fields, err, tlErr)
		}
		if dup {
			return
		}
	}
	if errors.Is(decErr, ErrInexact) {
		// A value with no exact form (a lone surrogate) somewhere: the
		// bytes are JSON, and only a read of that value fails.
		if chkErr != nil {
			t.Fatalf("%q: Decode error %v, CheckJSON error %v", in, decErr, chkErr)
		}
		fields, err := JSONFields(in, []string{field})
		raw, _, found, _ := TopLevelField(in, field)
		if !found {
			return
		}
		want, wantErr := FieldValue(raw)
		if (err == nil) != (wantErr == nil) || err == nil && fields != nil && !reflect.DeepEqual(fields[field], want) {
			t.Fatalf("%q field %q: JSONFields = %v, %v; FieldValue = %v, %v", in, field, fields, err, want, wantErr)
		}
		return
	}
	for _, sentinel := range []error{ErrNullValue, ErrInvalidUTF8, ErrSyntax} {
		if errors.Is(decErr, sentinel) != errors.Is(chkErr, sentinel) {
			t.Fatalf("%q: Decode error %v, CheckJSON error %v", in, decErr, chkErr)
		}
	}
	if (decErr == nil) != (chkErr == nil) {
		t.Fatalf("%q: Decode error %v, CheckJSON error %v", in, decErr, chkErr)
	}
	if decErr != nil {
		return
	}
	obj, wantObj := v.(map[string]any)
	want, wantFound := obj[field]
	fields, err := JSONFields(in, []string{field})
	if raw, ok := fields[field].(json.RawMessage); ok { // an object or array, as it came
		fields[field], _ = c.Decode(raw)
	}
	if err != nil || (fields != nil) != wantObj || (wantObj && !reflect.DeepEqual(fields[field], want)) {
		t.Fatalf("%q field %q: JSONFields = %v, %v; want %v", in, field, fields, err, want)
	}
	raw, isObj, found, err := TopLevelField(in, field)
	if err != nil || isObj != wantObj || found != wantFound {
		t.Fatalf("%q field %q: TopLevelField object=%v found=%v, want %v %v", in, field, isObj, found, wantObj, wantFound)
	}
	if found {
		got, err := c.Decode(raw)
		if errors.Is(err, ErrNullValue) {
			got, err = nil, nil
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%q field %q: raw %q decodes to %v (%v), want %v", in, field, raw, got, err, want)
		}
	}
}

// checkFieldsKeys requires JSONFieldsKeys to be JSONFields and, when
// that succeeds, CheckKeys(in, ""), in one: the same fields and errors.
func checkFieldsKeys(t *testing.T, in []byte, field string) {
	want, wantErr := JSONFields(in, []string{field})
	var wantKeys error
	if wantErr == nil {
		wantKeys = CheckKeys(in, "")
	}
	got, keys, err := JSONFieldsKeys(in, []string{field})
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || fmt.Sprint(keys) != fmt.Sprint(wantKeys) || !reflect.DeepEqual(got, want) {
		t.Fatalf("%q field %q: JSONFieldsKeys = %v, %v, %v; want %v, %v, %v", in, field, got, keys, err, want, wantKeys, wantErr)
	}
}

// JSONFieldsKeys reads the fields as JSONFields does and, in the same
// pass, finds a duplicate key at any depth as CheckKeys does, in a field
// that is read or not; a duplicate top-level key stays JSONFields's error.
func TestJSONFieldsKeys(t *testing.T) {
	for _, tt := range []struct {
		in, keys, err string
	}{
		{`{"event_id":"e","a":{"b":[{"c":1}]}}`, "", ""},
		{`{"event_id":"e","a":{"b":1,"b":2}}`, `field "a.b": duplicate key "b" in object`, ""},
		{`{"event_id":{"x":1,"x":2}}`, `field "event_id.x": duplicate key "x" in object`, ""},
		{`{"event_id":"e","a":[1,{"z":{"y":1,"\u0079":2}}]}`, `field "a[1].z.y": duplicate key "y" in object (written "y" and "\u0079")`, ""},
		{`[{"a":1,"a":2}]`, `field "[0].a": duplicate key "a" in object`, ""},
		{`{"event_id":"e","event_id":"f","a":{"b":1,"b":2}}`, "", `field "event_id": duplicate key "event_id" in object`},
		{`{"event_id":"\udc00","a":{"b":1,"b":2}}`, "", `field "event_id": `},
		{`{"event_id":`, "", "syntax error"},
	} {
		obj, keys, err := JSONFieldsKeys([]byte(tt.in), []string{"event_id"})
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || keys != nil || obj != nil {
				t.Errorf("JSONFieldsKeys(%s) = %v, %v, %v; want error %q", tt.in, obj, keys, err, tt.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(keys) != fmt.Sprint(CheckKeys([]byte(tt.in), "")) ||
			(tt.keys == "" && keys != nil) || (tt.keys != "" && (keys == nil || keys.Error() != tt.keys || !errors.Is(keys, ErrDuplicateKey))) {
			t.Errorf("JSONFieldsKeys(%s) keys = %v, err %v; want keys %q", tt.in, keys, err, tt.keys)
		}
		checkAgainstDecode(t, []byte(tt.in), "event_id")
	}
}

// topLevelDup reports, by encoding/json's tokens, whether the object in has
// two top-level keys with one text. known is false when in is no object,
// or a key may hold a surrogate escape (encoding/json reads a lone one as
// U+FFFD, which would make "\ud800" and "\udc00" one key).
func topLevelDup(in []byte) (dup, known bool) {
	if bytes.Contains(bytes.ToLower(in), []byte(`\ud`)) {
		return false, false
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return false, false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false, false
		}
		k, _ := tok.(string)
		if seen[k] {
			return true, true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false, false
		}
	}
	return false, true
}

func TestTopLevelField(t *testing.T) {
	for _, in := range []string{
		`{"event_id":"e-1","n":1}`, ` { "n" : {"event_id":"inner"} , "event_id" : 7 } `, `{"a":[1,"]",{"event_id":1}],"event_id":"x\"y"}`,
		`{"event_id":null}`, `{}`, `[1,2]`, `"s"`, `12`, `{"ev\u0065nt_id":"esc"}`, `{"event_id":"a","event_id":"b"}`,
		`{"event_id":true}`, `{"event_id":{"a":"}"}}`, `{"x":"\\","event_id":-1.5e3}`, "\t{\"event_id\":\"tab\"}\n",
		`null`, ``, `{"event_id":`, "{\"event_id\":\"\xff\"}",
		`{"event_id":"\udc00"}`, `{"x":"\ud800","event_id":"ok"}`, `{"event_id":"\ud83d\ude00"}`,
		`{"event_id":"a","x":1,"x":2}`, `{"event_id":"a","\u0065vent_id":"b"}`, `{"n":{"a":1,"a":2},"event_id":"ok"}`,
	} {
		checkAgainstDecode(t, []byte(in), "event_id")
	}
}

func FuzzTopLevelField(f *testing.F) {
	for _, s := range []string{`{"event_id":"e"}`, `{"a":{"event_id":1},"event_id":[{"x":"}"}]}`, `[{"event_id":1}]`, `{"e\"":1}`,
		`{"event_id":1,"e":2,"\u0065":3}`, `{"x":[{"a":1,"a":2}],"event_id":"e"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkAgainstDecode(t, in, "event_id")
		if bytes.Count(in, []byte(`"`)) > 1 {
			// also a field name taken from the input
			if k := strings.SplitN(string(in), `"`, 3)[1]; json.Valid([]byte(`"` + k + `"`)) {
				checkAgainstDecode(t, in, k)
			}
		}
	})
}

func BenchmarkPassThroughCheck(b *testing.B) {
	rec := []byte(`{"event_id":"e-000000001","amount":1,"customer":{"id":"c-1","tier":"gold"},"pad":"` + strings.Repeat("x", 900) + `"}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		if err := CheckJSON(rec); err != nil {
			b.Fatal(err)
		}
		if _, _, found, _ := TopLevelField(rec, "event_id"); !found {
			b.Fatal("not found")
		}
	}
}

// validJSON gives json.Valid's verdict on every input in valid UTF-8 (the
// only inputs CheckJSON passes it), including nesting at and past
// json.Valid's limit.
func TestValidJSON(t *testing.T) {
	deep := func(n int, open, close string) string { return strings.Repeat(open, n) + strings.Repeat(close, n) }
	for _, in := range []string{
		``, ` `, `1`, `-`, `-0`, `-01`, `01`, `1.`, `.5`, `1e`, `1e+`, `1E-2`, `+1`, `0x1`, `1_0`, `Infinity`, `NaN`,
		`"a`, `"\u12"`, `"\u+123"`, `"\u00zz"`, `"\x"`, `"\/"`, "\"\x1f\"", "\"\x7f\"", `"\\"`, `"\\\"`, `"a\"b"`,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{a:1}`, `{"a":1}x`, `{"a":1} `, "\t[\n1\r]\n", `[1 2]`, `tru`, `nul`, `falsey`,
		"{\"k\x01\":1}", `{"k\u0001":1}`, `{"\"":1}`, `[]`, `{}`, `[[]]`, `{"a":{"b":[{"c":null}]}}`, "\f1", "\v1", "1\u00a0",
		deep(maxNesting, "[", "]"), deep(maxNesting+1, "[", "]"), deep(maxNesting/2, `{"a":`, "}"), deep(maxNesting/2+1, `[{"a":`, "}]"),
		deep(maxNesting+5, "[", ""), `"` + strings.Repeat("[", maxNesting+1) + `"`,
		// fastjson alone passes a control character before an escape
		"\"\x02\\b\"", "\"\t\\n\"", "[1,\n2]", "{\"a\":\"x\ny\\\"\"}", "\"\\u0041\x00\"",
	} {
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("validJSON(%.40q) = %v, json.Valid %v", in, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"event_id":"e","n":-1.5e3,"a":[true,false,null]}`, `"\ud800"`, `[1,{"a":"\\\""}]`, ` 0 `, `{"a":01}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !utf8.Valid(in) {
			return // CheckJSON refuses it before validJSON
		}
		if got, want := validJSON(in), json.Valid(in); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid %v", in, got, want)
		}
	})
}

// validJSON agrees with json.Valid on values nested to its limit and past
// it, and on values just within and beyond the length from which their
// brackets are counted.
func TestValidJSONNesting(t *testing.T) {
	nest := func(depth int) []byte {
		return append(bytes.Repeat([]byte{'['}, depth), bytes.Repeat([]byte{']'}, depth)...)
	}
	for _, in := range [][]byte{
		nest(maxNesting / 2), nest(maxNesting/2 + 1), nest(maxNesting), nest(maxNesting + 1),
		append(nest(maxNesting/2), ' '), bytes.Repeat([]byte{'['}, maxNesting+1),
	} {
		if got, want := validJSON(in), json.Valid(in); got != want {
			t.Errorf("validJSON(%d bytes, %d deep) = %v, json.Valid %v", len(in), bytes.Count(in, []byte{'['}), got, want)
		}
	}
}

// hasControl finds a byte below 0x20 at every position of every length up
// to three words, and none in bytes from 0x20 up.
func TestHasControl(t *testing.T) {
	for n := range 25 {
		clean := bytes.Repeat([]byte{0x20}, n)
		if hasControl(clean) {
			t.Fatalf("hasControl(%d spaces) = true", n)
		}
		for i := range n {
			for _, c := range []byte{0x00, 0x09, 0x1f} {
				b := bytes.Clone(clean)
				b[i] = c
				if !hasControl(b) {
					t.Fatalf("hasControl misses 0x%02x at %d of %d", c, i, n)
				}
			}
			b := bytes.Repeat([]byte{0xff}, n)
			b[i] = 0x80
			if hasControl(b) {
				t.Fatalf("hasControl(% x) = true", b)
			}
		}
	}
}
