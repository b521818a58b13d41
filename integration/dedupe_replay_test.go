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

	"github.com/twmb/franz-go/pkg/kgo"
)

// Behind a stage that re-keys, dedupe drops the same copies live and on a
// replay: eleven orders over the three partitions of the input, five
// minutes of record time, retention 2m, re-keyed by order ID into one
// partition. Live, the orders come in time order; on the replay (the
// re-key stage reset to earliest, the dedupe state emptied) the re-key
// stage writes each upstream partition's run after another's. Both times
// the copies of a at +1m30s and of b at +2m50s are dropped, and a at +3m
// and d at +4m (3m after their first sighting) pass. Judged by stream
// time, the backlog dropped a at +3m (stream time held back by upstream
// partitions not heard from yet) and live dropped d at +4m (stream time
// then +2m40s, the slowest upstream partition).
func TestDedupeSameLiveAndOnReplay(t *testing.T) {
	t.Parallel()
	raw, by, out, dlq := uniqueName("ddr_raw"), uniqueName("ddr_by"), uniqueName("ddr_out"), uniqueName("ddr_dlq")
	rekey, dd := uniqueName("ddr_rekey"), uniqueName("ddr_dedupe")
	body := fmt.Sprintf(`stages:
  - name: %s
    input: { topic: %s }
    output: { topic: %s }
    dead_letter: { topic: %s }
    transform:
      - key: value.oid
  - name: %s
    input: { topic: %s }
    output: { topic: %s }
    dead_letter: { topic: %s }
    transform:
      - dedupe: { id: value.oid, retention: 2m }
`, rekey, raw, by, dlq, dd, by, out, dlq)
	topo := userTopology(t, []fileTopic{{name: raw, parts: 3}, {name: by, parts: 1}, {name: out, parts: 1}, {name: dlq, parts: 1}}, body)
	changelog := "exactly-" + dd + "-dedupe-changelog"

	// Record times within the topics' retention and the broker's
	// message.timestamp.after.max.ms.
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	type order struct {
		p   int32
		oid string
		at  time.Duration
	}
	const s, m = time.Second, time.Minute
	orders := []order{
		{0, "a", 0}, {0, "b", 1 * m}, {0, "a", 3 * m},
		{1, "d", 1 * m}, {1, "a", 1*m + 30*s}, {1, "e", 2*m + 30*s}, {1, "f", 5 * m},
		{2, "g", 2*m + 40*s}, {2, "b", 2*m + 50*s}, {2, "d", 4 * m}, {2, "h", 5 * m},
	}
	cl := kafkaClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	line := func(o order) string { return fmt.Sprintf("%s\t%d", o.oid, base.Add(o.at).UnixMilli()) }
	var want []string
	for _, o := range orders {
		if !(o.oid == "a" && o.at == 1*m+30*s || o.oid == "b" && o.at == 2*m+50*s) {
			want = append(want, line(o))
		}
	}
	slices.Sort(want)

	results := func() []string {
		kcat := func(ctx context.Context, args ...string) *exec.Cmd {
			return exec.CommandContext(ctx, kcatBin(t), append([]string{"-b", kcatBrokers(t)}, args...)...)
		}
		return kcatConsume(t, kcat, out, "%k\t%T\n", "")
	}
	run := func() *proc {
		return start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir())
	}
	// done waits until the dedupe stage has read every re-keyed order and
	// wrote n results.
	done := func(p *proc, n int) []string {
		eventually(t, 2*time.Minute, func() bool { return len(results()) >= n && statusLag(t, topo, dd) == 0 }, func() string {
			return fmt.Sprintf("%d results, want %d; lag %d\n%s", len(results()), n, statusLag(t, topo, dd), tail(p.logs.String(), 20))
		})
		r := results()
		slices.Sort(r)
		return r
	}

	// Live: the stages run, and the orders come in time order, each once
	// the one before is re-keyed.
	p := run()
	waitLogged(t, p, "partitions assigned", 2, time.Minute, "both stages assigned")
	live := slices.Clone(orders)
	slices.SortStableFunc(live, func(x, y order) int { return int(x.at - y.at) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, o := range live {
		r := &kgo.Record{Topic: raw, Partition: o.p, Key: []byte(o.oid), Value: fmt.Appendf(nil, `{"oid":%q,"n":%d}`, o.oid, i), Timestamp: base.Add(o.at)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %+v: %v", o, err)
		}
		eventually(t, time.Minute, func() bool { return kcatCount(t, by) > i }, func() string {
			return fmt.Sprintf("order %d not re-keyed\n%s", i, tail(p.logs.String(), 20))
		})
	}
	got := done(p, len(want))
	p.stop()
	if !slices.Equal(got, want) {
		t.Fatalf("live results:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Replay: the dedupe state emptied (its changelog deleted and created
	// again), the dedupe stage resumes after the live copies, and the
	// re-key stage reads its input again from the start: a backlog.
	if out, err := topicTool(t, "--delete", "--topic", changelog); err != nil {
		t.Fatalf("TopicCommand --delete %s: %v\n%s", changelog, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, changelog); return id == "" },
		func() string { return changelog + " still exists" })
	eventually(t, time.Minute, func() bool {
		return strings.Contains(exactlyCmd(t, "topics", "create", "--topology", topo), changelog)
	}, func() string { return "topics create did not re-create " + changelog })
	if code, msg := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", dd, "--to-latest", "--execute", "--keep-state"); code != 0 {
		t.Fatalf("reset %s: exit %d:\n%s", dd, code, msg)
	}
	if code, msg := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", rekey, "--to-earliest", "--execute"); code != 0 {
		t.Fatalf("reset %s: exit %d:\n%s", rekey, code, msg)
	}
	p = run()
	all := done(p, 2*len(want))
	p.stop()
	if twice := slices.Sorted(slices.Values(append(slices.Clone(want), want...))); !slices.Equal(all, twice) {
		t.Fatalf("after the replay:\n%s\nwant the live results twice:\n%s", strings.Join(all, "\n"), strings.Join(want, "\n"))
	}
	if n := kcatCount(t, dlq); n != 0 {
		t.Fatalf("%d dead letters, want 0: %v", n, kcatRead(t, dlq))
	}
}
