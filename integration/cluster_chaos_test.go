//go:build integration

package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// clusterChaosKinds are the fault kinds of the cluster chaos profile, in
// the order the schedule cycles through them. The first six are the kinds
// of TestChaos (a broker bounce here is one node's SIGTERM and restart);
// the others need a cluster.
var clusterChaosKinds = []string{
	"leader-kill", "process-kill", "txn-coordinator-kill", "failpoint", "group-coordinator-kill",
	"proxy-cut", "controller-kill", "broker-bounce", "proxy-delay", "pg-restart", "zombie", "scale",
}

// The chaos suite's cluster profile: the 3-stage chain and the sink of
// TestChaos, two instances each, on the three-node cluster, reached through
// the per-node proxies, while faults hit one at a time, cycling through
// EXACTLY_CLUSTER_CHAOS_KINDS (default: every kind of clusterChaosKinds but
// zombie and scale, which take a minute each; the long profile adds them):
// kill -9 of the leader of a random partition of the chain's topics, of a
// stage instance's transaction coordinator, of a stage's group coordinator,
// of the active controller; one node's SIGTERM and restart; a proxy cut or
// a 200 ms proxy delay of one node for a few seconds; and TestChaos's
// process kills, failpoints, zombies, Postgres restarts and scaling.
// Afterwards `exactly verify`, kcat read_committed and SQL must find every
// event exactly once, and a read_committed reader watching the last topic
// during the run must never see a duplicate.
//
// EXACTLY_CLUSTER_CHAOS_EVENTS (default 40000) and
// EXACTLY_CLUSTER_CHAOS_FAULTS (default: one of each kind) size it; the long
// profile is 2000000 events and 300 faults with every kind. pg-restart
// restarts the PostgreSQL of EXACTLY_RUN_DIR: leave it out of the kinds
// when that Postgres is shared.
func TestClusterChaos(t *testing.T) {
	c := needCluster(t)
	kinds := clusterChaosKinds[:len(clusterChaosKinds)-2]
	if k := os.Getenv("EXACTLY_CLUSTER_CHAOS_KINDS"); k != "" {
		kinds = strings.Split(k, ",")
		for _, k := range kinds {
			if !slices.Contains(clusterChaosKinds, k) {
				t.Fatalf("EXACTLY_CLUSTER_CHAOS_KINDS: unknown kind %q (kinds: %s)", k, strings.Join(clusterChaosKinds, ","))
			}
		}
	}
	total := envInt("EXACTLY_CLUSTER_CHAOS_EVENTS", 40000)
	n := envInt("EXACTLY_CLUSTER_CHAOS_FAULTS", len(kinds))
	began := time.Now()
	ch := newChaos(t, total)
	ch.startAll()
	// The load must outlast the faults, or a kill finds no transaction to
	// time: paced for 20 s a fault (a killed node takes 10 s or more to
	// come back, a process kill or a proxy fault less), and the rest
	// produced at full speed once the faults are done.
	// Each fault also gets its share of the input: a fault that needs
	// traffic (a failpoint, a timed kill) must not find the input used up
	// because earlier faults took longer than the pacing assumed (a long
	// run once ran out of input at fault 253 of 300).
	ch.limit.Store(int64(max(1, total/(n+1))))
	ch.produce(total, time.Duration(n)*20*time.Second+20*time.Second)
	cc := &clusterChaos{c: c, ch: ch}
	eventually(t, 2*time.Minute, func() bool { return ch.reader.count() > 0 },
		func() string { return "nothing reached the chain's last topic" })

	faults := map[string]int{}
	for i := range n {
		kind := kinds[i%len(kinds)]
		ch.limit.Store(int64(total) * int64(i+2) / int64(n+1))
		c.settle()
		t0 := time.Now()
		got := cc.fault(kind)
		faults[kind] += got
		t.Logf("fault %3d %-22s %5.1fs; produced %d, final topic %d", i+1, kind, time.Since(t0).Seconds(), ch.produced.Load(), ch.reader.count())
		ch.reader.check(t)
		for _, in := range ch.inst {
			// Every fault restarts the instances it ends; only scale's
			// third instance stays stopped.
			if !in.alive() && in.id != "c" {
				t.Fatalf("%s exited during the chaos: %v\n%s", in.label(), in.p.err, tail(in.p.logs.String(), 40))
			}
		}
	}
	ch.hurry.Store(true)
	c.settle()
	ch.wait()
	rep := ch.verify(true)
	ch.markers()
	ch.reader.check(t)
	sum := 0
	for _, v := range faults {
		sum += v
	}
	t.Logf("cluster chaos (transaction.version=%d) done in %s: %d events (%d poison); %d faults of %d kinds %v; verify read %d records in %s",
		c.tv, time.Since(began).Round(time.Second), total, ch.poison, sum, len(faults), faults, rep.Records, time.Duration(rep.Elapsed))
	for _, s := range rep.Stages {
		t.Logf("  stage %-8s in %d out %d dead-lettered %d lost %d duplicates %d", s.Name, s.In, s.Out, s.DeadLettered, s.Lost, s.Duplicates+s.EventIDDuplicates)
	}
	for _, s := range rep.Sinks {
		t.Logf("  sink %-8s in %d rows %d missing %d extra %d", s.Name, s.In, s.Rows, s.Missing, s.Extra)
	}
	t.Logf("failover timings (first commit after the fault):\n%s", clusterTimes.summary())
}

