package transform

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/serde"
)

// apply runs steps on the JSON in and returns the output JSON of each
// record, or the error.
func apply(t testing.TB, steps, in string) ([]string, error) {
	t.Helper()
	p, err := compileSteps(t, steps, NewRegistry())
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	v, err := FromJSON([]byte(in))
	if err != nil {
		t.Fatalf("FromJSON(%s): %v", in, err)
	}
	out, err := p.Apply(context.Background(), Record{Value: v, Raw: []byte(in)})
	if err != nil {
		return nil, err
	}
	var got []string
	for _, r := range out {
		if r.Raw != nil {
			got = append(got, string(r.Raw))
			continue
		}
		b, err := serde.AppendJSON(nil, r.Value, "")
		if err != nil {
			return nil, err
		}
		got = append(got, string(b))
	}
	return got, nil
}

// TestValues holds the value rules of values.md, "The rules": an
// untouched field keeps its bytes and place, a number's type follows its
// text, and a value with no exact form is an error naming its field.
func TestValues(t *testing.T) {
	const touch = "      - set: { touched: 'true' }\n"
	tests := []valueCase{
		{name: "untouched numbers keep their text and order", steps: touch,
			in:   `{"event_id":"n1","f":2.0,"g":3.60,"e":1E2,"z":-0.0,"i":-0}`,
			want: `{"event_id":"n1","f":2.0,"g":3.60,"e":1E2,"z":-0.0,"i":-0,"touched":true}`},
		{name: "untouched underflow is kept", steps: touch, in: `{"tiny":1e-400}`, want: `{"tiny":1e-400,"touched":true}`},
		{name: "untouched overflow is kept", steps: touch, in: `{"huge":1e400}`, want: `{"huge":1e400,"touched":true}`},
		{name: "untouched big integer is kept", steps: touch, in: `{"id":123456789012345678901234567890}`, want: `{"id":123456789012345678901234567890,"touched":true}`},
		{name: "untouched lone surrogates are kept", steps: touch,
			in:   `{"event_id":"s1","name":"\ud800x","note":"\udc00"}`,
			want: `{"event_id":"s1","name":"\ud800x","note":"\udc00","touched":true}`},
		{name: "layout is kept", steps: touch, in: "{ \"a\" : [1, 2],\n  \"b\":{\"c\" : 1.50} }\n", want: "{ \"a\" : [1, 2],\n  \"b\":{\"c\" : 1.50},\"touched\":true }"},
		{name: "a double is a double", steps: "      - set: { y: 'value.f * 1.5' }\n", in: `{"f":2.0}`, want: `{"f":2.0,"y":3.0}`},
		{name: "an exponent makes a double", steps: "      - set: { y: 'value.e + 0.5' }\n", in: `{"e":1E2}`, want: `{"e":1E2,"y":100.5}`},
		{name: "an int is an int", steps: "      - set: { y: 'value.n * 2' }\n", in: `{"n":21}`, want: `{"n":21,"y":42}`},
		{name: "int and double do not mix", steps: "      - set: { y: 'value.f * 2' }\n", in: `{"f":2.0}`, wantErr: "no such overload"},
		{name: "a written double keeps its point", steps: "      - set: { d: '6.0 / 2.0', big: '1e21 * 1.0', small: '0.0000001' }\n", in: `{}`,
			want: `{"big":1e+21,"d":3.0,"small":1e-7}`},
		{name: "negative zero read and written", steps: "      - set: { z2: 'value.z' }\n", in: `{"z":-0.0}`, want: `{"z":-0.0,"z2":-0.0}`},
		// A number that a set only selects keeps its text, as in a key or
		// a header: through its double, 12345678901234567890.12 would be
		// 12345678901234567000.0.
		{name: "a selected number keeps its text", steps: "      - set: { copy: 'value.amount', e2: 'value.e', g2: 'value.g', n2: 'value.o.n', i2: 'value.i' }\n",
			in:   `{"amount":12345678901234567890.12,"e":1E2,"g":3.60,"o":{"n":1.00000000000000000001},"i":-0}`,
			want: `{"amount":12345678901234567890.12,"e":1E2,"g":3.60,"o":{"n":1.00000000000000000001},"i":-0,"copy":12345678901234567890.12,"e2":1E2,"g2":3.60,"i2":-0,"n2":1.00000000000000000001}`},
		// Keys of a CEL map that write one JSON key: one entry would be
		// lost, which one by the map's iteration order (case 30).
		{name: "map keys that collide as JSON keys fail", steps: "      - set: { m: '{1: \"int\", \"1\": \"str\"}' }\n", in: `{}`,
			wantErr: `field "m": the map has two keys that both write the object key "1"`},
		{name: "bool and string keys collide too", steps: "      - set: { m: '{true: 1, \"true\": 2}' }\n", in: `{}`,
			wantErr: `field "m": the map has two keys that both write the object key "true"`},
		// An explicit conversion refuses an underflow as it refuses an
		// overflow (case 8): the nearest double of 1e-400 is no number
		// the text names.
		{name: "double of a string that underflows fails", steps: "      - set: { d: 'double(value.s)' }\n", in: `{"s":"1e-400"}`,
			wantErr: `d: string "1e-400" underflows to zero as a double`},
		{name: "double of a hex string that underflows fails", steps: "      - set: { d: 'double(value.s)' }\n", in: `{"s":"-0x1p-2000"}`,
			wantErr: `underflows to zero as a double`},
		{name: "double of zero strings is zero", steps: "      - set: { a: 'double(\"0.0\")', b: 'double(\"-0e5\")', c: 'double(\"0x0p-3\")', d: 'double(\"5e-324\")' }\n", in: `{}`,
			want: `{"a":0.0,"b":-0.0,"c":0.0,"d":5e-324}`},
		{name: "a computed number is its double", steps: "      - set: { l: '[value.g]', y: 'value.g + 0.0' }\n", in: `{"g":3.60}`, want: `{"g":3.60,"l":[3.6],"y":3.6}`},
		{name: "reading an underflow fails", steps: "      - set: { y: 'value.tiny * 2.0' }\n", in: `{"tiny":1e-400}`,
			wantErr: `y: field "tiny": number 1e-400 underflows to zero as a double`},
		{name: "reading an overflow fails", steps: "      - filter: 'value.huge > 0.0'\n", in: `{"huge":-1e400}`,
			wantErr: `field "huge": number -1e400 is beyond the range of a double`},
		{name: "reading a big integer fails", steps: "      - filter: 'value.id > 0'\n", in: `{"id":9223372036854775808}`,
			wantErr: `field "id": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		{name: "the largest int64 reads", steps: "      - set: { y: 'value.id - 1' }\n", in: `{"id":9223372036854775807}`, want: `{"id":9223372036854775807,"y":9223372036854775806}`},
		{name: "reading a lone surrogate fails", steps: "      - set: { n: 'value.name + \"!\"' }\n", in: `{"name":"\ud800x"}`,
			wantErr: `n: field "name": string has a lone surrogate \ud800, which is not text`},
		{name: "a surrogate pair reads", steps: "      - set: { n: 'value.name + \"!\"' }\n", in: `{"name":"\ud83d\ude00"}`, want: `{"name":"\ud83d\ude00","n":"😀!"}`},
		{name: "nested lone surrogate fails when read", steps: "      - set: { n: 'value.c.note' }\n", in: `{"c":{"note":"\udc00"}}`,
			wantErr: `field "c.note": string has a lone surrogate \udc00`},
		{name: "has() does not read the value", steps: "      - filter: 'has(value.huge)'\n", in: `{"huge":1e400}`, want: `{"huge":1e400}`},
		{name: "NaN and Inf are not written", steps: "      - set: { inf: 'double(value.n) / 0.0', nan: '0.0 / 0.0' }\n", in: `{"n":1}`,
			wantErr: `field "inf": +Inf cannot be written as JSON`},
		{name: "NaN is not written", steps: "      - set: { nan: '0.0 / 0.0' }\n", in: `{"n":1}`,
			wantErr: `field "nan": NaN cannot be written as JSON`},
		{name: "-Inf in a list is not written", steps: "      - set: { l: '[1.0, -1.0 / 0.0]' }\n", in: `{}`,
			wantErr: `field "l[1]": -Inf cannot be written as JSON`},
		{name: "set replaces in place", steps: "      - set: { b: '\"new\"' }\n", in: `{"a":1, "b":"old", "c":3}`, want: `{"a":1, "b":"new", "c":3}`},
		{name: "nested set splices inside", steps: "      - set: { a.z: '1' }\n", in: `{"a":{"x":1, "y":2.50},"b":0}`, want: `{"a":{"x":1, "y":2.50,"z":1},"b":0}`},
		{name: "drop the middle", steps: "      - drop: [b]\n", in: `{"a":1, "b":2, "c":3}`, want: `{"a":1, "c":3}`},
		{name: "drop the first", steps: "      - drop: [a]\n", in: `{"a":1, "b":2, "c":3}`, want: `{"b":2, "c":3}`},
		{name: "drop the last", steps: "      - drop: [c]\n", in: `{"a":1, "b":2, "c":3}`, want: `{"a":1, "b":2}`},
		{name: "drop all", steps: "      - drop: [a, b]\n", in: `{ "a":1, "b":2 }`, want: `{  }`},
		{name: "drop nested", steps: "      - drop: [a.x]\n", in: `{"a":{"x":1,"y":1e400}}`, want: `{"a":{"y":1e400}}`},
		{name: "rename keeps the value's bytes", steps: "      - rename: { a: b }\n", in: `{"a":2.50,"c":"\udc00"}`, want: `{"c":"\udc00","b":2.50}`},
		{name: "rename an object keeps its bytes", steps: "      - rename: { a: x.y }\n", in: `{"a":{"k" : 1e400}}`, want: `{"x":{"y":{"k" : 1e400}}}`},
		{name: "a copied list keeps its bytes", steps: "      - set: { copy: 'value.items' }\n", in: `{"items":[1, 2.0, {"k":"v"}]}`, want: `{"items":[1, 2.0, {"k":"v"}],"copy":[1, 2.0, {"k":"v"}]}`},
		{name: "a copied object keeps its bytes", steps: "      - set: { copy: 'value.o' }\n", in: `{"o":{"b":1.50,"a":1}}`, want: `{"o":{"b":1.50,"a":1},"copy":{"b":1.50,"a":1}}`},
		// A list with an element that has no exact value is read as an
		// object with such a member is ([1e400] and {"x":1e400} get the
		// same outcome): copied whole it keeps
		// its bytes, its size and other elements read; what reads the
		// element, or every element, fails naming it.
		{name: "a list with an unreadable element has a size", steps: "      - set: { n: 'size(value.items)', first: 'value.items[0]' }\n", in: `{"items":[1,1e400]}`,
			want: `{"items":[1,1e400],"first":1,"n":2}`},
		{name: "a list with an unreadable element is copied whole", steps: "      - set: { copy: 'value.items', o: '{\"l\": value.items}' }\n", in: `{"items":[1,1e400,"\ud800"]}`,
			want: `{"items":[1,1e400,"\ud800"],"copy":[1,1e400,"\ud800"],"o":{"l":[1,1e400,"\ud800"]}}`},
		{name: "a list's unreadable element fails its read", steps: "      - set: { n: 'value.items[1]' }\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		{name: "a list with an unreadable element fails ==", steps: "      - filter: 'value.items == [1, 2]'\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		{name: "a list with an unreadable element fails in", steps: "      - filter: '7 in value.items'\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		// A macro reads the elements it needs: exists(x, x == 1) is true
		// at the first, whatever the second is; one that reaches the
		// second fails.
		{name: "a macro stops before an unreadable element", steps: "      - filter: 'value.items.exists(x, x == 1)'\n", in: `{"items":[1,1e400]}`, want: `{"items":[1,1e400]}`},
		{name: "a list with an unreadable element fails a macro", steps: "      - filter: 'value.items.exists(x, x == 2)'\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		// An element that is an object with duplicate keys: comparing it
		// with a number reads none of its keys (an object is never 2), so
		// exists and in agree, false; what reads its keys fails naming the
		// key, never with cel-go's "internal error: interface conversion".
		{name: "a macro comparing an element with duplicate keys to a number", steps: "      - filter: '!value.v.exists(x, x == 2)'\n      - set: { n: 'value.v.size()' }\n", in: `{"v":[1,{"a":1,"a":2}],"w":3}`,
			want: `{"v":[1,{"a":1,"a":2}],"w":3,"n":2}`},
		{name: "in comparing an element with duplicate keys to a number", steps: "      - filter: '2 in value.v'\n", in: `{"v":[1,{"a":1,"a":2}]}`},
		{name: "a macro reading an element with duplicate keys fails naming the key", steps: "      - filter: 'value.v.exists(x, x == {\"a\": 2})'\n", in: `{"v":[1,{"a":1,"a":2}]}`,
			wantErr: `field "v[1].a": duplicate key "a" in object`},
		{name: "size of an object with duplicate keys fails naming the key", steps: "      - set: { n: 'size(value.o)' }\n", in: `{"o":{"a":1,"a":2}}`,
			wantErr: `field "o.a": duplicate key "a" in object`},
		{name: "a member size of an object with duplicate keys fails naming the key", steps: "      - set: { n: 'value.o.size()' }\n", in: `{"o":{"a":1,"a":2}}`,
			wantErr: `field "o.a": duplicate key "a" in object`},
		{name: "a map equal to an object with duplicate keys fails naming the key", steps: "      - filter: '{\"a\": 2} == value.o'\n", in: `{"o":{"a":1,"a":2}}`,
			wantErr: `field "o.a": duplicate key "a" in object`},
		{name: "a list with an unreadable element fails +", steps: "      - set: { l: 'value.items + [3]' }\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		{name: "a list with an unreadable element fails distinct", steps: "      - set: { l: 'value.items.distinct()' }\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		{name: "a list with an unreadable element fails sets.contains", steps: "      - filter: 'sets.contains(value.items, [7])'\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		{name: "a list with an unreadable element fails math.greatest", steps: "      - set: { m: 'math.greatest(value.items)' }\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
		{name: "duplicate keys: a read fails", steps: "      - set: { b: 'value.a + 1' }\n", in: `{"a":1,"a":2}`,
			wantErr: `b: field "a": duplicate key "a" in object`},
		{name: "duplicate keys: a set fails", steps: "      - set: { a: '9' }\n", in: `{"a":1,"b":0,"a":2}`,
			wantErr: `field "a": duplicate key "a" in object`},
		{name: "duplicate keys: a new field fails", steps: touch, in: `{"id":"t20","s":"x","id":"t20b"}`,
			wantErr: `field "id": duplicate key "id" in object`},
		{name: "duplicate keys: reading another field fails", steps: "      - filter: 'value.id == \"t02\"'\n", in: `{"id":"t02","s":"a","s":"b"}`,
			wantErr: `field "s": duplicate key "s" in object`},
		{name: "duplicate keys: an escaped duplicate", steps: "      - set: { t: 'value.s' }\n", in: `{"id":"t01","s":"a","\u0073":"b"}`,
			wantErr: `t: field "s": duplicate key "s" in object (written "s" and "\u0073")`},
		{name: "duplicate keys: has() reads the keys", steps: "      - filter: 'has(value.z)'\n", in: `{"a":1,"a":2}`,
			wantErr: `field "a": duplicate key "a" in object`},
		{name: "duplicate keys: rename fails", steps: "      - rename: { a: b }\n", in: `{"id":"e03","a":1,"a":2,"z":1}`,
			wantErr: `field "a": duplicate key "a" in object`},
		{name: "duplicate keys: rename of another field fails", steps: "      - rename: { z: y }\n", in: `{"id":"e03","a":1,"a":2,"z":1}`,
			wantErr: `field "a": duplicate key "a" in object`},
		{name: "duplicate keys: rename of a missing field fails", steps: "      - rename: { q: y }\n", in: `{"id":"e03","a":1,"a":2,"z":1}`,
			wantErr: `field "a": duplicate key "a" in object`},
		{name: "duplicate keys: drop fails", steps: "      - drop: [a]\n", in: `{"a":1,"b":0,"a":2}`,
			wantErr: `field "a": duplicate key "a" in object`},
		{name: "duplicate keys: size fails", steps: "      - set: { n: 'size(value.x)' }\n", in: `{"x":{"b":1,"\u0062":2}}`,
			wantErr: `field "x.b": duplicate key "b" in object`},
		{name: "duplicate keys: iteration fails", steps: "      - set: { k: 'value.x.map(k, k)' }\n", in: `{"x":{"b":1,"d":0,"a":2,"b":3}}`,
			wantErr: `field "x.b": duplicate key "b" in object`},
		{name: "duplicate keys: a comparison fails", steps: "      - filter: 'value.x == {\"b\": 1}'\n", in: `{"x":{"b":1,"b":1}}`,
			wantErr: `field "x.b": duplicate key "b" in object`},
		{name: "duplicate keys: nested, read", steps: "      - set: { t: 'value.n.m.c' }\n", in: `{"n":{"m":{"c":1,"c":2}}}`,
			wantErr: `t: field "n.m.c": duplicate key "c" in object`},
		{name: "duplicate keys: nested, set inside", steps: "      - set: { n.m.d: '1' }\n", in: `{"n":{"m":{"c":1,"c":2}}}`,
			wantErr: `field "n.m.c": duplicate key "c" in object`},
		{name: "duplicate keys: nested, drop inside", steps: "      - drop: [n.c]\n", in: `{"n":{"c":1,"c":2}}`,
			wantErr: `field "n.c": duplicate key "c" in object`},
		{name: "duplicate keys: in an array of objects, read", steps: "      - set: { q: 'value.items[1].q' }\n", in: `{"items":[{"q":1},{"q":2,"q":3}]}`,
			wantErr: `q: field "items[1].q": duplicate key "q" in object`},
		{name: "duplicate keys: in an array of objects, explode", steps: "      - explode: 'value.items'\n      - set: { n: '1' }\n", in: `{"items":[{"q":1},{"q":2,"q":3}]}`,
			wantErr: `field "q": duplicate key "q" in object`},
		{name: "duplicate keys: a large object", steps: touch, in: bigObject(40, `,"k3":0`),
			wantErr: `field "k3": duplicate key "k3" in object`},
		{name: "duplicate keys: a large object, escaped", steps: "      - set: { y: 'value.k1' }\n", in: bigObject(40, `,"\u006b39":0`),
			wantErr: `field "k39": duplicate key "k39" in object (written "k39" and "\u006b39")`},
		{name: "duplicate keys: a large object, unique", steps: "      - set: { y: 'value.k39' }\n", in: bigObject(40, `,"\u006b40":0`),
			want: bigObject(40, `,"\u006b40":0,"y":39`)},
		{name: "duplicate keys: an untouched nested object passes", steps: touch, in: `{"id":"n1","n":{"a":1,"a":2},"l":[{"q":1,"q":2}]}`,
			want: `{"id":"n1","n":{"a":1,"a":2},"l":[{"q":1,"q":2}],"touched":true}`},
		{name: "duplicate keys: a copied object is not read", steps: "      - set: { c: 'value.n' }\n      - rename: { l: m }\n", in: `{"n":{"a":1,"a":2},"l":[{"q":1,"q":2}]}`,
			want: `{"n":{"a":1,"a":2},"c":{"a":1,"a":2},"m":[{"q":1,"q":2}]}`},
		{name: "duplicate keys: a nested object with one is not read by has()", steps: "      - filter: 'has(value.n)'\n", in: `{"n":{"a":1,"a":2}}`,
			want: `{"n":{"a":1,"a":2}}`},
		{name: "an escaped key is the same field", steps: "      - set: { a: 'value.a + 1' }\n", in: `{"\u0061":1}`, want: `{"\u0061":2}`},
		{name: "escapes read and written", steps: "      - set: { t: 'value.s' }\n", in: `{"s":"a\"b\u00e9\n"}`, want: `{"s":"a\"b\u00e9\n","t":"a\"bé\n"}`},
		{name: "filter, key, route leave the bytes", steps: "      - filter: 'value.n == 1'\n      - key: 'value.s'\n      - route: [{ topic: eu }]\n",
			in: `{"s":"x" , "n":1,"f":1.0}`, want: `{"s":"x" , "n":1,"f":1.0}`},
		{name: "whole-map operations see edits", steps: "      - set: { b: '1' }\n      - set: { n: 'size(value)', eq: 'value == {\"a\": 1, \"b\": 1}' }\n", in: `{"a":1}`,
			want: `{"a":1,"b":1,"eq":true,"n":2}`},
		{name: "explode keeps the elements' bytes", steps: "      - explode: 'value.items'\n      - set: { n: '1' }\n", in: `{"items":[{"q":1.50},{"q":2}]}`,
			want: `{"q":1.50,"n":1}|{"q":2,"n":1}`},
		{name: "a set step sees the value before it", steps: "      - set: { a: 'value.b', b: 'value.a' }\n", in: `{"a":{"x":1},"b":2}`, want: `{"a":2,"b":{"x":1}}`},
		{name: "a value set by a step is read by the next", steps: "      - set: { a: '1.5', s: '\"x\"', n: 'null', b: 'true', i: '7', u: '7u' }\n      - set: { d: 'value.a * 2.0', t: 'value.s + value.s', isnull: 'value.n == null', nb: '!value.b', j: 'value.i + 1', v: 'value.u + 1u' }\n", in: `{}`,
			want: `{"a":1.5,"b":true,"i":7,"n":null,"s":"x","u":7,"d":3.0,"isnull":true,"j":8,"nb":false,"t":"xx","v":8}`},
		{name: "a value set by a step is renamed", steps: "      - set: { a: '2.0' }\n      - rename: { a: b.c }\n", in: `{"z":0}`, want: `{"z":0,"b":{"c":2.0}}`},
		{name: "a null set by a step becomes an object", steps: "      - set: { a: 'null' }\n      - set: { a.b: '1' }\n", in: `{}`, want: `{"a":{"b":1}}`},
		{name: "iteration follows the document", steps: "      - set: { x.c: '1' }\n      - drop: [x.d]\n      - set: { k: 'value.x.map(k, k)' }\n", in: `{"x":{"b":1,"d":0,"a":2,"e":3}}`,
			want: `{"x":{"b":1,"a":2,"e":3,"c":1},"k":["b","a","e","c"]}`},
		{name: "a comparison reads every field", steps: "      - set: { n: 'value.x == {\"y\": 1}' }\n", in: `{"x":{"y":1e400}}`,
			wantErr: `field "x.y": number 1e400 is beyond the range of a double`},
		{name: "a key that is not text fails iteration", steps: "      - filter: 'value.x.all(k, k != \"z\")'\n", in: `{"x":{"\udc00":1}}`,
			wantErr: `field "x": string has a lone surrogate \udc00`},
		{name: "size does not read the values", steps: "      - set: { n: 'size(value.x)' }\n", in: `{"x":{"y":1e400,"z":1}}`, want: `{"x":{"y":1e400,"z":1},"n":2}`},
		{name: "a uint is written as an integer", steps: "      - set: { u: '18446744073709551615u' }\n", in: `{}`, want: `{"u":18446744073709551615}`},
	}
	runValueCases(t, tests)
}

// valueCase is steps run on the JSON in: the output JSON (records joined
// by |) must be want, or the error contain wantErr.
type valueCase struct {
	name, steps, in string
	want            string // the output JSON, or
	wantErr         string // the error
}

func runValueCases(t *testing.T, tests []valueCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := apply(t, tc.steps, tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q (output %q)", err, tc.wantErr, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.Join(got, "|"); s != tc.want {
				t.Fatalf("output\n%s\nwant\n%s", s, tc.want)
			}
		})
	}
}

// A value that cannot be read is an error wrapping serde.ErrInexact, so
// that callers can tell it from a CEL type error.
func TestValueErrorsWrapErrInexact(t *testing.T) {
	_, err := apply(t, "      - set: { y: 'value.x + 1' }\n", `{"x":1e999}`)
	if !errors.Is(err, serde.ErrInexact) {
		t.Fatalf("error %v does not wrap ErrInexact", err)
	}
	var ve *serde.ValueError
	if !errors.As(err, &ve) || ve.Path != "x" {
		t.Fatalf("error %v: want a *serde.ValueError for x", err)
	}
}

// Chained stages read a number the same way: stage 2 reads what stage 1
// wrote as stage 1 read its input.
func TestChainedStagesAgree(t *testing.T) {
	const steps = "      - set: { y: 'value.f * 1.5' }\n"
	in := `{"event_id":"c1","f":2.0}`
	for stage := 1; stage <= 3; stage++ {
		out, err := apply(t, steps, in)
		if err != nil {
			t.Fatalf("stage %d: %v", stage, err)
		}
		if want := `{"event_id":"c1","f":2.0,"y":3.0}`; out[0] != want {
			t.Fatalf("stage %d: %s, want %s", stage, out[0], want)
		}
		in = out[0]
	}
}

// A Go transform gets the value decoded whole by the text rule; a value
// with no exact Go form fails the record before the call.
func TestFuncStepValues(t *testing.T) {
	reg := NewRegistry()
	var seen map[string]any
	if err := reg.Register("look", func(_ context.Context, r Record) ([]Record, error) {
		seen = r.Value.(map[string]any)
		return []Record{r}, nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err := compileSteps(t, "      - func: look", reg)
	if err != nil {
		t.Fatal(err)
	}
	run := func(in string) ([]Record, error) {
		v, err := FromJSON([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		return p.Apply(context.Background(), Record{Value: v, Raw: []byte(in)})
	}
	out, err := run(`{"i":2,"f":2.0,"s":"\u00e9","l":[1,{"x":1.5}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := seen["i"].(int64); !ok {
		t.Errorf("i = %T, want int64", seen["i"])
	}
	if _, ok := seen["f"].(float64); !ok {
		t.Errorf("f = %T, want float64", seen["f"])
	}
	if b, _ := serde.AppendJSON(nil, out[0].Value, ""); string(b) != `{"f":2.0,"i":2,"l":[1,{"x":1.5}],"s":"é"}` {
		t.Errorf("output %s", b)
	}
	p2, err := compileSteps(t, "      - set: { s: '\"x\"', d: '2.0', n: 'null' }\n      - func: look", reg)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := FromJSON([]byte(`{"i":1}`))
	if _, err := p2.Apply(context.Background(), Record{Value: v}); err != nil {
		t.Fatal(err)
	}
	if seen["s"] != "x" || seen["d"] != 2.0 || seen["n"] != nil || seen["i"] != int64(1) {
		t.Errorf("values set by a step reach a Go transform as %#v", seen)
	}
	for in, want := range map[string]string{
		`{"n":1e400}`:                         `field "n": number 1e400 is beyond the range of a double`,
		`{"n":99999999999999999999}`:          `field "n": integer 99999999999999999999 is beyond`,
		`{"a":{"b":["\udc00"]}}`:              `field "a.b[0]": string has a lone surrogate`,
		`{"ok":1,"tiny":[0.0,-1e-999]}`:       `field "tiny[1]": number -1e-999 underflows to zero`,
		`{"id":"t20","s":"x","id":"t20b"}`:    `field "id": duplicate key "id" in object`,
		`{"id":"t01","s":"a","\u0073":"b"}`:   `field "s": duplicate key "s" in object (written "s" and "\u0073")`,
		`{"id":"n1","n":{"m":{"c":1,"c":2}}}`: `field "n.m.c": duplicate key "c" in object`,
		`{"l":[{"q":1},{"q":2,"q":3}]}`:       `field "l[1].q": duplicate key "q" in object`,
	} {
		if _, err := run(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}

// Field reads the stage's key field from any value shape.
func TestField(t *testing.T) {
	for _, tc := range []struct {
		in, field string
		want      any
		isObject  bool
		wantErr   string
	}{
		{`{"id":"x"}`, "id", "x", true, ""},
		{`{"id":12.50}`, "id", "12.50", true, ""},
		{`{"id":null}`, "id", nil, true, ""},
		{`{"x":1}`, "id", nil, true, ""},
		{`[1]`, "id", nil, false, ""},
		{`{"id":"\udc00"}`, "id", nil, true, `field "id": string has a lone surrogate`},
		{`{"id":"t20","s":"x","id":"t20b"}`, "id", nil, true, `field "id": duplicate key "id" in object`},
		{`{"id":"t02","s":"a","s":"b"}`, "id", nil, true, `field "s": duplicate key "s" in object`},
		{`{"id":"t01","\u0069d":"b"}`, "id", nil, true, `field "id": duplicate key "id" in object (written "id" and "\u0069d")`},
		{`{"id":"n1","n":{"a":1,"a":2}}`, "id", "n1", true, ""},
	} {
		v, err := FromJSON([]byte(tc.in))
		if err != nil {
			t.Fatal(err)
		}
		got, isObject, err := Field(v, tc.field)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if n, ok := got.(interface{ String() string }); ok {
			got = n.String()
		}
		if err != nil || isObject != tc.isObject || got != tc.want {
			t.Errorf("%s: Field = %v, %v, %v; want %v, %v", tc.in, got, isObject, err, tc.want, tc.isObject)
		}
	}
}

// The key field reads a value that a step set as it will be written.
func TestFieldAfterSet(t *testing.T) {
	for steps, want := range map[string]any{
		"      - set: { id: '\"k\"' }\n":      "k",
		"      - set: { id: '7' }\n":          int64(7),
		"      - set: { id: 'null' }\n":       nil,
		"      - set: { id: '{\"a\": 1}' }\n": map[string]any{"a": int64(1)},
	} {
		p, err := compileSteps(t, steps, NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		v, _ := FromJSON([]byte(`{"id":"old"}`))
		out, err := p.Apply(context.Background(), Record{Value: v})
		if err != nil {
			t.Fatal(err)
		}
		got, isObject, err := Field(out[0].Value, "id")
		if err != nil || !isObject || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Field = %#v, %v, %v; want %#v", steps, got, isObject, err, want)
		}
	}
}

// A native object (as Avro decodes) iterates in key order, whatever Go's
// map order, so that a replay computes the same output.
func TestNativeIterationOrder(t *testing.T) {
	p, err := compileSteps(t, "      - set: { k: 'value.map(k, k)', n: 'value.m.map(k, k)' }\n", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		v := map[string]any{"c": int64(1), "a": 2.5, "b": "x", "m": map[string]any{"z": nil, "y": true}}
		out, err := p.Apply(context.Background(), Record{Value: v})
		if err != nil {
			t.Fatal(err)
		}
		b, err := serde.AppendJSON(nil, out[0].Value, "")
		if want := `{"a":2.5,"b":"x","c":1,"m":{"y":true,"z":null},"k":["a","b","c","m"],"n":["y","z"]}`; err != nil || string(b) != want {
			t.Fatalf("%s, %v; want %s", b, err, want)
		}
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

// A record without a timestamp (Kafka's NO_TIMESTAMP, -1) has no instant:
// an expression that reads `timestamp` fails its record, naming it,
// instead of reading 1969-12-31T23:59:59.999Z (the sink stores NULL for
// the same record). An expression that does not read it is unaffected.
func TestNoTimestampInCEL(t *testing.T) {
	p, err := compileSteps(t, "      - set: { y: 'string(timestamp)' }\n", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	in := []byte(`{"event_id":"a"}`)
	v, err := FromJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Apply(context.Background(), Record{Value: v, Raw: in, Timestamp: time.UnixMilli(-1)})
	if err == nil || !strings.Contains(err.Error(), "no timestamp") {
		t.Fatalf("Apply = %v, want an error naming the missing timestamp", err)
	}
	out, err := p.Apply(context.Background(), Record{Value: v, Raw: in, Timestamp: time.UnixMilli(0)})
	if err != nil || len(out) != 1 {
		t.Fatalf("Apply at the epoch = %v, %v; want one record", out, err)
	}
	q, err := compileSteps(t, "      - set: { y: '1' }\n", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Apply(context.Background(), Record{Value: v, Raw: in, Timestamp: time.UnixMilli(-1)}); err != nil {
		t.Fatalf("a step that does not read timestamp: %v", err)
	}
}
