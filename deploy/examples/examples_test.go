package examples_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
)

// Every example file must validate and compile, so the docs never show a
// broken topology.
func TestExamplesValidate(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, ".test.yaml") {
			continue // a fixture of `exactly test` (cmd/exactly/testrun runs them)
		}
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := topology.Parse(name, data, func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			if _, err := transform.Compile(f, transform.NewRegistry()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
