//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// waitReady waits until addr's /readyz answers 200.
func waitReady(t testing.TB, addr string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() bool {
		code, _ := get(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	}, func() string { _, body := get(t, "http://"+addr+"/readyz"); return addr + " /readyz: " + body })
}

// A rolling restart of three instances of one stage under load: each
// instance in turn gets SIGTERM, exits 0 within the grace period and is
// started again with its instance ID; the next one goes only once it is
// ready again. Nothing is lost and nothing is doubled.
func TestRollingRestartUnderLoad(t *testing.T) {
	in, out, dlq, stage := uniqueName("raw"), uniqueName("clean"), uniqueName("dlq"), uniqueName("rolling")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 2000)
	exactlyCmd(t, "topics", "create", topo)

	ids := []string{"roll-a", "roll-b", "roll-c"}
	addrs := map[string]string{}
	procs := map[string]*proc{}
	run := func(id string) {
		procs[id] = start(t, nil, "run", "--topology", topo, "--instance-id", id, "--metrics-addr", addrs[id])
	}
	for _, id := range ids {
		addrs[id] = freeAddr(t)
		run(id)
	}
	for _, id := range ids {
		waitReady(t, addrs[id], time.Minute)
	}
	prod := startProducer(t, in, "e", 20) // ~1000 events/s
	// Under load, a read_committed kcat -e may never reach an end: progress
	// is read from the output's last stable offsets instead.
	eventually(t, time.Minute, func() bool { return stableEnd(t, out) > 1000 },
		func() string { return fmt.Sprintf("LSO sum %d", stableEnd(t, out)) })

	for _, id := range ids {
		before := stableEnd(t, out)
		began := time.Now()
		procs[id].stop() // SIGTERM; requires exit 0
		stopped := time.Since(began)
		run(id)
		waitReady(t, addrs[id], time.Minute)
		t.Logf("%s: stopped in %s, ready again %s after SIGTERM", id, stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		if stopped > 30*time.Second {
			t.Errorf("%s took %s to stop", id, stopped)
		}
		eventually(t, time.Minute, func() bool { return stableEnd(t, out) > before+500 },
			func() string {
				return fmt.Sprintf("no progress after restarting %s: LSO sum %d", id, stableEnd(t, out))
			})
	}
	n := prod.halt(t)
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) >= n },
		func() string { return fmt.Sprintf("%d of %d out", kcatCount(t, out), n) })
	aborted := 0.0
	for _, id := range ids {
		v, _ := sum(scrape(t, addrs[id]), "exactly_stage_transactions_aborted_total", map[string]string{"stage": stage})
		aborted += v
	}
	for _, id := range ids {
		procs[id].stop()
	}
	checkOutput(t, out, n)
	if d := kcatCount(t, dlq); d != 0 {
		t.Errorf("%d dead letters; every event was valid", d)
	}
	t.Logf("%d events through 3 rolling restarts: no loss, no duplicates; transactions aborted since the last restarts: %v", n, aborted)
}

// stableEnd returns the sum of topic's last stable offsets.
func stableEnd(t testing.TB, topic string) int64 {
	var n int64
	for _, o := range committedEnds(t, topic) {
		n += o
	}
	return n
}

// kafkaScript runs deploy/local/kafka.sh cmd for the broker of
// EXACTLY_BROKERS (its run dir and ports come from the environment, as for
// up.sh), refusing to touch a broker it did not start.
func kafkaScript(t testing.TB, cmd string) {
	t.Helper()
	port := os.Getenv("KAFKA_PORT")
	if port == "" {
		port = "9092"
	}
	if _, p, _ := net.SplitHostPort(strings.Split(brokers(t), ",")[0]); p != port {
		t.Fatalf("EXACTLY_BROKERS=%s is not the broker deploy/local/kafka.sh manages (KAFKA_PORT=%s)", brokers(t), port)
	}
	out, err := exec.Command("bash", "../deploy/local/kafka.sh", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("kafka.sh %s: %v\n%s", cmd, err, out)
	}
}

// A stage whose broker is gone turns not-ready within
// brokerSilenceLimit (plus one probe), while /healthz stays
// 200, and ready again once the broker is back; then it moves records
// again. The broker is stopped and resumed on its data: it must not run
// concurrently with other tests on the same broker.
func TestReadinessFollowsTheBroker(t *testing.T) {
	in, out, dlq, stage := uniqueName("raw"), uniqueName("clean"), uniqueName("dlq"), uniqueName("ready")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 1000)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, in, events("e", 0, 100))

	addr := freeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "ready-1", "--metrics-addr", addr)
	waitReady(t, addr, time.Minute)
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= 100 },
		func() string { return fmt.Sprintf("%d of 100 out", kcatCount(t, out)) })

	t.Cleanup(func() { kafkaScript(t, "resume") }) // a no-op when running
	kafkaScript(t, "stop")
	down := time.Now()
	limit := brokerSilenceLimit + 5*time.Second
	var body string
	eventually(t, limit, func() bool {
		var code int
		code, body = get(t, "http://"+addr+"/readyz")
		return code == http.StatusServiceUnavailable
	}, func() string { return "still ready: " + body })
	t.Logf("not ready %s after the broker stopped: %s", time.Since(down).Round(100*time.Millisecond), strings.TrimSpace(body))
	if code, _ := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d during the outage, want 200", code)
	}

	kafkaScript(t, "resume")
	up := time.Now()
	waitReady(t, addr, 2*time.Minute)
	t.Logf("ready %s after the broker was back", time.Since(up).Round(100*time.Millisecond))
	kcatProduce(t, in, events("e", 100, 100))
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= 200 },
		func() string { return fmt.Sprintf("%d of 200 out after the outage", kcatCount(t, out)) })
	p.stop()
	checkOutput(t, out, 200)
}

