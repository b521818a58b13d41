package testrun

import (
	"testing"
)

// A fixture's syntax error is at file:line:col, where the parser stopped,
// with the construct it was reading and where that began.
func TestFixtureSyntaxErrorIsFileLineCol(t *testing.T) {
	_, err := Parse("m.test.yaml", []byte("input:\n  t:\n    - { value: [unclosed }\n"))
	want := "m.test.yaml:3:26: invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence that began at line 3, column 16)"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %s", err, want)
	}
}
