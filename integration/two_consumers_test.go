//go:build integration

package integration

// Two consumers never share a position. Two sinks on one topic, a sink
// added later, two stages on one input, one name in two files on one
// host; and a positions table keeps working across a restart and in the
// legacy format.

import (
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// One topology file with two sinks
// reading one topic (2 partitions, 200 events) into two tables (one named
// in mixed case), with the default positions_table, so that both keep
// their positions in one table. Each table gets all 200 rows, and
// `exactly verify` finds nothing missing.
func TestTwoSinksOneTopic(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "nb3")
	in, dlq := "dotted.in_"+uniqueName("t"), uniqueName("nb3_dlq")
	a, b := uniqueName("s3a"), uniqueName("s3b")
	cols := "{ event_id: event_id, body: $value }"
	topo := userTopology(t, []fileTopic{{name: in, parts: 2}, {name: dlq, parts: 1}}, "sinks:\n"+
		jsonSinkItem(a, in, dlq, schema+".MixedCase", "", cols, "")+jsonSinkItem(b, in, dlq, schema+".copy_b", "", cols, ""))
	kcatProduce(t, in, eventLines("e", 0, 200, 0))
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "i-1", "--log-level", "info")
	waitRows(t, pool, schema+`."MixedCase"`, 200, 45*time.Second, p)
	waitRows(t, pool, schema+".copy_b", 200, 45*time.Second, p)
	if out, err := exec.Command(exactlyBin, "verify", "--topology", topo, "--event-id", "event_id").CombinedOutput(); err != nil {
		t.Errorf("exactly verify: %v\n%s", err, out)
	}
	p.stop()
}

// A sink added later to a topic that another sink (same positions table)
// has already loaded loads everything from the start; the first sink
// loads nothing twice; both then follow new records.
func TestSinkAddedLater(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "later")
	in, dlq := uniqueName("later_in"), uniqueName("later_dlq")
	a, b := uniqueName("first"), uniqueName("second")
	cols := "{ event_id: event_id, body: $value }"
	topics := []fileTopic{{name: in, parts: 2}, {name: dlq, parts: 1}}
	one := userTopology(t, topics, "sinks:\n"+jsonSinkItem(a, in, dlq, schema+".first", "", cols, ""))
	kcatProduce(t, in, eventLines("e", 0, 200, 0))
	p := start(t, nil, "sink", "--topology", one, "--instance-id", "i-1", "--log-level", "info")
	waitRows(t, pool, schema+".first", 200, 45*time.Second, p)
	p.stop()

	two := userTopology(t, topics, "sinks:\n"+jsonSinkItem(a, in, dlq, schema+".first", "", cols, "")+jsonSinkItem(b, in, dlq, schema+".second", "", cols, ""))
	p = start(t, nil, "sink", "--topology", two, "--instance-id", "i-1", "--log-level", "info")
	kcatProduce(t, in, eventLines("e", 200, 20, 0))
	waitRows(t, pool, schema+".second", 220, 45*time.Second, p)
	waitRows(t, pool, schema+".first", 220, 45*time.Second, p)
	p.stop()
}

// Two stages of one file read the same input topic: each writes every
// record to its own output, once.
func TestTwoStagesOneInput(t *testing.T) {
	in, dlq := uniqueName("two_in"), uniqueName("two_dlq")
	s1, s2 := uniqueName("two_a"), uniqueName("two_b")
	topo := userTopology(t, []fileTopic{{name: in, parts: 3}, {name: s1 + "_out", parts: 2}, {name: s2 + "_out", parts: 2}, {name: dlq, parts: 1}},
		"stages:\n"+jsonStageItem(s1, in, s1+"_out", dlq, "100ms", 10000)+jsonStageItem(s2, in, s2+"_out", dlq, "100ms", 10000))
	lines := eventLines("e", 0, 300, 0)
	kcatProduce(t, in, lines)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "i-1", "--log-level", "info")
	ends := committedEnds(t, in)
	for _, s := range []string{s1, s2} {
		st := refusedStage{name: s, in: in, out: s + "_out", dlq: dlq}
		st.waitCommitted(t, ends, 45*time.Second)
		st.checkOutputs(t, "exactly-once", keysOf(lines))
	}
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%d dead letters, want 0", n)
	}
	p.stop()
}

