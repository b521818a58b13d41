package transform

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/exactly-io/exactly/serde"
)

// The JSON -> CEL -> JSON boundary, fuzzed. For any input, the output
// equals the input where no step wrote, or the record fails (is
// dead-lettered):
//   - a step that adds a field leaves every input member's bytes, in
//     order, and adds only that field;
//   - a step that copies a field into a new one either writes a value
//     equal to the input's by the text rule (same type, same value), or
//     fails with serde.ErrInexact because that value has no exact form;
//   - a step that drops a field removes only that field's members;
//   - each of them fails, with serde.ErrDuplicateKey, when two top-level
//     keys have one text (as serde.Unquote reads them), and an object
//     copied whole keeps its bytes, duplicate keys inside or not.
//
// Run longer with:
//
//	go test -run '^$' -fuzz '^FuzzJSONCELJSON$' -fuzztime 60s ./processor/transform/

// The steps, compiled once: the field to copy comes in a header.
var fuzzSteps = struct {
	once      sync.Once
	add, copy *Pipeline
}{}

func fuzzPipelines(t *testing.T) (add, copy *Pipeline) {
	fuzzSteps.once.Do(func() {
		var err error
		if fuzzSteps.add, err = compileSteps(t, "      - set: { zz_new: '1' }\n", NewRegistry()); err != nil {
			t.Fatal(err)
		}
		if fuzzSteps.copy, err = compileSteps(t, "      - set: { zz_copy: 'value[headers.k]' }\n", NewRegistry()); err != nil {
			t.Fatal(err)
		}
	})
	return fuzzSteps.add, fuzzSteps.copy
}

