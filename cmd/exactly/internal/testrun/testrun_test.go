package testrun_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/cmd/exactly/internal/testrun"
)

const examples = "../../../../deploy/examples"

func noEnv(string) (string, bool) { return "", false }

// run runs fixture fx against the example topology file topo.
func run(t testing.TB, topo string, fx *testrun.Fixture) (*testrun.Result, error) {
	t.Helper()
	data, err := os.ReadFile(topo)
	if err != nil {
		t.Fatal(err)
	}
	f, err := testrun.ParseTopology(topo, data, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	return testrun.Run(context.Background(), f, fx, testrun.Options{})
}

// shippedFixtures returns the fixture files of deploy/examples, failing
// tb if there are fewer than least.
func shippedFixtures(tb testing.TB, least int) []string {
	tb.Helper()
	fixtures, err := filepath.Glob(filepath.Join(examples, "*.test.yaml"))
	if err != nil || len(fixtures) < least {
		tb.Fatalf("fixtures: %v %v", fixtures, err)
	}
	return fixtures
}

// shippedFixture loads the fixture file fp, X.test.yaml, and returns it
// with the path of its topology file, X.yaml.
func shippedFixture(tb testing.TB, fp string) (*testrun.Fixture, string) {
	tb.Helper()
	fx, err := testrun.Load(fp)
	if err != nil {
		tb.Fatal(err)
	}
	return fx, strings.TrimSuffix(fp, ".test.yaml") + ".yaml"
}

// TestShippedFixtures runs every deploy/examples/X.test.yaml against
// X.yaml: the examples do what their fixtures say. How long a fixture takes
// is BenchmarkShippedFixtures's to say, not a test's.
func TestShippedFixtures(t *testing.T) {
	for _, fp := range shippedFixtures(t, 2) {
		t.Run(filepath.Base(fp), func(t *testing.T) {
			fx, topo := shippedFixture(t, fp)
			res, err := run(t, topo, fx)
			if err != nil {
				var diff bytes.Buffer
				if res != nil {
					res.WriteDiff(&diff)
				}
				t.Fatalf("%v\n%s", err, diff.String())
			}
			if res.In == 0 || res.Out == 0 || res.DeadLettered == 0 {
				t.Errorf("a fixture should exercise outputs and dead letters: %+v", res)
			}
			t.Logf("%s: %s", fp, res.Summary())
		})
	}
}

// BenchmarkShippedFixtures runs each shipped fixture on its embedded
// cluster: ns/op is the time a user waits for `exactly test` on it.
func BenchmarkShippedFixtures(b *testing.B) {
	for _, fp := range shippedFixtures(b, 1) {
		b.Run(filepath.Base(fp), func(b *testing.B) {
			fx, topo := shippedFixture(b, fp)
			for b.Loop() {
				if _, err := run(b, topo, fx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestChangedFixtureFails changes the orders fixture's expectations one
// way at a time: each run fails with ErrMismatch and a diff naming the
// expected record ("-") and the record read ("+").
func TestChangedFixtureFails(t *testing.T) {
	topo := filepath.Join(examples, "orders.yaml")
	data, err := os.ReadFile(filepath.Join(examples, "orders.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, old, new string
		want           []string // lines of the diff
	}{
		{"one byte of a value",
			`{ key: e-1, value: '{"event_id":"e-1","customer":"c-7","amount":12.50}' }`,
			`{ key: e-1, value: '{"event_id":"e-1","customer":"c-7","amount":12.5}' }`,
			[]string{
				"orders.clean (outputs): expected 3, got 3",
				`  - key: 'e-1', value: '{"event_id":"e-1","customer":"c-7","amount":12.5}'`,
				`  + key: 'e-1', value: '{"event_id":"e-1","customer":"c-7","amount":12.50}'`,
			}},
		{"a key",
			`{ key: e-3, value:`, `{ key: e-03, value:`,
			[]string{`  - key: 'e-03', value: '{"event_id":"e-3","customer":"c-7","amount":0.1,"note":"ünïcödé"}'`,
				`  + key: 'e-3', value: '{"event_id":"e-3","customer":"c-7","amount":0.1,"note":"ünïcödé"}'`}},
		{"a header",
			`'{"event_id":"e-2", "customer":"c-9", "amount":3}', headers: { source: web } }
    - { key: e-3`,
			`'{"event_id":"e-2", "customer":"c-9", "amount":3}', headers: { source: app } }
    - { key: e-3`,
			[]string{`  + key: 'e-2', value: '{"event_id":"e-2", "customer":"c-9", "amount":3}', headers: {'source': 'web'}`}},
		{"a missing output",
			`    - { key: e-3, value: '{"event_id":"e-3","customer":"c-7","amount":0.1,"note":"ünïcödé"}' }
dead_letters:`, `dead_letters:`,
			[]string{"orders.clean (outputs): expected 2, got 3",
				`  + key: 'e-3', value: '{"event_id":"e-3","customer":"c-7","amount":0.1,"note":"ünïcödé"}'`}},
		{"a dead letter's reason",
			`{ reason: key, key: bad-4`, `{ reason: decode, key: bad-4`,
			[]string{`  - reason: 'decode', key: 'bad-4', value: '{"amount": 5}', headers: {'source': 'api'}`,
				`  + reason: 'key', key: 'bad-4', value: '{"amount": 5}', headers: {'source': 'api'}    # missing key field "event_id"`}},
		{"null is not empty",
			`{ reason: decode, key: bad-3, value: null }`, `{ reason: decode, key: bad-3, value: '' }`,
			[]string{`  - reason: 'decode', key: 'bad-3', value: ''`, `  + reason: 'decode', key: 'bad-3', value: ~    # null value`}},
		{"bytes that are not UTF-8",
			`{ reason: decode, key: bad-2, value_base64: eyJldmVudF9pZCI6ImUt/yJ9 }`, `{ reason: decode, key: bad-2, value_base64: eyJldmVudF9pZCI6ImUt/iJ9 }`,
			[]string{`  - reason: 'decode', key: 'bad-2', value: "{\"event_id\":\"e-\xfe\"}"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(string(data), tt.old, tt.new, 1)
			if src == string(data) {
				t.Fatalf("the fixture has no %q", tt.old)
			}
			fx, err := testrun.Parse("changed.test.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			res, err := run(t, topo, fx)
			if !errors.Is(err, testrun.ErrMismatch) || res == nil || res.OK() {
				t.Fatalf("run = %v, want ErrMismatch", err)
			}
			var out bytes.Buffer
			res.WriteDiff(&out)
			lines := strings.Split(out.String(), "\n")
			for _, w := range tt.want {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				if !found {
					t.Errorf("the diff has no line\n%s\ndiff:\n%s", w, out.String())
				}
			}
			if strings.Contains(out.String(), "orders.dlq") && !strings.Contains(tt.name, "dead letter") &&
				!strings.Contains(tt.name, "null") && !strings.Contains(tt.name, "UTF-8") {
				t.Errorf("the diff shows the unchanged dead letters:\n%s", out.String())
			}
		})
	}
}

func TestFixtureErrors(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"unknown top-level field", "input: {}\nexpect: {}\n", "f.yaml:2:1: expect: unknown field (valid: input, output, dead_letters)"},
		{"no input", "output: {}\n", "f.yaml:1:1: input: required: the records to produce, per topic"},
		{"unknown record field", "input:\n  a:\n    - { key: k, valu: v }\n", "f.yaml:3:17: input.a[0].valu: unknown field (valid: key, key_base64, value, value_base64, headers, partition, timestamp)"},
		{"reason on an output", "input: {}\noutput:\n  a: [{ reason: decode }]\n", "f.yaml:3:9: output.a[0].reason: unknown field (valid: key, key_base64, value, value_base64, headers)"},
		{"dead letter without reason", "input: {}\ndead_letters:\n  d: [{ value: x }]\n", "f.yaml:3:7: dead_letters.d[0].reason: required (the exactly.dlq.reason header: decode, transform, key, encode or produce)"},
		{"value and value_base64", "input:\n  a: [{ value: x, value_base64: eA== }]\n", "f.yaml:2:7: input.a[0]: give value or value_base64, not both"},
		{"bad base64", "input:\n  a: [{ key_base64: '%%' }]\n", "f.yaml:2:21: input.a[0].key_base64: invalid base64: illegal base64 data at input byte 0"},
		{"json value not quoted", "input:\n  a: [{ value: {x: 1} }]\n", `f.yaml:2:16: input.a[0].value: expected a string or null (write JSON values in quotes: '{"a":1}')`},
		{"records not a sequence", "input:\n  a: { value: x }\n", "f.yaml:2:6: input.a: expected a sequence of records ([] for none)"},
		{"negative partition", "input:\n  a: [{ value: x, partition: -1 }]\n", "f.yaml:2:30: input.a[0].partition: expected a partition number (0 or more)"},
		{"bad timestamp", "input:\n  a: [{ value: x, timestamp: yesterday }]\n", "f.yaml:2:30: input.a[0].timestamp: expected an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := testrun.Parse("f.yaml", []byte(tt.src))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
}

func TestFixtureTopicsChecked(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"undeclared input topic", "input:\n  nope: []\n", `f.yaml: input.nope: topic "nope" is not declared in ` + examples + "/orders.yaml"},
		{"output no stage writes", "input: {}\noutput:\n  orders.raw: []\n", `f.yaml: output.orders.raw: no stage of ` + examples + `/orders.yaml writes topic "orders.raw"`},
		{"dead letters under output", "input: {}\noutput:\n  orders.dlq: []\n", `f.yaml: output.orders.dlq: "orders.dlq" is a dead-letter topic; list its records under dead_letters`},
		{"outputs under dead letters", "input: {}\ndead_letters:\n  orders.clean: []\n", `f.yaml: dead_letters.orders.clean: "orders.clean" is an output topic; list its records under output`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx, err := testrun.Parse("f.yaml", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			_, err = run(t, filepath.Join(examples, "orders.yaml"), fx)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("err:\n%v\nwant:\n%s", err, tt.want)
			}
		})
	}
}

// An empty input leaves every written topic empty, and a fixture that
// expects a record then fails.
func TestEmptyInput(t *testing.T) {
	fx, err := testrun.Parse("f.yaml", []byte("input: { orders.raw: [] }\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := run(t, filepath.Join(examples, "orders.yaml"), fx)
	if err != nil || !res.OK() || res.Out+res.DeadLettered != 0 {
		t.Fatalf("run = %+v, %v; want an empty pass", res, err)
	}
	fx.Output = []testrun.TopicRecords{{Topic: "orders.clean", Records: []testrun.Record{{Key: []byte("k"), Value: []byte("v")}}}}
	if _, err := run(t, filepath.Join(examples, "orders.yaml"), fx); !errors.Is(err, testrun.ErrMismatch) {
		t.Fatalf("run = %v, want ErrMismatch", err)
	}
}