// The sink's /metrics count the rows written, the duplicates skipped and
// the dead letters; `exactly status` reports its stored positions and the
// stage's committed offsets, with lag 0 against the LSO once caught up.
func TestSinkMetricsAndStatus(t *testing.T) {
	const n, bad = 1500, 15
	// A stage writes the sink's input transactionally: markers in it.
	raw, dlq1, stage := uniqueName("raw"), uniqueName("dlq"), uniqueName("feed")
	s := newSinkSpec("opsink")
	topoStage := topologyFile(t, []stageSpec{{stage, raw, s.in, dlq1}}, "100ms", "60s", 500)
	exactlyCmd(t, "topics", "create", topoStage)
	topoSink := sinkTopology(t, s)
	pool := pgPool(t)

	kcatProduce(t, raw, events("e", 0, n))
	// Straight into the sink's input: 100 events again, a replay it must
	// skip as duplicates, and records without an event ID, dead letters.
	lines := events("e", 0, 100)
	for j := range bad {
		lines = append(lines, fmt.Appendf(nil, `bad-%d|{"no_event_id":%d}`, j, j))
	}
	kcatProduce(t, s.in, lines)

	stageAddr, sinkAddr := freeAddr(t), freeAddr(t)
	st := start(t, nil, "run", "--topology", topoStage, "--instance-id", "it-1", "--metrics-addr", stageAddr)
	sk := start(t, nil, "sink", "--topology", topoSink, "--instance-id", "it-1", "--metrics-addr", sinkAddr)
	waitSinkDone(t, pool, s, n, 2*time.Minute)
	waitReady(t, sinkAddr, time.Minute)
	waitReady(t, stageAddr, time.Minute)

	lbl := map[string]string{"sink": s.name}
	m := waitMetric(t, sinkAddr, "exactly_sink_rows_written_total", lbl, float64(n), 10*time.Second)
	ends := committedEnds(t, s.in)
	var endSum float64
	for _, e := range ends {
		endSum += float64(e)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"exactly_sink_records_consumed_total", lbl, n + bad + 100},
		{"exactly_sink_rows_duplicate_total", lbl, 100},
		{"exactly_sink_records_dead_lettered_total", map[string]string{"sink": s.name, "reason": "event_id"}, bad},
		{"exactly_sink_consumer_lag_records", lbl, 0},
		{"exactly_sink_position_offset", lbl, endSum},
	} {
		if got, _ := sum(m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if v, _ := sum(m, "exactly_sink_batch_duration_seconds_count", lbl); v < 1 {
		t.Errorf("batch_duration_seconds_count = %v", v)
	}

	// status, as JSON: lag 0 for both, members and positions shown.
	var rep struct {
		Stages, Sinks []struct {
			Name, Group, State string
			Lag                int64
			Members            []struct {
				InstanceID string `json:"instance_id"`
				Partitions []int32
			}
			Partitions []struct {
				Partition  int32
				LastStable int64 `json:"last_stable_offset"`
				Committed  int64
				Lag        int64
				Writer     string
			}
			Errors []string
		}
	}
	for _, topo := range []string{topoStage, topoSink} {
		out := exactlyCmd(t, "status", "--topology", topo, "--json")
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		for _, g := range append(rep.Stages, rep.Sinks...) {
			if g.Lag != 0 || len(g.Errors) != 0 || g.State != "Stable" || len(g.Members) != 1 || len(g.Partitions) != 3 {
				t.Errorf("status of %s: %+v", g.Name, g)
			}
			for _, p := range g.Partitions {
				if p.Committed != p.LastStable {
					t.Errorf("%s partition %d: committed %d, LSO %d", g.Name, p.Partition, p.Committed, p.LastStable)
				}
			}
		}
		t.Logf("exactly status --topology %s:\n%s", topo, exactlyCmd(t, "status", "--topology", topo))
	}
	if p := rep.Sinks[0].Partitions[0]; p.Writer != "it-1" || p.Committed != ends[p.Partition] {
		t.Errorf("sink partition %d: %+v, want writer it-1 at %d", p.Partition, p, ends[p.Partition])
	}
	sk.stop()
	st.stop()
}
