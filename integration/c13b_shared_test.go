//go:build integration

package integration

// Outside inputs of issue 13, kind 2: two consumers never share a position.
// A stage's and a sink's consumer group and static member ID come from
// their names and the instance ID, so two files that name things alike
// (each valid alone) put two unrelated consumers in one group under one
// group.instance.id: the broker fences one of them (FENCED_INSTANCE_ID) and
// it processes nothing more while /readyz says ready. Accepted: every
// consumer processes all its records, or a process exits non-zero with an
// error naming the clash. Rejected: a consumer that runs on, ready, while
// its records are not processed.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// c13bBothOrExit waits until each check reports done or its process has
// exited, then requires of each: done, or exited non-zero naming name.
func c13bBothOrExit(t *testing.T, name string, timeout time.Duration, procs []*proc, addrs []string, done []func() (bool, string)) {
	t.Helper()
	settled := func() bool {
		for i, p := range procs {
			ok, _ := done[i]()
			if !ok && !p.exited() {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(timeout)
	for !settled() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond) // polling external processes
	}
	for i, p := range procs {
		ok, what := done[i]()
		switch {
		case ok:
		case p.exited():
			if p.err == nil || !strings.Contains(p.logs.String(), name) {
				t.Errorf("process %d exited (%v) without an error naming %s: %s\n%s", i, p.err, name, what, tail(p.logs.String(), 20))
			}
		default:
			code, body := get(t, "http://"+addrs[i]+"/readyz")
			t.Errorf("process %d runs on (/readyz %d %q) but %s; logs:\n%s", i, code, strings.TrimSpace(body), what, tail(p.logs.String(), 20))
		}
	}
}

// c13bSameHost starts `exactly cmds[i] --topology topos[i]` for each i,
// all with the instance ID c13b-host and each with a metrics address of
// its own, and waits until they are ready. It then produces 20 events to
// each of ins in each of 5 rounds, 3 s apart: the input arrives over 15 s,
// as in production, so that the clash shows at a rejoin. Last it requires
// of each process i, within 30 s: done[i], or an exit non-zero naming name.
func c13bSameHost(t *testing.T, name string, cmds, topos, ins []string, done []func() (bool, string)) {
	t.Helper()
	var procs []*proc
	var addrs []string
	for i, topo := range topos {
		addr := freeAddr(t)
		procs = append(procs, start(t, nil, cmds[i], "--topology", topo, "--instance-id", "c13b-host", "--metrics-addr="+addr))
		addrs = append(addrs, addr)
	}
	c13bAwaitReady(t, procs, addrs)
	for round := range 5 {
		for i, in := range ins {
			kcatProduce(t, in, c13Events(fmt.Sprintf("f%d-r%d", i, round), 0, 20, 0))
		}
		time.Sleep(3 * time.Second) // pacing the input, not awaiting a condition
	}
	c13bBothOrExit(t, name, 30*time.Second, procs, addrs, done)
}

// c13bAllOutput is a check for c13bSameHost: the stage writing out has
// output all 100 events c13bSameHost produced to its input.
func c13bAllOutput(t *testing.T, out string) func() (bool, string) {
	return func() (bool, string) {
		n := len(keyCounts(t, out))
		return n == 100, fmt.Sprintf("%s has %d of 100 outputs", out, n)
	}
}

// c13bAllLoaded is a check for c13bSameHost: the sink loading table has
// loaded all 100 events c13bSameHost produced to its input.
func c13bAllLoaded(t *testing.T, pool *pgxpool.Pool, table string) func() (bool, string) {
	return func() (bool, string) {
		n, _ := c13Rows(t, pool, table)
		return n == 100, fmt.Sprintf("%s has %d of 100 rows", table, n)
	}
}

// c13bAwaitReady waits up to 30 s for every process to be ready (or to
// have exited); one that is not is reported by the checks that follow.
func c13bAwaitReady(t *testing.T, procs []*proc, addrs []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i, a := range addrs {
		for time.Now().Before(deadline) && !procs[i].exited() {
			if code, _ := get(t, "http://"+a+"/readyz"); code == http.StatusOK {
				break
			}
			time.Sleep(100 * time.Millisecond) // polling an external process
		}
	}
}

// Two teams name their stage alike in two files with different topics; both
// run on one host with the same instance ID (the default is the hostname).
// Today the first stage is fenced out of group exactly-<name> and outputs
// nothing while /readyz says ready.
func TestC13bSameStageNameTwoFiles(t *testing.T) {
	name := uniqueName("c13bsn")
	var topos, ins []string
	var done []func() (bool, string)
	for i := range 2 {
		in, out, dlq := uniqueName(fmt.Sprintf("c13bsn%d_in", i)), uniqueName(fmt.Sprintf("c13bsn%d_out", i)), uniqueName(fmt.Sprintf("c13bsn%d_dlq", i))
		topos = append(topos, c13Topology(t, []c13Topic{{name: in, parts: 2}, {name: out, parts: 2}, {name: dlq, parts: 1}},
			"stages:\n"+c13Stage(name, in, out, dlq, "100ms", 1000)))
		ins, done = append(ins, in), append(done, c13bAllOutput(t, out))
	}
	c13bSameHost(t, name, []string{"run", "run"}, topos, ins, done)
}

// A sink named alike in two files that read different topics into
// different tables (both valid alone), one host, one instance ID. The
// README's check of "one name, two tables" looks at one topic; here the
// topics differ. Today one sink is fenced and loads nothing.
func TestC13bSameSinkNameTwoFilesDifferentTopics(t *testing.T) {
	pool := pgPool(t)
	schema := c13Schema(t, pool, "c13bsk")
	name := uniqueName("c13bsk")
	var topos, ins []string
	var done []func() (bool, string)
	for i := range 2 {
		in, dlq := uniqueName(fmt.Sprintf("c13bsk%d_in", i)), uniqueName(fmt.Sprintf("c13bsk%d_dlq", i))
		table := fmt.Sprintf("%s.t%d", schema, i)
		topos = append(topos, c13Topology(t, []c13Topic{{name: in, parts: 2}, {name: dlq, parts: 1}},
			"sinks:\n"+c13Sink(name, in, dlq, table, "", "{ event_id: event_id, body: $value }", "")))
		ins, done = append(ins, in), append(done, c13bAllLoaded(t, pool, table))
	}
	c13bSameHost(t, name, []string{"sink", "sink"}, topos, ins, done)
}

// A stage named "sink-<x>" in one file and a sink named "<x>" in another,
// both reading one topic: both use consumer group exactly-sink-<x> (one file
// holding both is rejected by validate; two files are not). Today one of
// them is fenced out and processes nothing more, /readyz ready.
func TestC13bStageAndSinkShareAGroupAcrossFiles(t *testing.T) {
	pool := pgPool(t)
	schema := c13Schema(t, pool, "c13bgrp")
	x := uniqueName("c13bgrp")
	in, out, dlq := uniqueName("c13bgrp_in"), uniqueName("c13bgrp_out"), uniqueName("c13bgrp_dlq")
	topics := []c13Topic{{name: in, parts: 4}, {name: out, parts: 2}, {name: dlq, parts: 1}}
	stageTopo := c13Topology(t, topics, "stages:\n"+c13Stage("sink-"+x, in, out, dlq, "100ms", 1000))
	sinkTopo := c13Topology(t, topics, "sinks:\n"+c13Sink(x, in, dlq, schema+".events", "", "{ event_id: event_id, body: $value }", ""))
	c13bSameHost(t, x, []string{"run", "sink"}, []string{stageTopo, sinkTopo}, []string{in},
		[]func() (bool, string){c13bAllOutput(t, out), c13bAllLoaded(t, pool, schema+".events")})
}
