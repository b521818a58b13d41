//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestDedupeCrashRestart: N events (EXACTLY_DEDUPE_EVENTS, default 20,000;
// the full size is 200,000), a fifth of them resent with the same
// event ID and key, through a stage with a dedupe step that is killed at
// crash-before-commit and crash-after-commit, then, on an emptied state
// dir, at crash-during-restore, and restarted; more events and duplicates
// of the first ones arrive while the last run runs. Read back
// read_committed with kcat, the output holds each event once, none missing,
// no dead letter; the changelog topic holds each ID once; verify counts
// the resends as deduplicated.
func TestDedupeCrashRestart(t *testing.T) {
	in, out, dlq, stage, topo := dedupeTopology(t, 1000)
	changelog := "exactly-" + stage + "-dedupe-changelog"
	created := exactlyCmd(t, "topics", "create", "--topology", topo)
	if !strings.Contains(created, changelog) {
		t.Fatalf("topics create did not create %s:\n%s", changelog, created)
	}
	checkChangelogTopic(t, changelog)

	// Phase A: e-0..e-(a-1), then every fifth of them again.
	n := envInt("EXACTLY_DEDUPE_EVENTS", 20000) / 5 * 5
	a := n * 3 / 5
	var lines [][]byte
	for i := range a {
		lines = append(lines, line(i))
	}
	for i := 0; i < a; i += 5 {
		lines = append(lines, line(i))
	}
	kcatProduce(t, in, lines)

	stateDir := t.TempDir()
	runArgs := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}
	for _, fp := range []string{crashBeforeCommit, crashAfterCommit} {
		p := start(t, []string{failpointEnv + "=" + fp + "@4"}, runArgs...)
		_ = p.wait(3 * time.Minute)
		if !p.killedBySIGKILL() {
			t.Fatalf("want the process killed by SIGKILL at %s@4, got %v\n%s", fp, p.cmd.ProcessState, tail(p.logs.String(), 40))
		}
		t.Logf("after %s: %d records in %s", fp, kcatCount(t, out), out)
	}
	if got := kcatCount(t, out); got >= a {
		t.Fatalf("the crashes came after all phase A events were out (%d): nothing was tested", got)
	}
	// A crash in the middle of a full restore: the local store is gone,
	// the changelog holds what the two runs committed.
	if err := os.RemoveAll(stateDir); err != nil {
		t.Fatal(err)
	}
	p := start(t, []string{failpointEnv + "=" + crashDuringRestore + "@50"}, runArgs...)
	_ = p.wait(3 * time.Minute)
	if !p.killedBySIGKILL() {
		t.Fatalf("want the process killed by SIGKILL at %s@50, got %v\n%s", crashDuringRestore, p.cmd.ProcessState, tail(p.logs.String(), 40))
	}

	run := start(t, nil, runArgs...)
	// Phase B, while the stage runs: e-12000..e-19999, then every fifth
	// of them resent as an event of phase A (e-2, e-7, ...), whose IDs
	// only the restored stores know.
	lines = lines[:0]
	for i := a; i < n; i++ {
		lines = append(lines, line(i))
	}
	for i := a; i < n; i += 5 {
		lines = append(lines, line(i-a+2))
	}
	kcatProduce(t, in, lines)

	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	run.stop()
	if !strings.Contains(run.logs.String(), "state restored") {
		t.Errorf("the last run logged no restore:\n%s", tail(run.logs.String(), 30))
	}

	checkOutput(t, out, n)
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, n)
	}
	ids := map[string]int{}
	for _, r := range kcatRead(t, changelog) {
		if r.Key != "" {
			ids[r.Key]++
		}
	}
	if len(ids) != n {
		t.Errorf("changelog %s holds %d distinct IDs, want %d", changelog, len(ids), n)
	}
	for id, n := range ids {
		if n != 1 {
			t.Errorf("changelog %s holds ID %s %d times (committed), want once", changelog, id, n)
			break
		}
	}

	checkVerifyDeduplicated(t, topo, int64(n+n/5), int64(n), int64(n/5))
}

// dedupeTopology writes a topology whose stage dedupes on event_id (1h),
// with a 3-partition input and output, keyed by event_id, and returns its
// names.
func dedupeTopology(t *testing.T, maxRecords int) (in, out, dlq, stage, topo string) {
	t.Helper()
	in, out, dlq, stage = uniqueName("dd_in"), uniqueName("dd_out"), uniqueName("dd_dlq"), uniqueName("dd")
	topo = stagesTopology{txnTimeout: "20s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, key: "event_id", interval: "100ms", maxRecords: maxRecords,
		transform: "- dedupe: { id: value.event_id, retention: 1h }",
	}}}.write(t)
	return in, out, dlq, stage, topo
}

