package transform

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/exactly-io/exactly/serde"
)

// memTable is a Table of one version per key, valid from its time on.
type memTable map[string]struct {
	v    string
	from time.Time
}

func (m memTable) Lookup(key []byte, at time.Time) ([]byte, bool, error) {
	e, ok := m[string(key)]
	if !ok || at.Before(e.from) {
		return nil, false, nil
	}
	return []byte(e.v), true, nil
}

func TestJoinStep(t *testing.T) {
	t0 := time.UnixMilli(1_000)
	tb := memTable{
		"c1":       {`{"name":"Ada","tier":1.50}`, t0},
		"7":        {`"seven"`, t0},
		`{"a":1}`:  {`true`, t0},
		"notjson":  {`{bad`, t0},
		"c-future": {`{}`, t0.Add(time.Hour)},
	}
	for _, tc := range []struct {
		name, missing, in string
		want              string // JSON of the output; "" : dropped
		err               error
		errText           bool
	}{
		{name: "found", in: `{"c":"c1","n":1}`, want: `{"c":"c1","n":1,"cust":{"name":"Ada","tier":1.50}}`},
		{name: "number key as text", in: `{"c":7}`, want: `{"c":7,"cust":"seven"}`},
		{name: "object key sorted", in: `{"c":{"a":1}}`, want: `{"c":{"a":1},"cust":true}`},
		{name: "missing drop", in: `{"c":"zz"}`, want: ""},
		{name: "missing null", missing: "null", in: `{"c":"zz"}`, want: `{"c":"zz","cust":null}`},
		{name: "not yet", missing: "null", in: `{"c":"c-future"}`, want: `{"c":"c-future","cust":null}`},
		{name: "null key", missing: "null", in: `{"c":null}`, want: `{"c":null,"cust":null}`},
		{name: "missing dead letter", missing: "dead_letter", in: `{"c":"zz"}`, err: ErrNoMatch},
		{name: "table value not JSON", in: `{"c":"notjson"}`, errText: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steps := "      - join: { table: customers, key: value.c, as: cust, history_retention: 1d"
			if tc.missing != "" {
				steps += `, missing: "` + tc.missing + `"`
			}
			p, err := compileSteps(t, steps+" }\n", nil)
			if err != nil {
				t.Fatal(err)
			}
			if j := p.Join(); j == nil || j.Table != "customers" || j.HistoryRetention != 24*time.Hour || j.Step != "transform[0] join" {
				t.Fatalf("Join() = %+v", j)
			}
			out, err := p.Apply(WithTable(context.Background(), tb), Record{Value: decodeJSON(t, tc.in), Raw: []byte(tc.in), Timestamp: t0})
			switch {
			case tc.err != nil || tc.errText:
				if err == nil || tc.err != nil && !errors.Is(err, tc.err) {
					t.Fatalf("Apply: %v, want %v", err, tc.err)
				}
				return
			case err != nil:
				t.Fatal(err)
			case tc.want == "":
				if len(out) != 0 {
					t.Fatalf("Apply = %d records, want the record dropped", len(out))
				}
				return
			}
			if len(out) != 1 || out[0].Raw != nil {
				t.Fatalf("Apply = %+v", out)
			}
			b, err := serde.AppendJSON(nil, out[0].Value, "")
			if err != nil || string(b) != tc.want {
				t.Fatalf("output %s, %v; want %s", b, err, tc.want)
			}
		})
	}
	t.Run("no table", func(t *testing.T) {
		p, _ := compileSteps(t, "      - join: { table: customers, key: value.c, as: cust, history_retention: 1d }\n", nil)
		if _, err := p.Apply(context.Background(), Record{Value: decodeJSON(t, `{"c":"c1"}`)}); !errors.Is(err, ErrNoTable) {
			t.Fatalf("Apply without a table: %v, want ErrNoTable", err)
		}
	})
}
