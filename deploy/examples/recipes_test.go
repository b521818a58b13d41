package examples_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/cmd/exactly/cli"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
)

// The recipes the docs link to, by folder name.
var recipes = []string{"filter-rekey", "dedupe", "windowed-sum", "session-windows", "join-customers", "postgres-upsert", "debezium-postgres", "redrive", "stateful-go"}

// TestRecipes checks every recipe: it has a short README.md, each
// topology validates and compiles, and each fixture passes `exactly test`
// (on an embedded cluster). A recipe with its own main package registers
// Go transforms the stock CLI lacks; its own test runs its fixture.
func TestRecipes(t *testing.T) {
	t.Setenv("EXACTLY_BROKERS", "not a broker list") // ignored: test runs are embedded
	for _, name := range recipes {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("recipes", name)
			readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(readme, []byte("\n")); n > 60 {
				t.Errorf("README.md has %d lines, want at most 60", n)
			}
			custom := fileExists(filepath.Join(dir, "main.go"))
			files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
			topologies := 0
			for _, path := range files {
				if strings.HasSuffix(path, ".test.yaml") {
					if !fileExists(strings.TrimSuffix(path, ".test.yaml") + ".yaml") {
						t.Errorf("%s: no topology file beside the fixture", path)
					}
					continue
				}
				topologies++
				if custom {
					continue
				}
				checkRecipeTopology(t, path)
			}
			if topologies == 0 {
				t.Fatalf("%s holds no topology file", dir)
			}
		})
	}
}

// checkRecipeTopology validates path and runs its fixture, if it has one.
func checkRecipeTopology(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := topology.Parse(path, data, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := transform.Compile(f, transform.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	fixture := strings.TrimSuffix(path, ".yaml") + ".test.yaml"
	if !fileExists(fixture) {
		if len(f.Stages) > 0 {
			t.Errorf("%s has stages but no fixture %s", path, fixture)
		}
		return // a sink alone: exactly test runs stages only
	}
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), []string{"test", "--topology", path}, &stdout, &stderr)
	if code != 0 || !strings.HasPrefix(stdout.String(), "ok ") {
		t.Errorf("exactly test --topology %s: exit %d\nstdout:\n%s\nstderr:\n%s", path, code, stdout.String(), stderr.String())
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