// One sink name in two topology files (two teams, say), each writing its
// own table in one schema, so with the same default positions table and
// the same consumer group. No file on its own is wrong, so validate
// cannot see it. What is acceptable: each table gets every row, or a
// process stops (exit status not 0) with an error that names the sink.
// What is not: a process that runs on while its table misses rows.
func TestSameSinkNameTwoFiles(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "same")
	in, dlq, name := uniqueName("same_in"), uniqueName("same_dlq"), uniqueName("same")
	cols := "{ event_id: event_id, body: $value }"
	topics := []fileTopic{{name: in, parts: 4}, {name: dlq, parts: 1}}
	fa := userTopology(t, topics, "sinks:\n"+jsonSinkItem(name, in, dlq, schema+".team_a", "", cols, ""))
	fb := userTopology(t, topics, "sinks:\n"+jsonSinkItem(name, in, dlq, schema+".team_b", "", cols, ""))
	kcatProduce(t, in, eventLines("e", 0, 100, 0))
	pa := start(t, nil, "sink", "--topology", fa, "--instance-id", "i-a", "--log-level", "info")
	pb := start(t, nil, "sink", "--topology", fb, "--instance-id", "i-b", "--log-level", "info")
	settled := func(p *proc, table string) bool {
		if p.exited() {
			return true
		}
		n, _ := tableCounts(t, pool, table)
		return n == 100
	}
	eventually(t, 45*time.Second, func() bool { return settled(pa, schema+".team_a") && settled(pb, schema+".team_b") },
		func() string {
			na, _ := tableCounts(t, pool, schema+".team_a")
			nb, _ := tableCounts(t, pool, schema+".team_b")
			return fmt.Sprintf("team_a %d rows (exited %v), team_b %d rows (exited %v); want 100 each, or an exit naming the sink", na, pa.exited(), nb, pb.exited())
		})
	for _, c := range []struct {
		p     *proc
		table string
	}{{pa, schema + ".team_a"}, {pb, schema + ".team_b"}} {
		n, d := tableCounts(t, pool, c.table)
		if c.p.exited() {
			if c.p.err == nil || !strings.Contains(c.p.logs.String(), name) {
				t.Errorf("%s: the process exited (%v) without an error naming sink %s:\n%s", c.table, c.p.err, name, tail(c.p.logs.String(), 20))
			}
			t.Logf("%s: process stopped (%v) with %d rows", c.table, c.p.err, n)
			continue
		}
		if n != 100 || d != 100 {
			t.Errorf("%s: %d rows, %d distinct; want 100", c.table, n, d)
		}
	}
}

// A positions table keeps working across a restart: the sink runs,
// stops, and runs again on the same table; it does not load again what
// it loaded (no row written twice, none counted as a duplicate), and
// loads what came in between and after.
func TestPositionsTableRunStopRun(t *testing.T) {
	pool := pgPool(t)
	c := newLoadSink(t, pool, "rerun", 3, "{ event_id: event_id, body: $value }", "", nil)
	c.loadOnce(t, pool, "i-1", eventLines("e", 0, 100, 0), 100)

	kcatProduce(t, c.in, eventLines("e", 100, 50, 0))
	addr := freeAddr(t)
	p := c.run(t, "i-1", addr)
	kcatProduce(t, c.in, eventLines("e", 150, 50, 0))
	c.waitLoaded(t, pool, 200, 45*time.Second, p)
	lbl := map[string]string{"sink": c.name}
	m := scrape(t, addr)
	if v, _ := sum(m, "exactly_sink_rows_written_total", lbl); v != 100 {
		t.Errorf("second run: rows_written_total %v, want 100 (only the new records)", v)
	}
	if v, _ := sum(m, "exactly_sink_rows_duplicate_total", lbl); v != 0 {
		t.Errorf("second run: rows_duplicate_total %v, want 0 (nothing read again)", v)
	}
	p.stop()
}