// line is event e-i as a kcat "key|value" line, keyed by its event ID.
func line(i int) []byte {
	id := "e-" + strconv.Itoa(i)
	return fmt.Appendf(nil, `%s|{"event_id":%q,"n":%d}`, id, id, i)
}

// checkDeduplicatedOnce checks a dedupe stage's result: out holds events
// distinct events once each, dlq nothing, and verify counts the input as
// those events plus dups resent ones, each of those deduplicated.
func checkDeduplicatedOnce(t *testing.T, topo, out, dlq string, events, dups int) {
	t.Helper()
	checkOutput(t, out, events)
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, n)
	}
	checkVerifyDeduplicated(t, topo, int64(events+dups), int64(events), int64(dups))
}

// checkVerifyDeduplicated runs exactly verify on topo: ok, with in inputs,
// processed of them written and deduplicated dropped, none lost.
func checkVerifyDeduplicated(t *testing.T, topo string, in, processed, deduplicated int64) {
	t.Helper()
	rep, code := runVerify(t, topo)
	if code != 0 || len(rep.Stages) != 1 {
		t.Fatalf("exactly verify: exit %d, %d stages; want exit 0 and 1 stage; problems %v", code, len(rep.Stages), rep.Problems)
	}
	if st := rep.Stages[0]; !rep.OK || st.In != in || st.Processed != processed || st.Deduplicated != deduplicated || st.Lost != 0 || st.Duplicates != 0 {
		t.Fatalf("verify: ok %v, %+v; want %d in, %d processed, %d deduplicated, 0 lost; problems %v", rep.OK, *st, in, processed, deduplicated, rep.Problems)
	}
}

// TestDedupeRebalance: two instances, scaled 1 -> 2 -> 1 while events and
// resent duplicates arrive: the stores move with their partitions through
// the changelog, and no duplicate passes.
func TestDedupeRebalance(t *testing.T) {
	in, out, dlq, stage, topo := dedupeTopology(t, 500)
	exactlyCmd(t, "topics", "create", "--topology", topo)
	run := func(instance string) *proc {
		return start(t, nil, "run", "--topology", topo, "--instance-id", instance, "--state-dir", t.TempDir())
	}
	var lines [][]byte
	batch := func(from, to, dupsOf int) int {
		lines = lines[:0]
		for i := from; i < to; i++ {
			lines = append(lines, line(i))
		}
		dups := 0
		for i := from; i < to; i += 5 {
			lines = append(lines, line(i%dupsOf+1)) // an earlier event, resent
			dups++
		}
		kcatProduce(t, in, lines)
		return dups
	}
	one := run("it-1")
	dups := batch(0, 6000, 6000)
	two := run("it-2")
	dups += batch(6000, 12000, 6000)
	waitLogged(t, two, "state restored", 1, 2*time.Minute, "it-2 restored no partition")
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	one.stop()
	dups += batch(12000, 15000, 12000)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	two.stop()
	if n := countLines(two.logs.String(), "state restored"); n < 2 {
		t.Errorf("it-2 restored %d times, want at least 2 (on joining, and on taking it-1's partitions)", n)
	}

	checkOutput(t, out, 15000)
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, n)
	}
	checkVerifyDeduplicated(t, topo, int64(15000+dups), 15000, int64(dups))
}

// checkChangelogTopic requires topic to be compacted with 3 partitions.
func checkChangelogTopic(t *testing.T, topic string) {
	t.Helper()
	cl := kafkaClient(t)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil || len(td[topic].Partitions) != 3 {
		t.Fatalf("changelog %s: %v, %d partitions; want 3", topic, err, len(td[topic].Partitions))
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && (c.Value == nil || *c.Value != "compact") {
			t.Fatalf("changelog %s: cleanup.policy %v, want compact", topic, c.Value)
		}
	}
}

// waitGroupCaughtUp waits until group has committed the end offset of
// every partition of topic (written without transactions: its end is its
// high watermark).
func waitGroupCaughtUp(t *testing.T, group, topic string, timeout time.Duration) {
	t.Helper()
	cl := kafkaClient(t)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var lag int64 = -1
	eventually(t, timeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return false
		}
		lag = 0
		ends.Each(func(e kadm.ListedOffset) {
			c, ok := offs.Lookup(topic, e.Partition)
			switch {
			case !ok:
				lag += e.Offset
			case c.At < e.Offset:
				lag += e.Offset - c.At
			}
		})
		return lag == 0
	}, func() string { return fmt.Sprintf("group %s lags %d records on %s", group, lag, topic) })
}