// clusterChaos runs one fault of a kind against a running chaos topology.
type clusterChaos struct {
	c   *cluster
	ch  *chaos
	fps int // failpoints armed so far
}

// fault runs one fault of kind and returns how many faults it counted.
func (cc *clusterChaos) fault(kind string) int {
	c, ch := cc.c, cc.ch
	switch kind {
	case "process-kill":
		return ch.kills(1)
	case "failpoint":
		return cc.failpoint()
	case "broker-bounce":
		n := clusterNodes[rand.N(len(clusterNodes))]
		c.term(n)
		c.restartLater(n)
		return 1
	case "zombie":
		return ch.zombies()
	case "pg-restart":
		return ch.pgRestarts(1)
	case "scale":
		return ch.scale()
	case "leader-kill":
		// A partition of a topic the chain reads or writes; time the first
		// commit to the topic written by the stage that is hit.
		i := rand.N(4) // raw, clean, enriched, final
		topic := ch.topics[i]
		watch := ch.topics[max(i, 1)]
		cc.killTimed(c.leaderOf(topic, int32(rand.N(6))), "leader", watch)
		return 1
	case "txn-coordinator-kill":
		i := rand.N(len(ch.stages))
		id := []string{"a", "b"}[rand.N(2)]
		cc.killTimed(c.txnCoordinator(transactionalID(ch.stages[i], id)), "coordinator", ch.topics[i+1])
		return 1
	case "group-coordinator-kill":
		i := rand.N(len(ch.stages))
		cc.killTimed(c.groupCoordinator(stageGroup(ch.stages[i])), "coordinator", ch.topics[i+1])
		return 1
	case "controller-kill":
		cc.killTimed(c.activeController(), "controller", ch.topics[1])
		return 1
	case "proxy-cut", "proxy-delay":
		n := clusterNodes[rand.N(len(clusterNodes))]
		p := clusterProxies[n]
		if kind == "proxy-cut" {
			p.Cut()
		} else {
			p.Delay(200 * time.Millisecond)
		}
		time.Sleep(time.Duration(3000+rand.N(7000)) * time.Millisecond) // the fault's length
		p.Restore()
		return 1
	}
	ch.t.Fatalf("unknown fault kind %q", kind)
	return 0
}

// killTimed kill -9s node, times the first commit to topic after it, and
// restarts the node in the background.
func (cc *clusterChaos) killTimed(node int32, timing, topic string) {
	c := cc.c
	before := c.lso(topic)
	at := time.Now()
	c.kill(node)
	w := c.watchCommit(topic, at, before, 2*time.Minute)
	took := w.wait()
	loadDone := false
	select {
	case <-cc.ch.prodDone:
		// The load ended: a commit may be the backlog's, and none may
		// come at all once it is processed. Not a failover time.
		loadDone = true
	default:
	}
	switch {
	case took < 0 && !loadDone:
		cc.ch.t.Fatalf("no transaction committed to %s within 2m of killing node %d", topic, node)
	case took >= 0 && !loadDone:
		clusterTimes.add(fmt.Sprintf("%s/tv%d", timing, c.tv), took)
	}
	c.restartLater(node)
}

// failpoint restarts a random instance with one of the four failpoints
// (cycling) armed at a small N, and restarts it clean once it fired.
func (cc *clusterChaos) failpoint() int {
	fps := []string{crashBeforeCommit, crashAfterCommit, crashBeforeDBCommit, crashAfterDBCommit}
	fp := fps[cc.fps%len(fps)]
	cc.fps++
	cc.ch.fireFailpoint(fp)
	return 1
}
