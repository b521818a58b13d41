//go:build integration

package integration

import (
	"testing"
	"time"
)

// A sink instance assigned no partition (more instances than partitions)
// is a member with nothing to do: /readyz answers 200, as it does for a
// stage, or a StatefulSet's rollout would wait on it forever. When the
// instance holding the partition is killed, the idle one takes it over
// after the session timeout and loads what came since, each event once.
func TestSinkIdleInstanceIsReady(t *testing.T) {
	s := newSinkSpec("idle")
	b := sinkYAMLHead(t, s, 1, "{ event_id: event_id, body: $value }")
	b.WriteString("    commit: { interval: 50ms, max_records: 1000 }\n    session_timeout: 6s\n")
	topo := writeSinkTopology(t, s, "topology.yaml", b.String())
	pool := pgPool(t)
	kcatProduce(t, s.in, events("idle", 0, 20))

	busyAddr, idleAddr := freeAddr(t), freeAddr(t)
	busy := start(t, nil, "sink", "--topology", topo, "--instance-id", "a", "--metrics-addr", busyAddr)
	waitReady(t, busyAddr, time.Minute)
	waitSinkDone(t, pool, s, 20, time.Minute)
	idle := start(t, nil, "sink", "--topology", topo, "--instance-id", "b", "--metrics-addr", idleAddr)
	waitReady(t, idleAddr, time.Minute)
	if code, body := get(t, "http://"+busyAddr+"/readyz"); code != 200 {
		t.Fatalf("the busy instance is not ready once the idle one joined: %d %s", code, body)
	}

	_ = busy.cmd.Process.Kill()
	_ = busy.wait(time.Minute)
	kcatProduce(t, s.in, events("idle", 20, 30))
	waitSinkDone(t, pool, s, 50, 2*time.Minute)
	waitReady(t, idleAddr, time.Minute)
	if rows, distinct := rowStats(t, pool, s.table()); rows != 50 || distinct != 50 {
		t.Fatalf("table has %d rows (%d distinct), want 50", rows, distinct)
	}
	idle.stop()
}
