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

// TestValidateReportsEveryProblemAtOnce: a file with problems of its own
// (a step without an operation, a route that is not a list, an undeclared
// output topic) still has the CEL of its other steps checked, and validate
// prints all of them in one run, each at file:line:col, in file order.
func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.yaml")
	src := `version: 1
kafka: { brokers: ["127.0.0.1:9092"] }
topics:
  - { name: a, partitions: 1 }
  - { name: dlq, partitions: 1 }
stages:
  - name: s
    input: { topic: a }
    output: { topic: undeclared }
    dead_letter: { topic: dlq }
    transform:
      - set: { y: 'value.f * "x"' }
      - route: { to: nowhere }
      - filter: 'nosuch.q'
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := cli.Run(context.Background(), []string{"validate", path}, &stdout, &stderr); code != 2 {
		t.Fatalf("validate exit %d, want 2; stderr:\n%s", code, stderr.String())
	}
	got := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	want := []string{
		path + ":9:22: stages[0].output.topic: topic \"undeclared\" is not declared",
		path + ":12:19: stages[0].transform[0].set.y: invalid expression: ",
		path + ":13:9: stages[0].transform[1]: a step needs one operation",
		path + ":13:16: stages[0].transform[1].route: expected a sequence, got a mapping",
		path + ":14:17: stages[0].transform[2].filter: invalid expression: ",
	}
	if len(got) != len(want) {
		t.Fatalf("validate printed %d problems, want %d:\n%s", len(got), len(want), stderr.String())
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d:\n%s\nwant prefix:\n%s", i, got[i], want[i])
		}
	}
}