// A positions table in the legacy format (legacyPositionsDDL: keyed by
// topic and partition only), holding a position that says the first 100
// records are loaded: the sink migrates it, keeping its rows, and resumes
// from there. It loads the records after the stored positions and none
// before.
func TestPositionsTableLegacyFormat(t *testing.T) {
	pool := pgPool(t)
	c := newLoadSink(t, pool, "old", 1, "{ event_id: event_id, body: $value }", "", func(schema string) {
		pgExec(t, pool, fmt.Sprintf(legacyPositionsDDL, schema+".exactly_positions"))
		pgExec(t, pool, `CREATE TABLE `+schema+`.events (event_id text PRIMARY KEY, body jsonb)`)
	})
	kcatProducePartition(t, c.in, 0, eventLines("old", 0, 100, 0))
	pgExec(t, pool, fmt.Sprintf(`INSERT INTO %s.exactly_positions (topic, partition, next_offset, owner) VALUES ('%s', 0, 100, 'i-old')`, c.schema, c.in))
	kcatProducePartition(t, c.in, 0, eventLines("new", 0, 30, 0))
	p := c.run(t, "i-1", "")
	waitRows(t, pool, c.table, 30, 45*time.Second, p)
	eventually(t, 30*time.Second, func() bool { return storedPositions(t, pool, c.schema+".exactly_positions", c.in)[0] == 130 },
		func() string {
			return fmt.Sprintf("positions %v, want partition 0 at 130", storedPositions(t, pool, c.schema+".exactly_positions", c.in))
		})
	if n := pgInt(t, pool, "SELECT count(*) FROM "+c.table+" WHERE event_id LIKE 'old-%'"); n != 0 {
		t.Errorf("%d records before the stored position were loaded again", n)
	}
	p.stop()
}

// A stage's and a sink's consumer group and static member ID come from
// their names and the instance ID, so two files that name things alike
// (each valid alone) put two unrelated consumers in one group under one
// group.instance.id: the broker fences one of them (FENCED_INSTANCE_ID) and
// it processes nothing more while /readyz says ready. Accepted: every
// consumer processes all its records, or a process exits non-zero with an
// error naming the clash. Rejected: a consumer that runs on, ready, while
// its records are not processed.

