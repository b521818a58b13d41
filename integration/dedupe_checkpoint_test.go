//go:build integration

package integration

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// restoredLine matches the log line of a restore, with what it read.
var restoredLine = regexp.MustCompile(`msg="state restored".*from_checkpoint="?\[([0-9 ]*)\]"? rebuilt="?\[([0-9 ]*)\]"? records=([0-9]+)`)

// restores returns the restores a process logged: partitions resumed from
// a checkpoint, partitions rebuilt, records read.
func restores(logs string) (out [][3]string) {
	for _, m := range restoredLine.FindAllStringSubmatch(logs, -1) {
		out = append(out, [3]string{m[1], m[2], m[3]})
	}
	return out
}

// dedupeBatch produces events e-from..e-(to-1) and then every fifth of
// them resent as an earlier event (e-(i%dupsOf)), and returns how many
// were resent.
func dedupeBatch(t *testing.T, in string, from, to, dupsOf int) int {
	t.Helper()
	var lines [][]byte
	for i := from; i < to; i++ {
		lines = append(lines, line(i))
	}
	dups := 0
	for i := from; i < to; i += 5 {
		lines = append(lines, line(i%dupsOf))
		dups++
	}
	kcatProduce(t, in, lines)
	return dups
}

// TestDedupeCheckpointRestart: a stage stopped and started again on the
// same state dir resumes every partition from its checkpoint and restores
// no changelog record, yet still drops duplicates of events it saw before
// the restart; a second process on the same state dir is refused with a
// clear error.
func TestDedupeCheckpointRestart(t *testing.T) {
	in, out, dlq, stage, topo := dedupeTopology(t, 500)
	exactlyCmd(t, "topics", "create", "--topology", topo)
	stateDir := t.TempDir()
	args := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}

	first := start(t, nil, args...)
	dups := dedupeBatch(t, in, 0, 3000, 3000)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	first.stop()
	if rs := restores(first.logs.String()); len(rs) == 0 || rs[0][1] != "0 1 2" {
		t.Fatalf("first run: restores %v, want a rebuild of partitions 0 1 2\n%s", rs, tail(first.logs.String(), 20))
	}

	second := start(t, nil, args...)
	waitLogged(t, second, "state restored", 1, 2*time.Minute, "the restarted stage logged no restore")
	rs := restores(second.logs.String())
	if len(rs) != 1 || rs[0] != [3]string{"0 1 2", "", "0"} {
		t.Fatalf("restart: restores %v, want partitions 0 1 2 resumed from their checkpoints and 0 records read\n%s", rs, tail(second.logs.String(), 20))
	}

	// Another process on the same state dir (another group member, same
	// instance ID) must not start.
	twin := start(t, nil, args...)
	_ = twin.wait(2 * time.Minute)
	if twin.cmd.ProcessState == nil || twin.cmd.ProcessState.Success() || !strings.Contains(twin.logs.String(), "in use by another process") {
		t.Errorf("a second process on the same state dir: %v, want a failure naming the lock\n%s", twin.cmd.ProcessState, tail(twin.logs.String(), 10))
	}

	// Duplicates of events from before the restart, and new events.
	dups += dedupeBatch(t, in, 3000, 4000, 3000)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	second.stop()

	checkDeduplicatedOnce(t, topo, out, dlq, 4000, dups)
}

