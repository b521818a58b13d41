package transform

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// stageYAML wraps transform steps in a valid one-stage topology.
func stageYAML(steps string) string {
	return topologytest.Head("127.0.0.1:9092", 1, "in", "out", "eu", "us") + `  - name: s
    input: { topic: in }
    output: { topic: out }
    dead_letter: { topic: dlq }
    transform:
` + steps
}

func compileSteps(t testing.TB, steps string, reg *Registry) (*Pipeline, error) {
	t.Helper()
	f, err := topology.Parse("t.yaml", []byte(stageYAML(steps)), nil)
	if err != nil {
		t.Fatalf("topology: %v", err)
	}
	ps, err := Compile(f, reg)
	if err != nil {
		return nil, err
	}
	return ps["s"], nil
}

func decodeJSON(t testing.TB, s string) any {
	t.Helper()
	v, err := FromJSON([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSteps(t *testing.T) {
	tests := []struct {
		name    string
		steps   string
		in      string
		want    []string // values, as JSON
		keys    []string // nil: not checked
		topics  []string // nil: not checked
		wantErr string
	}{
		{name: "filter keeps", steps: "      - filter: 'value.amount > 10'", in: `{"amount":11}`, want: []string{`{"amount":11}`}},
		{name: "filter drops", steps: "      - filter: 'value.amount > 10'", in: `{"amount":10}`, want: nil},
		{name: "filter on missing field fails", steps: "      - filter: 'value.amount > 10'", in: `{"x":1}`, wantErr: "transform[0] filter: no such key: amount"},
		{name: "filter has() guards a missing field", steps: "      - filter: 'has(value.amount) && value.amount > 10'", in: `{"x":1}`, want: nil},
		{name: "set nested creates objects", steps: "      - set: { customer.tier: 'value.amount > 100 ? \"gold\" : \"std\"', total: 'value.amount * 2' }", in: `{"amount":101}`, want: []string{`{"amount":101,"customer":{"tier":"gold"},"total":202}`}},
		{name: "set sees the value before the step", steps: "      - set: { a: 'value.b', b: '\"new\"' }", in: `{"b":"old"}`, want: []string{`{"b":"new","a":"old"}`}},
		{name: "set through a non-object fails", steps: "      - set: { customer.tier: '1' }", in: `{"customer":"bob"}`, wantErr: "cannot set customer.tier: customer is not an object"},
		{name: "set null", steps: "      - set: { a: 'null' }", in: `{"a":1}`, want: []string{`{"a":null}`}},
		{name: "division by zero fails", steps: "      - set: { r: 'value.a / value.b' }", in: `{"a":1,"b":0}`, wantErr: "division by zero"},
		{name: "type error fails", steps: "      - set: { r: 'value.a + 1' }", in: `{"a":"x"}`, wantErr: "no such overload"},
		{name: "drop", steps: "      - drop: [pad, customer.secret, missing]", in: `{"pad":"x","customer":{"secret":1,"id":2}}`, want: []string{`{"customer":{"id":2}}`}},
		{name: "rename", steps: "      - rename: { cust: customer.id }", in: `{"cust":7}`, want: []string{`{"customer":{"id":7}}`}},
		{name: "key", steps: "      - key: 'value.customer_id'", in: `{"customer_id":42}`, want: []string{`{"customer_id":42}`}, keys: []string{"42"}},
		{name: "key string", steps: "      - key: 'value.c + \"-\" + string(partition)'", in: `{"c":"x"}`, want: []string{`{"c":"x"}`}, keys: []string{"x-0"}},
		{name: "route first match", steps: "      - route: [{ when: 'value.region == \"eu\"', topic: eu }, { when: 'value.region == \"us\"', topic: us }]", in: `{"region":"us"}`, want: []string{`{"region":"us"}`}, topics: []string{"us"}},
		{name: "route default", steps: "      - route: [{ when: 'value.region == \"eu\"', topic: eu }, { topic: us }]", in: `{"region":"apac"}`, want: []string{`{"region":"apac"}`}, topics: []string{"us"}},
		{name: "route no match keeps output", steps: "      - route: [{ when: 'value.region == \"eu\"', topic: eu }]", in: `{"region":"apac"}`, want: []string{`{"region":"apac"}`}, topics: []string{""}},
		{name: "explode", steps: "      - explode: 'value.items.map(i, {\"order\": value.id, \"sku\": i.sku})'", in: `{"id":1,"items":[{"sku":"a"},{"sku":"b"}]}`, want: []string{`{"order":1,"sku":"a"}`, `{"order":1,"sku":"b"}`}},
		{name: "explode empty filters", steps: "      - explode: 'value.items'", in: `{"items":[]}`, want: nil},
		{name: "explode then set applies to each", steps: "      - explode: 'value.items'\n      - set: { n: 'value.q * 2' }", in: `{"items":[{"q":1},{"q":2}]}`, want: []string{`{"q":1,"n":2}`, `{"q":2,"n":4}`}},
		{name: "explode on a non-list fails", steps: "      - explode: 'value.items'", in: `{"items":3}`, wantErr: "explode needs a list"},
		{name: "headers", steps: "      - headers: { region: 'value.region' }", in: `{"region":"eu"}`, want: []string{`{"region":"eu"}`}},
		{name: "named step in errors", steps: "      - name: tier\n        set: { t: 'value.missing' }", in: `{}`, wantErr: "tier: t: no such key: missing"},
		{name: "an integer beyond int64 read fails", steps: "      - set: { n: 'value.n + 1' }", in: `{"n":18446744073709551614}`, wantErr: `n: field "n": integer 18446744073709551614 is beyond the range of a 64-bit integer (int64)`},
		{name: "provenance variables", steps: "      - set: { src: 'topic + \"/\" + string(offset)', ts: 'timestamp' }", in: `{}`, want: []string{`{"src":"in/7","ts":"2026-01-02T03:04:05Z"}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := compileSteps(t, tc.steps, NewRegistry())
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			in := Record{Key: []byte("k"), Value: decodeJSON(t, tc.in), Raw: []byte(tc.in), SourceTopic: "in", Offset: 7,
				Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			out, err := p.Apply(context.Background(), in)
			if tc.wantErr != "" {
				var se *StepError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want a StepError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			js, _ := serde.New(serde.JSON)
			var got []string
			for _, r := range out {
				b, err := js.Encode(r.Value)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, string(b))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("values = %q, want %q", got, tc.want)
			}
			for i, k := range tc.keys {
				if string(out[i].Key) != k {
					t.Errorf("key[%d] = %q, want %q", i, out[i].Key, k)
				}
			}
			for i, tp := range tc.topics {
				if out[i].Topic != tp {
					t.Errorf("topic[%d] = %q, want %q", i, out[i].Topic, tp)
				}
			}
			if tc.name == "headers" && (len(out[0].Headers) != 1 || out[0].Headers[0].Key != "region" || string(out[0].Headers[0].Value) != "eu") {
				t.Errorf("headers = %+v", out[0].Headers)
			}
		})
	}
}

func TestRawKeptOnlyWhileUnchanged(t *testing.T) {
	for _, tc := range []struct {
		steps   string
		keepRaw bool
	}{
		{"      - filter: 'true'\n      - key: '\"k\"'\n      - route: [{ topic: eu }]", true},
		{"      - set: { a: '1' }", false},
		{"      - drop: [a]", false},
		{"      - drop: [missing]", true},
	} {
		p, err := compileSteps(t, tc.steps, NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		out, err := p.Apply(context.Background(), Record{Value: decodeJSON(t, `{"a":1}`), Raw: []byte(`{"a":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if (out[0].Raw != nil) != tc.keepRaw {
			t.Errorf("%q: raw kept = %v, want %v", tc.steps, out[0].Raw != nil, tc.keepRaw)
		}
	}
}

func TestCompileErrorsHavePositions(t *testing.T) {
	steps := `      - filter: 'value.amount >'
      - filter: '"not a bool"'
      - set: { ts: 'now()' }
      - key: '1 + "a"'
      - func: nope
`
	_, err := compileSteps(t, steps, NewRegistry())
	var errs topology.Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error = %v, want topology.Errors", err)
	}
	want := []string{
		`t.yaml:15:17: stages[0].transform[0].filter: invalid expression: 1:15: Syntax error`,
		`t.yaml:16:17: stages[0].transform[1].filter: expression has type string, want bool`,
		`t.yaml:17:20: stages[0].transform[2].set.ts: invalid expression: 1:4: undeclared reference to 'now'`,
		`t.yaml:18:14: stages[0].transform[3].key: invalid expression: 1:3: found no matching overload for '_+_' applied to '(int, string)'`,
		`t.yaml:19:15: stages[0].transform[4].func: no Go transform is registered as "nope" (registered: none)`,
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(errs[i].Error(), w) {
			t.Errorf("error %d = %q\nwant prefix %q", i, errs[i].Error(), w)
		}
	}
	if !strings.Contains(errs[2].Error(), "non-deterministic functions are not allowed") {
		t.Errorf("now() error lacks the determinism hint: %v", errs[2])
	}
}

func TestFuncStep(t *testing.T) {
	reg := NewRegistry()
	if err := reg.Register("double", func(_ context.Context, r Record) ([]Record, error) {
		if r.Value == nil {
			return nil, errors.New("no value")
		}
		return []Record{r, r}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("double", func(context.Context, Record) ([]Record, error) { return nil, nil }); err == nil {
		t.Fatal("registering a name twice must fail")
	}
	p, err := compileSteps(t, "      - func: double", reg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Apply(context.Background(), Record{Value: map[string]any{"a": int64(1)}, Raw: []byte(`{"a":1}`)})
	if err != nil || len(out) != 2 || out[0].Raw != nil {
		t.Fatalf("out = %+v, err = %v", out, err)
	}
	if _, err := p.Apply(context.Background(), Record{}); err == nil || !strings.Contains(err.Error(), "transform[0] func: no value") {
		t.Fatalf("err = %v", err)
	}
}

func BenchmarkFiveSteps(b *testing.B) {
	f, err := topology.Parse("t.yaml", []byte(stageYAML(`      - filter: 'value.amount >= 0'
      - set: { customer.tier: 'value.amount > 500 ? "gold" : "std"', total_cents: 'value.amount * 100' }
      - drop: [pad]
      - key: 'value.customer_id'
      - headers: { region: 'value.region' }
`)), nil)
	if err != nil {
		b.Fatal(err)
	}
	ps, err := Compile(f, NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	p := ps["s"]
	raw := []byte(`{"event_id":"e-1","customer_id":"c-42","region":"eu","amount":712,"pad":"` + strings.Repeat("x", 900) + `"}`)
	js, _ := serde.New(serde.JSON)
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		v, err := FromJSON(raw)
		if err != nil {
			b.Fatal(err)
		}
		out, err := p.Apply(context.Background(), Record{Value: v, Raw: raw})
		if err != nil || len(out) != 1 {
			b.Fatal(err)
		}
		if _, err := js.Encode(out[0].Value); err != nil {
			b.Fatal(err)
		}
	}
}

// A Go transform that blocks past the record's deadline fails the record
// (a dead letter), instead of holding the transaction past its timeout.
func TestFuncStepDeadline(t *testing.T) {
	reg := NewRegistry()
	release := make(chan struct{})
	defer close(release)
	if err := reg.Register("stuck", func(context.Context, Record) ([]Record, error) {
		<-release // ignores its context, as a careless transform may
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	p, err := compileSteps(t, "      - func: stuck", reg)
	if err != nil {
		t.Fatal(err)
	}
	if !p.HasFuncs() {
		t.Fatal("HasFuncs() = false for a func step")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = p.Apply(ctx, Record{Value: map[string]any{}})
	var se *StepError
	if !errors.As(err, &se) || !errors.Is(err, ErrTimedOut) {
		t.Fatalf("Apply error = %v, want a StepError wrapping ErrTimedOut", err)
	}
}
