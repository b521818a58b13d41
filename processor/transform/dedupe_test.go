package transform

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDedupeID(t *testing.T) {
	p, err := compileSteps(t, "      - dedupe: { id: value.event_id, retention: 2h }\n      - filter: value.n > 0\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	d := p.Dedupe()
	if d == nil || d.Retention != 2*time.Hour || d.Step != "transform[0] dedupe" {
		t.Fatalf("Dedupe() = %+v", d)
	}
	if p.Len() != 1 {
		t.Fatalf("Len() = %d, want 1 (the dedupe step is not a pipeline step)", p.Len())
	}
	for _, tc := range []struct {
		name, value, want string
		wantErr           string
		noID              bool
	}{
		{name: "string", value: `{"event_id":"e-1","n":1}`, want: "e-1"},
		{name: "integer", value: `{"event_id":42}`, want: "42"},
		{name: "number text kept", value: `{"event_id":4.50}`, want: "4.50"},
		// A number keeps its text at the top level as inside an object:
		// these are five IDs, not one (1E2 and 100.0 differ).
		{name: "exponent kept", value: `{"event_id":1e2}`, want: "1e2"},
		{name: "capital exponent kept", value: `{"event_id":1E2}`, want: "1E2"},
		{name: "trailing zeros kept", value: `{"event_id":100.00}`, want: "100.00"},
		{name: "negative zero kept", value: `{"event_id":-0}`, want: "-0"},
		{name: "big integer kept", value: `{"event_id":9007199254740993}`, want: "9007199254740993"},
		{name: "unreadable number fails", value: `{"event_id":1e400}`, wantErr: "beyond the range of a double"},
		{name: "object", value: `{"event_id":{"a":1}}`, want: `{"a":1}`},
		// One value, one ID, whatever the key order and spacing; numbers
		// keep their text (2.0 is not 2), as at the top level.
		{name: "object keys sorted", value: `{"event_id":{ "b" : 2.0, "a":[1, {"d":1,"c":2}] }}`, want: `{"a":[1,{"c":2,"d":1}],"b":2.0}`},
		{name: "list spacing", value: `{"event_id":[ 1 , "x" ]}`, want: `[1,"x"]`},
		{name: "string that looks like an object kept", value: `{"event_id":"{\"b\":1,\"a\":2}"}`, want: `{"b":1,"a":2}`},
		{name: "null", value: `{"event_id":null}`, noID: true},
		{name: "empty", value: `{"event_id":""}`, noID: true},
		{name: "missing", value: `{"other":1}`, wantErr: "id: no such key: event_id"},
		// A problem inside the selected value names its field, as every
		// other path does ("event_id.a", not "id.a", which could be a
		// field of the record's own).
		{name: "duplicate key inside names the field", value: `{"event_id":{"a":1,"a":2}}`, wantErr: `id: field "event_id.a": duplicate key "a"`},
		{name: "lone surrogate inside names the field", value: `{"event_id":[{"x":"\ud800"}]}`, wantErr: `id: field "event_id[0].x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Record{Value: decodeJSON(t, tc.value)}
			got, err := d.ID(context.Background(), &r)
			switch {
			case tc.noID:
				if !errors.Is(err, ErrNoID) {
					t.Fatalf("ID() = %q, %v; want ErrNoID", got, err)
				}
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ID() = %q, %v; want error %q", got, err, tc.wantErr)
				}
			case err != nil || string(got) != tc.want:
				t.Fatalf("ID() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestDedupeIDCompileError(t *testing.T) {
	_, err := compileSteps(t, "      - dedupe: { id: 'value.event_id +', retention: 2h }\n", nil)
	if err == nil || !strings.HasPrefix(err.Error(), "t.yaml:15:23: stages[0].transform[0].dedupe.id: invalid expression") {
		t.Fatalf("Compile error = %v, want one at dedupe.id", err)
	}
}

// TestDedupeIDNumberText: a selected field's number keeps its text at any
// depth; a number the expression computes is its shortest text.
func TestDedupeIDNumberText(t *testing.T) {
	for _, tc := range []struct{ id, value, want string }{
		{"value.o.id", `{"o":{"id":1.00}}`, "1.00"},
		{" value.o.id ", `{"o":{"id":1E2}}`, "1E2"},
		{"value.o.id", `{"o":{"id":"1.00"}}`, "1.00"},
		{"value.n + 0.0", `{"n":1.00}`, "1.0"},
		{"value.n * 1", `{"n":100}`, "100"},
		{"value.o", `{"o":{"b":1.50,"a":2}}`, `{"a":2,"b":1.50}`},
	} {
		t.Run(tc.id+" "+tc.value, func(t *testing.T) {
			p, err := compileSteps(t, "      - dedupe: { id: '"+tc.id+"', retention: 2h }\n", nil)
			if err != nil {
				t.Fatal(err)
			}
			r := Record{Value: decodeJSON(t, tc.value)}
			got, err := p.Dedupe().ID(context.Background(), &r)
			if err != nil || string(got) != tc.want {
				t.Fatalf("ID() = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestKeyAndHeaderNumberText: the key and headers steps render a selected
// number with its text too, as the stage's key: field does.
func TestKeyAndHeaderNumberText(t *testing.T) {
	p, err := compileSteps(t, "      - key: value.n\n      - headers: { h: value.o.m }\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(context.Background(), Record{Value: decodeJSON(t, `{"n":1E2,"o":{"m":2.50}}`)})
	if err != nil || len(out) != 1 {
		t.Fatalf("Apply = %v, %v", out, err)
	}
	if string(out[0].Key) != "1E2" {
		t.Errorf("key %q, want 1E2", out[0].Key)
	}
	if len(out[0].Headers) != 1 || string(out[0].Headers[0].Value) != "2.50" {
		t.Errorf("headers %+v, want h=2.50", out[0].Headers)
	}
}