func FuzzJSONCELJSON(f *testing.F) {
	for _, s := range []string{
		`{"event_id":"n1","f":2.0,"g":3.60,"e":1E2,"z":-0.0}`,
		`{"tiny":1e-400,"huge":1e400,"big":123456789012345678901234567890}`,
		`{"name":"\ud800x","note":"\udc00","ok":"\ud83d\ude00"}`,
		`{ "a" : [1, 2.5e-3, {"b":null}] ,"a":true }`,
		`{"s":"a\"b\\c\u00e9\u2028\n","n":-9223372036854775808}`,
		`{}`, `[1,2]`, `"x"`,
		`{"id":"t20","s":"x","id":"t20b"}`, `{"id":"t01","s":"a","\u0073":"b"}`,
		`{"n":{"a":1,"a":2},"a":1}`, `{"l":[{"q":1,"q":2}],"k":0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(fuzzJSONCELJSON)
}

func fuzzJSONCELJSON(t *testing.T, in []byte) {
	{
		v, err := FromJSON(in)
		if err != nil {
			return // not JSON: a decode dead letter on every path
		}
		o, ok := v.(*object)
		if !ok {
			return
		}
		_ = o.index() // the members come with the error
		dup, known := dupKeys(o.raw, o.members)
		if !known {
			return // a key that is not text
		}
		if dup {
			fuzzDuplicate(t, in)
			return
		}
		inMembers := memberTexts(o.raw, o.members, "")
		key := ""
		if len(o.members) > 0 {
			key, _ = serde.Unquote(o.members[0].Key(o.raw), "")
		}
		fuzzAdd(t, in, inMembers)
		if key != "" && key != "zz_copy" {
			fuzzCopy(t, in, key, inMembers)
			fuzzDrop(t, in, key)
		}
	}
}

// dupKeys reports whether two of the members ms of raw have one key, by
// the keys' text. known is false when a key is not text.
func dupKeys(raw []byte, ms []serde.Member) (dup, known bool) {
	seen := map[string]bool{}
	for _, m := range ms {
		k, err := serde.Unquote(m.Key(raw), "")
		if err != nil {
			return false, false
		}
		dup = dup || seen[k]
		seen[k] = true
	}
	return dup, true
}

// fuzzDuplicate: every step that reads the object in, whose top-level keys
// are not unique, fails naming a duplicate key.
func fuzzDuplicate(t *testing.T, in []byte) {
	add, cp := fuzzPipelines(t)
	drop := &Pipeline{steps: []step{{name: "drop", run: dropStep([]string{"zz_none"})}}}
	for name, p := range map[string]*Pipeline{"add": add, "copy": cp, "drop": drop} {
		if out, err := runFuzzSteps(t, p, in, Header{Key: "k", Value: []byte("zz_none")}); !errors.Is(err, serde.ErrDuplicateKey) {
			t.Fatalf("%s: %s on duplicate keys gave %s, %v", in, name, out, err)
		}
	}
	v, _ := FromJSON(in)
	if _, _, err := Field(v, "zz_none"); !errors.Is(err, serde.ErrDuplicateKey) {
		t.Fatalf("%s: the key field on duplicate keys: %v", in, err)
	}
}

// memberText is one member of an object as its raw key and value.
type memberText struct{ key, value string }

func memberTexts(raw []byte, ms []serde.Member, skip string) []memberText {
	var out []memberText
	for _, m := range ms {
		if skip != "" && serde.KeyIs(m.Key(raw), skip) {
			continue
		}
		out = append(out, memberText{string(m.Key(raw)), string(m.Value(raw))})
	}
	return out
}

func runFuzzSteps(t *testing.T, p *Pipeline, in []byte, headers ...Header) ([]byte, error) {
	t.Helper()
	v, err := FromJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(context.Background(), Record{Value: v, Raw: in, Headers: headers})
	if err != nil {
		return nil, err
	}
	b, err := serde.AppendJSON(nil, out[0].Value, "")
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		t.Fatalf("%s: output is not JSON: %s", in, b)
	}
	return b, nil
}

// outMembers returns the members of the output object b.
func outMembers(t *testing.T, b []byte) ([]byte, []serde.Member) {
	v, err := FromJSON(b)
	if err != nil {
		t.Fatalf("output %s: %v", b, err)
	}
	o := v.(*object)
	if err := o.index(); err != nil {
		t.Fatalf("output %s: %v", b, err)
	}
	return o.raw, o.members
}

func fuzzAdd(t *testing.T, in []byte, inMembers []memberText) {
	add, _ := fuzzPipelines(t)
	out, err := runFuzzSteps(t, add, in)
	if err != nil {
		t.Fatalf("%s: adding a field failed: %v", in, err)
	}
	raw, ms := outMembers(t, out)
	got := memberTexts(raw, ms, "zz_new")
	want := inMembers
	var filtered []memberText
	for _, m := range want {
		if !serde.KeyIs([]byte(m.key), "zz_new") {
			filtered = append(filtered, m)
		}
	}
	if !reflect.DeepEqual(got, filtered) {
		t.Fatalf("%s: adding a field changed others:\n%s", in, out)
	}
}

func fuzzCopy(t *testing.T, in []byte, key string, inMembers []memberText) {
	_, cp := fuzzPipelines(t)
	out, err := runFuzzSteps(t, cp, in, Header{Key: "k", Value: []byte(key)})
	var rawIn []byte
	for _, m := range inMembers {
		if serde.KeyIs([]byte(m.key), key) {
			rawIn = []byte(m.value) // the last one is what is read
		}
	}
	if rawIn[0] == '{' || rawIn[0] == '[' {
		// An object or list is copied as its bytes: nothing reads an
		// object's members (a list's elements are read, but not the
		// members of its objects).
		if err != nil {
			if rawIn[0] == '{' || !errors.Is(err, serde.ErrInexact) {
				t.Fatalf("%s: copying %q failed: %v", in, key, err)
			}
			return
		}
		raw, ms := outMembers(t, out)
		if v, _ := memberValue(raw, ms, "zz_copy"); string(v) != string(rawIn) {
			t.Fatalf("%s: copied %q as %s, want its bytes %s", in, key, v, rawIn)
		}
		return
	}
	want, wantErr := serde.DecodeValue(rawIn, key, serde.Typed)
	if err != nil {
		if !errors.Is(err, serde.ErrInexact) || wantErr == nil {
			t.Fatalf("%s: copying %q failed with %v; the value %s reads as %v, %v", in, key, err, rawIn, want, wantErr)
		}
		return
	}
	if wantErr != nil {
		t.Fatalf("%s: copying %q succeeded, but %s has no exact form: %v", in, key, rawIn, wantErr)
	}
	raw, ms := outMembers(t, out)
	copied, _ := memberValue(raw, ms, "zz_copy")
	got, err := serde.DecodeValue(copied, "zz_copy", serde.Typed)
	if err != nil || !sameValue(got, want) {
		t.Fatalf("%s: copied %q as %s (%v), want the value of %s", in, key, copied, err, rawIn)
	}
	if f, ok := want.(float64); ok && !serde.IsDoubleText(string(copied)) {
		t.Fatalf("%s: double %v written as %s, which reads as an int", in, f, copied)
	}
	if got := memberTexts(raw, ms, "zz_copy"); !reflect.DeepEqual(got, memberTextsWithout(inMembers, "zz_copy")) {
		t.Fatalf("%s: copying a field changed others:\n%s", in, out)
	}
}

func memberValue(raw []byte, ms []serde.Member, key string) ([]byte, bool) {
	for _, m := range ms {
		if serde.KeyIs(m.Key(raw), key) {
			return m.Value(raw), true
		}
	}
	return nil, false
}

func memberTextsWithout(ms []memberText, key string) []memberText {
	var out []memberText
	for _, m := range ms {
		if !serde.KeyIs([]byte(m.key), key) {
			out = append(out, m)
		}
	}
	return out
}

func fuzzDrop(t *testing.T, in []byte, key string) {
	if strings.Contains(key, ".") {
		return // a path, not one field
	}
	drop := &Pipeline{steps: []step{{name: "drop", run: dropStep([]string{key})}}}
	out, err := runFuzzSteps(t, drop, in)
	if err != nil {
		t.Fatalf("%s: drop %q failed: %v", in, key, err)
	}
	v, _ := FromJSON(in)
	o := v.(*object)
	_ = o.index()
	raw, ms := outMembers(t, out)
	if got, want := memberTexts(raw, ms, ""), memberTexts(o.raw, o.members, key); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: drop %q gave %s", in, key, out)
	}
}

// sameValue compares values decoded by the text rule; doubles by bits,
// so that -0.0 is not 0.0.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, e := range x {
			if !sameValue(e, y[k]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}
