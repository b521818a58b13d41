//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// exactly verify draws its progress bar on a terminal, and nothing in a
// pipe or with --json. The terminal is a pseudo-terminal from util-linux
// script(1), so the binary's own terminal check decides.
func TestVerifyProgressOnATerminalOnly(t *testing.T) {
	scriptBin := tool(t, "script", "Debian's bsdutils has script(1)")
	const events = 3000
	in, out, dlq, stage := uniqueName("prog_raw"), uniqueName("prog_clean"), uniqueName("prog_dlq"), uniqueName("prog")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 1000)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, in, crashInput(events, 3))
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "prog-1", "--metrics-addr", "")
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= events },
		func() string { return fmt.Sprintf("%d of %d out", kcatCount(t, out), events) })
	p.stop()

	args := []string{exactlyBin, "verify", "--topology", topo, "--event-id", "event_id", "--open-txn-wait", "100ms"}
	// In a pipe: stderr holds no bar.
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("verify in a pipe: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if strings.Contains(stderr.String(), "reading topics") || strings.Contains(stdout.String(), "reading topics") {
		t.Errorf("a progress bar in a pipe:\n%s", stderr.String())
	}
	if !strings.Contains(stdout.String(), "OK: exactly once") {
		t.Fatalf("verify failed:\n%s", stdout.String())
	}

	onTerminal := func(extra ...string) string {
		t.Helper()
		line := strings.Join(append(args, extra...), " ")
		out, err := exec.Command(scriptBin, "-qefc", line, "/dev/null").CombinedOutput()
		if err != nil {
			t.Fatalf("%s on a terminal: %v\n%s", line, err, out)
		}
		return string(out)
	}
	// On a terminal: the bar, with done of total (3000 records, 3 dead
	// letters and their transaction markers, in all three topics).
	got := onTerminal()
	if !strings.Contains(got, "reading topics") || !strings.Contains(got, "records/") {
		t.Errorf("no progress bar on a terminal:\n%q", got)
	}
	if !strings.Contains(got, "OK: exactly once") {
		t.Errorf("verify on a terminal:\n%s", got)
	}
	// --json on a terminal: no bar, and the output is JSON alone.
	if got := onTerminal("--json"); strings.Contains(got, "reading topics") || !strings.HasPrefix(strings.TrimSpace(got), "{") {
		t.Errorf("--json on a terminal:\n%q", got)
	}
}
