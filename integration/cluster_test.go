//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// clusterFault is one fault family of the cluster crash check. inject
// hits the cluster while the stage commits, and returns the node it hit
// and the timing kind ("" when the fault has no failover to time).
type clusterFault struct {
	name   string
	timing string
	target func(c *cluster, s clusterStage) int32
}

// clusterStage names the stage under test and its topics.
type clusterStage struct {
	name, in, out, dlq string
	topo               string // its topology file
	instance           string // its instance ID
}

var clusterFaults = []clusterFault{
	{"input-leader-kill", "leader", func(c *cluster, s clusterStage) int32 { return c.leaderOf(s.in, 0) }},
	{"output-leader-kill", "leader", func(c *cluster, s clusterStage) int32 { return c.leaderOf(s.out, 0) }},
	{"txn-coordinator-kill", "coordinator", func(c *cluster, s clusterStage) int32 { return c.txnCoordinator(transactionalID(s.name, s.instance)) }},
	{"group-coordinator-kill", "coordinator", func(c *cluster, s clusterStage) int32 { return c.groupCoordinator(stageGroup(s.name)) }},
	{"controller-kill", "controller", func(c *cluster, _ clusterStage) int32 { return c.activeController() }},
	{"rolling-restart", "", nil},
	{"proxy-cut", "", func(c *cluster, s clusterStage) int32 { return c.leaderOf(s.out, 0) }},
}

// clusterTimes gathers the failover timings of every cluster test in the
// run, by kind and transaction.version.
var clusterTimes failoverTimes

// The crash check on the three-node cluster, once per fault family: kcat
// feeds events with malformed records among them, a stage armed with a
// failpoint dies by SIGKILL there, and its restart runs while the family's
// fault hits the cluster: a kill -9 of the leader of an input or output
// partition, of the stage's transaction coordinator or group coordinator,
// or of the active controller; a rolling restart of all three nodes; or a
// proxy cut that makes the output leader unreachable while it stays alive.
// The stage may pause but must not exit, /readyz says why while it is not
// ready, and kcat read_committed finds every event exactly once.
func TestClusterCrashCheck(t *testing.T) {
	c := needCluster(t)
	t.Logf("cluster transaction.version=%d", c.tv)
	// Every family's topics first: creating a topic with replication
	// factor 3 needs all three nodes, and each family's killed node comes
	// back in the background while the next family starts.
	stages := make([]clusterStage, len(clusterFaults))
	for i := range stages {
		s := clusterStage{name: uniqueName("cc"), in: uniqueName("cc_raw"), out: uniqueName("cc_clean"), dlq: uniqueName("cc_dlq")}
		s.instance = "it-1"
		s.topo = topologyFile(t, []stageSpec{{s.name, s.in, s.out, s.dlq}}, "100ms", "60s", 200)
		exactlyCmd(t, "topics", "create", s.topo)
		stages[i] = s
	}
	for i, f := range clusterFaults {
		fp := crashBeforeCommit
		if i%2 == 1 {
			fp = crashAfterCommit
		}
		t.Run(f.name, func(t *testing.T) { clusterCrashCheck(t, c, f, stages[i], fp) })
	}
	t.Logf("failover timings so far (transaction.version=%d):\n%s", c.tv, clusterTimes.summary())
}

