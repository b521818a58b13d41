package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/cmd/exactly/internal/cli"
)

// TestTestCommand runs `exactly test` on the shipped orders example, on a
// copy of its fixture with one expected value changed, and on a fixture
// that does not parse: exit 0, 1 with a diff, and 2.
func TestTestCommand(t *testing.T) {
	topo := filepath.Join("..", "..", "..", "..", "deploy", "examples", "orders.yaml")
	fixture, err := os.ReadFile(strings.TrimSuffix(topo, ".yaml") + ".test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	changed := filepath.Join(dir, "changed.test.yaml")
	src := strings.Replace(string(fixture), `{ key: e-1, value: '{"event_id":"e-1","customer":"c-7","amount":12.50}' }`,
		`{ key: e-1, value: '{"event_id":"e-1","customer":"c-7","amount":12.5}' }`, 1)
	if src == string(fixture) {
		t.Fatal("the orders fixture no longer holds the record this test changes")
	}
	broken := filepath.Join(dir, "broken.test.yaml")
	badPart := filepath.Join(dir, "badpart.test.yaml")
	for name, data := range map[string]string{changed: src, broken: "input:\n  orders.raw: [{ valu: x }]\n",
		badPart: "input:\n  orders.raw:\n    - { partition: 7, value: '{\"event_id\":\"p\"}' }\n"} {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("EXACTLY_BROKERS", "not a broker list") // ignored: the run is embedded

	tests := []struct {
		name     string
		args     []string
		code     int
		out, err []string
	}{
		{"the shipped fixture passes", []string{"test", "--topology", topo}, 0,
			[]string{"ok   " + strings.TrimSuffix(topo, ".yaml") + ".test.yaml: 1 stage, 7 records in, 3 outputs and 4 dead letters as expected"}, nil},
		{"a changed fixture fails with a diff", []string{"test", "--topology", topo, changed}, 1,
			[]string{"FAIL " + changed + ": the records differ from the fixture (- expected, + got)",
				"orders.clean (outputs): expected 3, got 3",
				`  - key: 'e-1', value: '{"event_id":"e-1","customer":"c-7","amount":12.5}'`,
				`  + key: 'e-1', value: '{"event_id":"e-1","customer":"c-7","amount":12.50}'`}, nil},
		{"both: one failure fails the run", []string{"test", "--topology", topo, strings.TrimSuffix(topo, ".yaml") + ".test.yaml", changed}, 1,
			[]string{"ok   ", "FAIL " + changed}, nil},
		{"a fixture that does not parse", []string{"test", "--topology", topo, broken}, 2,
			nil, []string{broken + ":2:18: input.orders.raw[0].valu: unknown field"}},
		{"a partition the topic lacks is a usage error, the file named once", []string{"test", "--topology", topo, badPart}, 2,
			nil, []string{"exactly test: " + badPart + ":3: partition 7: topic orders.raw has"}},
		{"no topology", []string{"test"}, 2, nil, []string{"Usage: exactly test --topology FILE [--log-format FORMAT]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), tt.args, &stdout, &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.code, stdout.String(), stderr.String())
			}
			for _, w := range tt.out {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout has no %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tt.err {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr has no %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}
