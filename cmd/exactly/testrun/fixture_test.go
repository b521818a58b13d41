package testrun

import (
	"regexp"
	"testing"
)

func TestFixtureSyntaxErrorIsFileLine(t *testing.T) {
	_, err := Parse("m.test.yaml", []byte("input:\n  t:\n    - { value: [unclosed }\n"))
	if err == nil || !regexp.MustCompile(`^m\.test\.yaml:[0-9]+: invalid YAML: `).MatchString(err.Error()) {
		t.Fatalf("error %v, want m.test.yaml:LINE: invalid YAML: ...", err)
	}
}