func clusterCrashCheck(t *testing.T, c *cluster, f clusterFault, s clusterStage, fp string) {
	const events, bad = 4000, 20
	c.t = t
	topo := s.topo
	feed := startFeed(t, s.in, crashInput(events, bad), 200, 400*time.Millisecond)

	crashing := start(t, []string{failpointEnv + "=" + fp + "@3"}, "run", "--topology", topo, "--instance-id", "it-1")
	_ = crashing.wait(2 * time.Minute)
	if !crashing.killedBySIGKILL() {
		t.Fatalf("want the process killed by SIGKILL at %s@3, got %v", fp, crashing.cmd.ProcessState)
	}
	addr := freeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", addr)
	// Fault the cluster once the restart commits.
	base := c.lso(s.out)
	eventually(t, time.Minute, func() bool {
		for part, o := range c.lso(s.out) {
			if o > base[part] {
				return true
			}
		}
		return false
	}, func() string { return "the restarted stage commits nothing" })

	c.settle() // the previous family's node is back and caught up
	ready := watchReady(t, addr)
	switch {
	case f.name == "rolling-restart":
		for _, n := range clusterNodes {
			t0 := time.Now()
			c.term(n)
			c.restart(n)
			c.waitHealthy(2 * time.Minute)
			t.Logf("node %d restarted (SIGTERM, start on its data) in %s", n, time.Since(t0).Round(10*time.Millisecond))
			if p.exited() {
				t.Fatalf("the stage exited during the rolling restart: %v\n%s", p.err, tail(p.logs.String(), 40))
			}
		}
	case f.name == "proxy-cut":
		n := f.target(c, s)
		clusterProxies[n].Cut()
		cut := time.Now()
		// Hold the cut until readiness reports it (a transaction stuck on
		// the unreachable leader for StallMin, or the session failing).
		var body string
		func() {
			defer clusterProxies[n].Restore()
			eventually(t, stallMin+40*time.Second, func() bool {
				var code int
				code, body = get(t, "http://"+addr+"/readyz")
				return code == http.StatusServiceUnavailable && strings.TrimSpace(body) != ""
			}, func() string { return "/readyz stayed ready while the output leader was cut off: " + body })
		}()
		t.Logf("node %d cut off for %s; /readyz: %s", n, time.Since(cut).Round(100*time.Millisecond), strings.TrimSpace(body))
		if p.exited() {
			t.Fatalf("the stage exited while node %d was cut off: %v\n%s", n, p.err, tail(p.logs.String(), 40))
		}
		waitReady(t, addr, 2*time.Minute)
	default:
		n := f.target(c, s)
		before := c.lso(s.out)
		at := time.Now()
		c.kill(n)
		took := c.watchCommit(s.out, at, before, 2*time.Minute).wait()
		if took < 0 {
			t.Fatalf("no transaction committed to %s within 2m of killing node %d", s.out, n)
		}
		clusterTimes.add(f.timing+"/tv"+fmt.Sprint(c.tv), took)
		t.Logf("killed node %d (%s): first commit after it in %s", n, f.name, took.Round(10*time.Millisecond))
		if p.exited() {
			t.Fatalf("the stage exited after node %d was killed: %v\n%s", n, p.err, tail(p.logs.String(), 40))
		}
		c.restartLater(n) // while the stage catches up
	}
	if reasons := ready.stop(); len(reasons) > 0 {
		t.Logf("/readyz while not ready: %s", strings.Join(reasons, " | "))
	}

	feed.wait(t)
	eventually(t, 3*time.Minute, func() bool {
		return kcatCount(t, s.out) >= events && kcatCount(t, s.dlq) >= bad
	}, func() string {
		return fmt.Sprintf("%s has %d of %d, %s has %d of %d", s.out, kcatCount(t, s.out), events, s.dlq, kcatCount(t, s.dlq), bad)
	})
	if p.exited() {
		t.Fatalf("the stage exited: %v\n%s", p.err, tail(p.logs.String(), 40))
	}
	p.stop()
	checkOutput(t, s.out, events)
	checkDeadLetters(t, s.dlq, s.in, bad)
}

// feed writes lines to a topic with kcat in chunks, one chunk every pace,
// in the background.
type feed struct {
	done chan struct{}
	err  error
}

func startFeed(t testing.TB, topic string, lines [][]byte, chunk int, pace time.Duration) *feed {
	f := &feed{done: make(chan struct{})}
	kcat, bs := kcatBin(t), kcatBrokers(t)
	go func() {
		defer close(f.done)
		for i := 0; i < len(lines); i += chunk {
			var in bytes.Buffer
			for _, l := range lines[i:min(i+chunk, len(lines))] {
				in.Write(l)
				in.WriteByte('\n')
			}
			cmd := exec.Command(kcat, "-P", "-b", bs, "-t", topic, "-K", "|", "-Z",
				"-X", "enable.idempotence=true", "-X", "acks=all")
			cmd.Stdin = &in
			if out, err := cmd.CombinedOutput(); err != nil {
				f.err = fmt.Errorf("kcat produce to %s: %v\n%s", topic, err, out)
				return
			}
			time.Sleep(pace) // the feed's pace, not a wait for a condition
		}
	}()
	return f
}

func (f *feed) wait(t testing.TB) {
	t.Helper()
	<-f.done
	if f.err != nil {
		t.Fatal(f.err)
	}
}

// readyWatch polls /readyz every 200 ms and keeps each distinct reason
// given while not ready.
type readyWatch struct {
	bg      background
	mu      sync.Mutex
	reasons []string
}

func watchReady(t testing.TB, addr string) *readyWatch {
	w := &readyWatch{}
	w.bg = startBackground(t, 200*time.Millisecond, func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return true
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return true
		}
		r := strings.TrimSpace(b.String())
		w.mu.Lock()
		if len(w.reasons) < 5 && !slices.Contains(w.reasons, r) {
			w.reasons = append(w.reasons, r)
		}
		w.mu.Unlock()
		return true
	})
	return w
}

func (w *readyWatch) stop() []string {
	w.bg.finish()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reasons
}
