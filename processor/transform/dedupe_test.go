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
		{name: "number text kept", value: `{"event_id":4.50}`, want: "4.5"},
		{name: "object", value: `{"event_id":{"a":1}}`, want: `{"a":1}`},
		// One value, one ID, whatever the key order and spacing; numbers
		// keep their text (2.0 is not 2), as at the top level.
		{name: "object keys sorted", value: `{"event_id":{ "b" : 2.0, "a":[1, {"d":1,"c":2}] }}`, want: `{"a":[1,{"c":2,"d":1}],"b":2.0}`},
		{name: "list spacing", value: `{"event_id":[ 1 , "x" ]}`, want: `[1,"x"]`},
		{name: "string that looks like an object kept", value: `{"event_id":"{\"b\":1,\"a\":2}"}`, want: `{"b":1,"a":2}`},
		{name: "null", value: `{"event_id":null}`, noID: true},
		{name: "empty", value: `{"event_id":""}`, noID: true},
		{name: "missing", value: `{"other":1}`, wantErr: "id: no such key: event_id"},
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
