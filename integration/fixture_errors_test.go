//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/deploy/examples"
)

// Outside attack on issue 18 (reset, replay, redrive, exactly test): focused
// black-box failures found by using the README as a new user would. Each
// test runs the built binary and checks with kcat (read_committed).

// TestAttack18RedriveWhereSeesJSONIntegers: the README's transforms treat a
// JSON number without '.', 'e' or 'E' as a CEL int "in every stage", and
// --where documents `value` as "the JSON value decoded". A user reuses a
// transform-style integer expression in --where: `value.n % 2 == 0` must
// select the dead letter with n=204 and reject the one with n=203. Observed:
// `value` holds doubles in --where, `_%_` has no overload, both dead letters
// are reported "not redrivable" (and marked done, exit 0), nothing is
// redriven.
func TestAttack18RedriveWhereSeesJSONIntegers(t *testing.T) {
	t.Parallel()
	name, in, out, dlq := uniqueName("a18_where"), uniqueName("a18_win"), uniqueName("a18_wout"), uniqueName("a18_wdlq")
	topo := stagesTopology{partitions: 1, stages: []stageYAML{{
		name: name, in: in, out: out, dlq: dlq, format: "json", key: "event_id", interval: "100ms", maxRecords: 500,
		transform: `
- name: divide
  set: { q: 'value.n / value.d' }`,
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, in, [][]byte{
		[]byte(`k203|{"event_id":"e-203","n":203,"d":0}`),
		[]byte(`k204|{"event_id":"e-204","n":204,"d":0}`),
	})
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, time.Minute, func() bool { return kcatCount(t, dlq) == 2 },
		func() string { return fmt.Sprintf("%d dead letters, want 2", kcatCount(t, dlq)) })
	p.stop()

	t.Run("usage error prints no report", func(t *testing.T) {
		code, logs := exactlyExit(t, nil, "redrive", "--topology", topo, "--stage", name, "--where", "value.n +", "--no-progress")
		if code != 2 {
			t.Fatalf("exit %d, want 2:\n%s", code, logs)
		}
		if strings.Contains(logs, " read, ") {
			t.Errorf("a refused --where still printed a redrive report, as if it had run:\n%s", logs)
		}
	})

	code, logs := exactlyExit(t, nil, "redrive", "--topology", topo, "--stage", name, "--where", "value.n % 2 == 0", "--no-progress")
	if code != 0 {
		t.Fatalf("redrive exit %d, want 0:\n%s", code, logs)
	}
	if !strings.Contains(logs, "1 redriven, 1 not selected") {
		t.Errorf("report: want 1 redriven, 1 not selected (value.n is an int as in transforms):\n%s", logs)
	}
	var redriven []string
	for _, r := range kcatRead(t, in) {
		if r.Headers["exactly.redrive.count"] == "1" {
			redriven = append(redriven, r.Key)
		}
	}
	if len(redriven) != 1 || redriven[0] != "k204" {
		t.Errorf("redriven input records %v, want [k204]", redriven)
	}
}

// TestAttack18FixtureSyntaxErrorLine: `exactly validate` reports a YAML
// syntax error of a topology as file:line of the bad line; `exactly test`
// must do the same for a fixture. Observed: "m.test.yaml: yaml: line 3:
// ..." for a mistake on line 4, with no column.
func TestAttack18FixtureSyntaxErrorLine(t *testing.T) {
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
