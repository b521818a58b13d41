//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/deploy/examples"
)

// TestFixtureSyntaxErrorLine: `exactly validate` reports a YAML
// syntax error of a topology as file:line:col of the bad line; `exactly
// test` does the same for a fixture (line 4 and its column, not the
// parser's "yaml: line 3").
func TestFixtureSyntaxErrorLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	topo := filepath.Join(dir, "orders.yaml")
	if err := os.WriteFile(topo, examples.Orders, 0o644); err != nil {
		t.Fatal(err)
	}
	fixture := filepath.Join(dir, "m.test.yaml")
	if err := os.WriteFile(fixture, []byte("input:\n  orders.raw:\n    - { value: \"x\" }\n    - { value: [unclosed }\n    - { value: \"y\" }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, logs := exactlyExit(t, nil, "test", "--topology", topo, fixture)
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	// Where the parser stopped, line and column, and where the unclosed
	// '[' began, as for a topology file in `exactly validate`.
	if !strings.Contains(logs, "m.test.yaml:4:26: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence that began at line 4, column 16)") {
		t.Errorf("want the error at m.test.yaml:4:26 naming the unclosed '[' at line 4, column 16, got:\n%s", logs)
	}
}
