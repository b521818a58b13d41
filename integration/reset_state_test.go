//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"
)

// A reset of a stage with a state store does not reset the state: the
// records read again meet it, and a dedupe drops them all. exactly reset
// says so and refuses without --keep-state; the way it gives to reprocess
// with empty state (delete the changelog topic, topics create, reset)
// writes every output again. A silent reset would replay into the old
// state and write nothing, without a word.
func TestResetOfAStageWithState(t *testing.T) {
	t.Parallel()
	in, out, dlq, stage, topo := dedupeTopology(t, 1000)
	changelog := "exactly-" + stage + "-dedupe-changelog"
	exactlyCmd(t, "topics", "create", "--topology", topo)
	var lines [][]byte
	for i := range 20 {
		lines = append(lines, line(i))
	}
	kcatProduce(t, in, lines)
	runArgs := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir()}
	p := start(t, nil, runArgs...)
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) == 20 }, func() string { return tail(p.logs.String(), 20) })
	p.stop()

	code, msg := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", stage, "--to-earliest", "--execute")
	if code != 2 || !strings.Contains(msg, "keeps state") || !strings.Contains(msg, changelog) || !strings.Contains(msg, "nothing changed") {
		t.Fatalf("reset of a stage with state: exit %d, want 2 naming the state and %s:\n%s", code, changelog, msg)
	}
	// Reprocess with empty state, as the message says.
	if out, err := topicTool(t, "--delete", "--topic", changelog); err != nil {
		t.Fatalf("TopicCommand --delete %s: %v\n%s", changelog, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, changelog); return id == "" },
		func() string { return changelog + " still exists" })
	var created string
	eventually(t, time.Minute, func() bool {
		created = exactlyCmd(t, "topics", "create", "--topology", topo)
		return strings.Contains(created, changelog)
	}, func() string { return "topics create did not re-create " + changelog + ":\n" + created })
	if code, msg := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", stage, "--to-earliest", "--execute"); code != 2 {
		t.Fatalf("reset: exit %d, want 2 (the state warning stands until --keep-state):\n%s", code, msg)
	}
	if code, msg := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", stage, "--to-earliest", "--execute", "--keep-state"); code != 0 {
		t.Fatalf("reset --keep-state: exit %d:\n%s", code, msg)
	}
	p = start(t, nil, runArgs...)
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) == 40 }, func() string {
		return "the replay did not write every output again\n" + tail(p.logs.String(), 20)
	})
	p.stop()
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
}
