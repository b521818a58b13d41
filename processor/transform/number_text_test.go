package transform

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/exactly-io/exactly/serde"
)

// TestNumberTextKept: a number taken from the input as it is leaves with
// its text (values.md, rule 2) whichever step moves it: set, key, explode,
// an aggregate's group. A number an expression computes is written by its
// type.
func TestNumberTextKept(t *testing.T) {
	runValueCases(t, []valueCase{
		{name: "set keeps a selected number's text", steps: "      - set: { a: 'value.x', b: 'value.y' }\n", in: `{"x":1E1,"y":12.50}`,
			want: `{"x":1E1,"y":12.50,"a":1E1,"b":12.50}`},
		{name: "explode keeps numbers' text", steps: "      - explode: 'value.items'\n", in: `{"items":[1E1,12.50,3,-0.0,1e-7,12345678901234567890.12]}`,
			want: `1E1|12.50|3|-0.0|1e-7|12345678901234567890.12`},
		{name: "explode of a nested list keeps numbers' text", steps: "      - explode: 'value.o.items'\n", in: `{"o":{"items":[1.0,2E0]}}`,
			want: `1.0|2E0`},
		{name: "explode keeps lists' and objects' text", steps: "      - explode: 'value.items'\n", in: `{"items":[[1.0, 2],{"q":1E1},true]}`,
			want: `[1.0, 2]|{"q":1E1}|true`},
		{name: "explode then a step reads the number", steps: "      - explode: 'value.items'\n      - filter: 'value > 5.0'\n", in: `{"items":[1E1,2.50,12.50]}`,
			want: `1E1|12.50`},
		{name: "explode of a computed list writes by type", steps: "      - explode: 'value.items.map(i, i * 2.0)'\n", in: `{"items":[1E1,12.50]}`,
			want: `20.0|25.0`},
		{name: "explode of a list a step set", steps: "      - set: { items: '[1.50, 2]' }\n      - explode: 'value.items'\n", in: `{}`,
			want: `1.5|2`},
		{name: "explode with an unreadable element fails naming it", steps: "      - explode: 'value.items'\n", in: `{"items":[1,1e400]}`,
			wantErr: `field "items[1]": number 1e400 is beyond the range of a double`},
	})
}

// TestAggregateValuesKeepNumberText: an aggregation that only selects a
// number gets its text, which min, max, first and last write as it came
// and a sum reads exactly; a computed number is its native value.
func TestAggregateValuesKeepNumberText(t *testing.T) {
	p, err := compileSteps(t, `      - aggregate:
          window: { tumbling: 1m }
          aggregations:
            a: { max: value.price }
            b: { last: value.o.q }
            c: { sum: value.price * 2.0 }
            d: { first: value.s }
            e: count
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := p.Aggregate()
	for _, tc := range []struct {
		in   string
		want []any
	}{
		{`{"price":12.50,"o":{"q":1E1},"s":"x"}`, []any{json.Number("12.50"), json.Number("1E1"), 25.0, "x", nil}},
		{`{"price":12345678901234567890.12,"o":{"q":-0.0},"s":"y"}`, []any{json.Number("12345678901234567890.12"), json.Number("-0.0"), 12345678901234567890.12 * 2, "y", nil}},
		{`{"price":7.0,"o":{"q":null},"s":"z"}`, []any{json.Number("7.0"), nil, 14.0, "z", nil}},
	} {
		r := &Record{Value: decodeJSON(t, tc.in), Timestamp: time.Now()}
		got, err := a.Values(t.Context(), r)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Values = %#v, want %#v", tc.in, got, tc.want)
		}
	}
}

// TestExplodedNumberKeyText: an element that explode made the value, a
// number, is the key as its text.
func TestExplodedNumberKeyText(t *testing.T) {
	p, err := compileSteps(t, "      - explode: 'value.ids'\n      - key: 'value'\n", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	in := `{"ids":[1E1,12.50,7]}`
	out, err := p.Apply(t.Context(), Record{Value: decodeJSON(t, in), Raw: []byte(in)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range out {
		keys = append(keys, string(r.Key))
	}
	if want := []string{"1E1", "12.50", "7"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys = %q, want %q", keys, want)
	}
}

// TestIndexedSelectionKeepsNumberText: a number selected through a list
// index is the input's number too.
func TestIndexedSelectionKeepsNumberText(t *testing.T) {
	runValueCases(t, []valueCase{
		{name: "set of an element", steps: "      - set: { a: 'value.items[1]' }\n", in: `{"items":[1E1, 12.50]}`,
			want: `{"items":[1E1, 12.50],"a":12.50}`},
		{name: "set of a field of an element", steps: "      - set: { a: 'value.o.l[0].q' }\n", in: `{"o":{"l":[{"q":1.0E+2}]}}`,
			want: `{"o":{"l":[{"q":1.0E+2}]},"a":1.0E+2}`},
		{name: "set of an element of a list a step set", steps: "      - set: { l: '[1.50]' }\n      - set: { a: 'value.l[0]' }\n", in: `{}`,
			want: `{"l":[1.5],"a":1.5}`},
		{name: "a computed index is computed", steps: "      - set: { a: 'value.items[size(value.items) - 1]' }\n", in: `{"items":[1E1, 12.50]}`,
			want: `{"items":[1E1, 12.50],"a":12.5}`},
	})
}

// TestExplodeIntoTextOutputs: exploded elements written by a string or
// bytes output are a string's text, unquoted, and a number's text as it
// came.
func TestExplodeIntoTextOutputs(t *testing.T) {
	p, err := compileSteps(t, "      - explode: 'value.items'\n", NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	in := `{"items":["abc","a\u00e9",1E1,12.50,{"q":2.0}]}`
	out, err := p.Apply(t.Context(), Record{Value: decodeJSON(t, in), Raw: []byte(in)})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{serde.String, serde.Bytes} {
		c, err := serde.New(format)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range out {
			b, err := c.Encode(r.Value)
			if err != nil {
				t.Fatalf("%s: %v", format, err)
			}
			got = append(got, string(b))
		}
		if want := []string{"abc", "aé", "1E1", "12.50", `{"q":2.0}`}; !reflect.DeepEqual(got, want) {
			t.Errorf("%s output = %q, want %q", format, got, want)
		}
	}
}
