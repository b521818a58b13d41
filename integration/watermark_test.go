//go:build integration

package integration

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// Behind a stage that re-keys, an aggregate's windows close on the least
// event time its upstream partitions reached, not on the largest seen: six
// orders over the three partitions of the input, three minutes of event
// time, one customer's four orders in three partitions, give every window
// with no order late, live; and the same input replayed as a backlog (the
// re-key stage reset to earliest, the aggregate's state emptied as the
// docs say) gives the same results byte for byte. With the largest event
// time seen, the backlog's first upstream run closed the windows that the
// next runs still fed, and their orders were late.
func TestWindowsCloseOnTheUpstreamWatermark(t *testing.T) {
	t.Parallel()
	raw, by, perMin, dlq := uniqueName("wm_raw"), uniqueName("wm_by"), uniqueName("wm_min"), uniqueName("wm_dlq")
	rekey, agg := uniqueName("wm_rekey"), uniqueName("wm_agg")
	body := fmt.Sprintf(`stages:
  - name: %s
    input: { topic: %s }
    output: { topic: %s }
    dead_letter: { topic: %s }
    transform:
      - key: value.customer
  - name: %s
    input: { topic: %s }
    output: { topic: %s }
    dead_letter: { topic: %s }
    transform:
      - aggregate:
          window: { tumbling: 1m }
          time: value.ts
          grace: 10s
          group_by: value.customer
          aggregations: { orders: count, total: { sum: value.amount } }
          emit: final
`, rekey, raw, by, dlq, agg, by, perMin, dlq)
	topo := userTopology(t, []fileTopic{{name: raw, parts: 3}, {name: by, parts: 3}, {name: perMin, parts: 3}, {name: dlq, parts: 1}}, body)
	changelog := "exactly-" + agg + "-aggregate-changelog"

	const t10 = int64(1767261600000) // 2026-01-01T10:00:00Z
	order := func(id, customer string, amount string, ts int64) []byte {
		return fmt.Appendf(nil, `%s|{"id":%q,"customer":%q,"amount":%s,"ts":%d}`, id, id, customer, amount, ts)
	}
	produce := func() {
		kcatProducePartition(t, raw, 0, [][]byte{order("o-1", "c-7", "12.5", t10+5_000), order("o-4", "c-7", "2", t10+140_000)})
		kcatProducePartition(t, raw, 1, [][]byte{order("o-2", "c-9", "3", t10+10_000), order("o-5", "c-7", "1", t10+75_000)})
		kcatProducePartition(t, raw, 2, [][]byte{order("o-3", "c-7", "0.1", t10+40_000), order("o-6", "c-9", "4", t10+110_000)})
		// 10:05 on every partition, for each customer: closes the windows before it.
		for p := range 3 {
			kcatProducePartition(t, raw, p, [][]byte{
				order(fmt.Sprintf("z-%d", p), "c-7", "0", t10+300_000), order(fmt.Sprintf("y-%d", p), "c-9", "0", t10+300_000),
			})
		}
	}
	results := func() []string {
		kcat := func(ctx context.Context, args ...string) *exec.Cmd {
			return exec.CommandContext(ctx, kcatBin(t), append([]string{"-b", kcatBrokers(t)}, args...)...)
		}
		return kcatConsume(t, kcat, perMin, "%k\t%T\t%s\n", "")
	}
	want := []string{
		`c-7	1767261640000	{"key":"c-7","window":{"start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:01:00Z","start_ms":1767261600000,"end_ms":1767261660000},"results":{"orders":2,"total":12.6}}`,
		`c-7	1767261675000	{"key":"c-7","window":{"start":"2026-01-01T10:01:00Z","end":"2026-01-01T10:02:00Z","start_ms":1767261660000,"end_ms":1767261720000},"results":{"orders":1,"total":1}}`,
		`c-7	1767261740000	{"key":"c-7","window":{"start":"2026-01-01T10:02:00Z","end":"2026-01-01T10:03:00Z","start_ms":1767261720000,"end_ms":1767261780000},"results":{"orders":1,"total":2}}`,
		`c-9	1767261610000	{"key":"c-9","window":{"start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:01:00Z","start_ms":1767261600000,"end_ms":1767261660000},"results":{"orders":1,"total":3}}`,
		`c-9	1767261710000	{"key":"c-9","window":{"start":"2026-01-01T10:01:00Z","end":"2026-01-01T10:02:00Z","start_ms":1767261660000,"end_ms":1767261720000},"results":{"orders":1,"total":4}}`,
	}
	sorted := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

	// Live: the stages run, then the orders come.
	run := func() *proc {
		return start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir())
	}
	p := run()
	waitLogged(t, p, "partitions assigned", 2, time.Minute, "both stages assigned")
	produce()
	eventually(t, 2*time.Minute, func() bool { return len(results()) >= len(want) }, func() string {
		return fmt.Sprintf("%d results, want %d\n%s", len(results()), len(want), tail(p.logs.String(), 20))
	})
	p.stop()
	live := sorted(results())
	if !slices.Equal(live, want) {
		t.Fatalf("live results:\n%s\nwant:\n%s", strings.Join(live, "\n"), strings.Join(want, "\n"))
	}
	if n := kcatCount(t, dlq); n != 0 {
		t.Fatalf("live: %d dead letters, want 0: %v", n, kcatRead(t, dlq))
	}

	// Replay: the aggregate's state emptied (its changelog deleted and
	// created again), the aggregate resumes after the live copies, and the
	// re-key stage reads its input again from the start: a backlog, each
	// partition of its output filled one upstream run after another.
	if out, err := topicTool(t, "--delete", "--topic", changelog); err != nil {
		t.Fatalf("TopicCommand --delete %s: %v\n%s", changelog, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, changelog); return id == "" },
		func() string { return changelog + " still exists" })
	eventually(t, time.Minute, func() bool {
		return strings.Contains(exactlyCmd(t, "topics", "create", "--topology", topo), changelog)
	}, func() string { return "topics create did not re-create " + changelog })
	if code, msg := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", agg, "--to-latest", "--execute", "--keep-state"); code != 0 {
		t.Fatalf("reset %s: exit %d:\n%s", agg, code, msg)
	}
	if code, msg := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", rekey, "--to-earliest", "--execute"); code != 0 {
		t.Fatalf("reset %s: exit %d:\n%s", rekey, code, msg)
	}
	p = run()
	eventually(t, 2*time.Minute, func() bool { return len(results()) >= 2*len(want) }, func() string {
		return fmt.Sprintf("%d results, want %d\n%s", len(results()), 2*len(want), tail(p.logs.String(), 20))
	})
	p.stop()
	// The live results, then the replay's, the same.
	all := sorted(results())
	if twice := sorted(append(slices.Clone(want), want...)); !slices.Equal(all, twice) {
		t.Fatalf("after the replay:\n%s\nwant the live results twice:\n%s", strings.Join(all, "\n"), strings.Join(want, "\n"))
	}
	if n := kcatCount(t, dlq); n != 0 {
		t.Fatalf("replay: %d dead letters, want 0: %v", n, kcatRead(t, dlq))
	}
}