// eachDoneOrExit waits until each check reports done or its process has
// exited, then requires of each: done, or exited non-zero naming name.
func eachDoneOrExit(t *testing.T, name string, timeout time.Duration, procs []*proc, addrs []string, done []func() (bool, string)) {
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

// runSameHost starts `exactly cmds[i] --topology topos[i]` for each i,
// all with the instance ID i-host and each with a metrics address of
// its own, and waits until they are ready. It then produces 20 events to
// each of ins in each of 5 rounds, 3 s apart: the input arrives over 15 s,
// as in production, so that the clash shows at a rejoin. Last it requires
// of each process i, within 30 s: done[i], or an exit non-zero naming name.
func runSameHost(t *testing.T, name string, cmds, topos, ins []string, done []func() (bool, string)) {
	t.Helper()
	var procs []*proc
	var addrs []string
	for i, topo := range topos {
		addr := freeAddr(t)
		procs = append(procs, start(t, nil, cmds[i], "--topology", topo, "--instance-id", "b-host", "--metrics-addr="+addr))
		addrs = append(addrs, addr)
	}
	awaitReadyAll(t, procs, addrs)
	for round := range 5 {
		for i, in := range ins {
			kcatProduce(t, in, eventLines(fmt.Sprintf("f%d-r%d", i, round), 0, 20, 0))
		}
		time.Sleep(3 * time.Second) // pacing the input, not awaiting a condition
	}
	eachDoneOrExit(t, name, 30*time.Second, procs, addrs, done)
}

// allOutput is a check for runSameHost: the stage writing out has
// output all 100 events runSameHost produced to its input.
func allOutput(t *testing.T, out string) func() (bool, string) {
	return func() (bool, string) {
		n := len(keyCounts(t, out))
		return n == 100, fmt.Sprintf("%s has %d of 100 outputs", out, n)
	}
}

// allLoaded is a check for runSameHost: the sink loading table has
// loaded all 100 events runSameHost produced to its input.
func allLoaded(t *testing.T, pool *pgxpool.Pool, table string) func() (bool, string) {
	return func() (bool, string) {
		n, _ := tableCounts(t, pool, table)
		return n == 100, fmt.Sprintf("%s has %d of 100 rows", table, n)
	}
}

// awaitReadyAll waits up to 30 s for every process to be ready (or to
// have exited); one that is not is reported by the checks that follow.
func awaitReadyAll(t *testing.T, procs []*proc, addrs []string) {
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
// Neither may sit fenced out of group exactly-<name>, outputting nothing
// while /readyz says ready.
func TestSameStageNameTwoFiles(t *testing.T) {
	name := uniqueName("sn")
	var topos, ins []string
	var done []func() (bool, string)
	for i := range 2 {
		in, out, dlq := uniqueName(fmt.Sprintf("sn%d_in", i)), uniqueName(fmt.Sprintf("sn%d_out", i)), uniqueName(fmt.Sprintf("sn%d_dlq", i))
		topos = append(topos, userTopology(t, []fileTopic{{name: in, parts: 2}, {name: out, parts: 2}, {name: dlq, parts: 1}},
			"stages:\n"+jsonStageItem(name, in, out, dlq, "100ms", 1000)))
		ins, done = append(ins, in), append(done, allOutput(t, out))
	}
	runSameHost(t, name, []string{"run", "run"}, topos, ins, done)
}

// A sink named alike in two files that read different topics into
// different tables (both valid alone), one host, one instance ID. The
// README's check of "one name, two tables" looks at one topic; here the
// topics differ. Neither sink may sit fenced, loading nothing.
func TestSameSinkNameTwoFilesDifferentTopics(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "sk")
	name := uniqueName("sk")
	var topos, ins []string
	var done []func() (bool, string)
	for i := range 2 {
		in, dlq := uniqueName(fmt.Sprintf("sk%d_in", i)), uniqueName(fmt.Sprintf("sk%d_dlq", i))
		table := fmt.Sprintf("%s.t%d", schema, i)
		topos = append(topos, userTopology(t, []fileTopic{{name: in, parts: 2}, {name: dlq, parts: 1}},
			"sinks:\n"+jsonSinkItem(name, in, dlq, table, "", "{ event_id: event_id, body: $value }", "")))
		ins, done = append(ins, in), append(done, allLoaded(t, pool, table))
	}
	runSameHost(t, name, []string{"sink", "sink"}, topos, ins, done)
}

// A stage named "sink-<x>" in one file and a sink named "<x>" in another,
// both reading one topic: both use consumer group exactly-sink-<x> (one file
// holding both is rejected by validate; two files are not). Neither may
// sit fenced out, processing nothing more while /readyz says ready.
func TestStageAndSinkShareAGroupAcrossFiles(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "grp")
	x := uniqueName("grp")
	in, out, dlq := uniqueName("grp_in"), uniqueName("grp_out"), uniqueName("grp_dlq")
	topics := []fileTopic{{name: in, parts: 4}, {name: out, parts: 2}, {name: dlq, parts: 1}}
	stageTopo := userTopology(t, topics, "stages:\n"+jsonStageItem("sink-"+x, in, out, dlq, "100ms", 1000))
	sinkTopo := userTopology(t, topics, "sinks:\n"+jsonSinkItem(x, in, dlq, schema+".events", "", "{ event_id: event_id, body: $value }", ""))
	runSameHost(t, x, []string{"run", "sink"}, []string{stageTopo, sinkTopo}, []string{in},
		[]func() (bool, string){allOutput(t, out), allLoaded(t, pool, schema+".events")})
}