// TestDedupeCrashDuringRestore: a stage is killed (SIGKILL) at
// crash-during-restore, in the middle of rebuilding its stores from the
// changelog (its state dir is new), and started again while more events
// and duplicates of the first ones arrive: the output still holds each
// event once, and verify counts every resent event as deduplicated.
func TestDedupeCrashDuringRestore(t *testing.T) {
	in, out, dlq, stage, topo := dedupeTopology(t, 1000)
	changelog := "exactly-" + stage + "-dedupe-changelog"
	exactlyCmd(t, "topics", "create", "--topology", topo)

	first := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir())
	dups := dedupeBatch(t, in, 0, 12000, 12000)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	first.stop()
	if n := kcatCount(t, changelog); n < 12000 {
		t.Fatalf("changelog %s holds %d records, want at least 12000", changelog, n)
	}

	// A new state dir: the restore reads the whole changelog, and is
	// killed after 6,000 records.
	stateDir := t.TempDir()
	args := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}
	crashing := start(t, []string{failpointEnv + "=" + crashDuringRestore + "@6000"}, args...)
	_ = crashing.wait(3 * time.Minute)
	if !crashing.killedBySIGKILL() || !strings.Contains(crashing.logs.String(), "crash-during-restore@6000") {
		t.Fatalf("want the process killed by SIGKILL at crash-during-restore@6000, got %v\n%s", crashing.cmd.ProcessState, tail(crashing.logs.String(), 30))
	}
	if strings.Contains(crashing.logs.String(), `msg="state restored"`) {
		t.Fatalf("the crashing run finished a restore before the failpoint:\n%s", tail(crashing.logs.String(), 30))
	}

	run := start(t, nil, args...)
	// Resent events of the first batch, which only the restored stores
	// know, and new events.
	dups += dedupeBatch(t, in, 12000, 16000, 12000)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	run.stop()
	if rs := restores(run.logs.String()); len(rs) == 0 {
		t.Errorf("the run after the crash logged no restore:\n%s", tail(run.logs.String(), 30))
	}

	checkDeduplicatedOnce(t, topo, out, dlq, 16000, dups)
}

// TestDedupeChangelogRecreatedWarns: a dedupe stage stopped, its changelog
// topic deleted and created again (empty), and started on the same state
// dir: its checkpoints name the old topic, the state they recorded is
// gone, and the stage says so at WARN for each partition, naming what a
// user sees (resent events pass again) — not the INFO line of an ordinary
// rebuild. It then goes on: new events pass once each.
func TestDedupeChangelogRecreatedWarns(t *testing.T) {
	in, out, _, stage, topo := dedupeTopology(t, 500)
	exactlyCmd(t, "topics", "create", "--topology", topo)
	changelog := "exactly-" + stage + "-dedupe-changelog"
	stateDir := t.TempDir()
	args := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}

	first := start(t, nil, args...)
	dedupeBatch(t, in, 0, 300, 300)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	first.stop()
	if strings.Contains(first.logs.String(), "partition state lost") {
		t.Fatalf("first run (no checkpoint yet) warned of lost state:\n%s", tail(first.logs.String(), 20))
	}

	if out, err := topicTool(t, "--delete", "--topic", changelog); err != nil {
		t.Fatalf("delete %s: %v\n%s", changelog, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, changelog); return id == "" },
		func() string { return changelog + " still exists" })
	eventually(t, time.Minute, func() bool {
		_, err := exec.Command(exactlyBin, "topics", "create", "--topology", topo).CombinedOutput()
		id, _ := topicInfo(t, changelog)
		return err == nil && id != ""
	}, func() string { return "exactly topics create did not make " + changelog + " again" })

	second := start(t, nil, args...)
	waitLogged(t, second, "state restored", 1, 2*time.Minute, "the restarted stage logged no restore")
	logs := second.logs.String()
	if n := strings.Count(logs, `level=WARN msg="partition state lost`); n != 3 {
		t.Fatalf("%d WARN lines of lost state, want 3 (one per partition)\n%s", n, tail(logs, 20))
	}
	if !strings.Contains(logs, "the changelog topic was recreated") || !strings.Contains(logs, "pass the dedupe step again") {
		t.Errorf("the warning names neither the cause nor the consequence:\n%s", tail(logs, 20))
	}
	dedupeBatch(t, in, 300, 400, 300)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	second.stop()
	// The first run wrote 300 events. The second batch is 100 new ones
	// and 20 resent (every fifth of 300..399 as e-(i%300): e-0, e-5, …,
	// e-95), whose IDs only the lost state held: they pass again, as
	// warned, and nothing else is doubled.
	if got := kcatCount(t, out); got != 420 {
		t.Fatalf("%s holds %d records, want 300 + 100 + the 20 resent events the lost state held", out, got)
	}
}
