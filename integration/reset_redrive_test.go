//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Operating a pipeline over its lifetime: reset, the resume
// guard and redrive, against the real broker and Postgres; outputs are read
// back with kcat (read_committed) and psql-free SQL counts.

// produceTimed writes events e-from..e-(from+n-1) (keyed by event ID) to
// topic with record timestamp at, so that a reset to a time has an exact
// boundary.
func produceTimed(t testing.TB, topic string, from, n int, at time.Time) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, 0, n)
	for i := from; i < from+n; i++ {
		recs = append(recs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "e-%d", i),
			Value: fmt.Appendf(nil, `{"event_id":"e-%d","n":%d}`, i, i), Timestamp: at})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// adminClient returns an admin client for the test's checks of group offsets.
func adminClient(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// groupOffsetResponses returns the committed offsets (and their metadata) of group
// for topic.
func groupOffsetResponses(t testing.TB, group, topic string) map[int32]kadm.OffsetResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adminClient(t).FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	out := map[int32]kadm.OffsetResponse{}
	resp.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.At >= 0 {
			out[o.Partition] = o
		}
	})
	return out
}

// exactlyExit runs exactly to completion and returns its exit code and
// combined output.
func exactlyExit(t testing.TB, env []string, args ...string) (int, string) {
	t.Helper()
	p := start(t, env, args...)
	err := p.wait(3 * time.Minute)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, p.logs.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), p.logs.String()
	}
	t.Fatalf("exactly %s: %v", strings.Join(args, " "), err)
	return 0, ""
}

// keyCountsTotal counts the records of topic by key, read_committed with kcat.
func keyCountsTotal(t testing.TB, topic string) (map[string]int, int) {
	t.Helper()
	recs := kcatRead(t, topic)
	out := map[string]int{}
	for _, r := range recs {
		out[r.Key]++
	}
	return out, len(recs)
}

// TestResetStageToTime: 1,000 events, half of them an hour later than the
// others; the stage processes them all and stops; a reset to the time in
// between (dry run first, then --execute) and a second run add exactly the
// later half again. A reset while the stage runs refuses and changes
// nothing.
func TestResetStageToTime(t *testing.T) {
	t.Parallel()
	st := stageSpec{name: uniqueName("reset"), in: uniqueName("rin"), out: uniqueName("rout"), dlq: uniqueName("rdlq")}
	topo := topologyFile(t, []stageSpec{st}, "100ms", "10s", 500)
	exactlyCmd(t, "topics", "create", topo)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	produceTimed(t, st.in, 0, 500, base)
	produceTimed(t, st.in, 500, 500, base.Add(time.Hour))
	mid := base.Add(30 * time.Minute).UTC().Format(time.RFC3339)

	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, st.out) == 1000 }, func() string { return "first run did not write 1000 outputs" })

	// While it runs: refused, nothing changed.
	before := groupOffsetResponses(t, "exactly-"+st.name, st.in)
	code, out := exactlyExit(t, nil, "reset", "--topology", topo, "--stage", st.name, "--to-earliest", "--execute")
	if code != 1 || !strings.Contains(out, "live members") {
		t.Fatalf("reset with a live member: exit %d, want 1 naming live members:\n%s", code, out)
	}
	if after := groupOffsetResponses(t, "exactly-"+st.name, st.in); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a refused reset changed the offsets: %v -> %v", before, after)
	}
	p.stop()

	// Dry run: the plan, nothing changed.
	code, out = exactlyExit(t, nil, "reset", "--topology", topo, "--stage", st.name, "--to-datetime", mid)
	if code != 0 || !strings.Contains(out, "dry run: nothing changed") || !strings.Contains(out, "PARTITION  CURRENT") {
		t.Fatalf("dry run: exit %d:\n%s", code, out)
	}
	if after := groupOffsetResponses(t, "exactly-"+st.name, st.in); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a dry run changed the offsets: %v -> %v", before, after)
	}
	code, out = exactlyExit(t, nil, "reset", "--topology", topo, "--stage", st.name, "--to-datetime", mid, "--execute")
	if code != 0 || !strings.Contains(out, "done: reset 3 partitions") {
		t.Fatalf("reset: exit %d:\n%s", code, out)
	}
	for p, o := range groupOffsetResponses(t, "exactly-"+st.name, st.in) {
		if !strings.HasPrefix(o.Metadata, "exactly/v1 topic_id=") || len(o.Metadata) != len("exactly/v1 topic_id=")+32 {
			t.Errorf("partition %d: commit metadata %q, want the stage's exactly/v1 topic_id=<hex>", p, o.Metadata)
		}
	}

	p = start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, st.out) >= 1500 }, func() string {
		return fmt.Sprintf("second run: %d outputs, want 1500", kcatCount(t, st.out))
	})
	p.stop()
	counts, n := keyCountsTotal(t, st.out)
	if n != 1500 {
		t.Fatalf("%s: %d outputs, want 1500", st.out, n)
	}
	for i := range 1000 {
		want := 1
		if i >= 500 {
			want = 2 // replayed from the reset time on
		}
		if got := counts["e-"+strconv.Itoa(i)]; got != want {
			t.Fatalf("event e-%d appears %d times, want %d", i, got, want)
		}
	}
}

// TestResetSinkToTime: the same for a sink: its positions move back, the
// replay reaches Postgres, and the table keeps one row per event ID.
func TestResetSinkToTime(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("sreset")
	topo := sinkTopology(t, s)
	pool := pgPool(t)
	base := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	produceTimed(t, s.in, 0, 500, base)
	produceTimed(t, s.in, 500, 500, base.Add(time.Hour))
	mid := base.Add(30 * time.Minute)

	p := startSink(t, topo, "a")
	waitSinkDone(t, pool, s, 1000, 2*time.Minute)
	p.stop()
	ends := storedPositions(t, pool, s.positions(), s.in)

	code, out := exactlyExit(t, nil, "reset", "--topology", topo, "--sink", s.name, "--to-datetime", mid.UTC().Format(time.RFC3339), "--execute")
	if code != 0 || !strings.Contains(out, "done: reset 3 partitions of sink") {
		t.Fatalf("reset: exit %d:\n%s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	listed, err := adminClient(t).ListOffsetsAfterMilli(ctx, mid.UnixMilli(), s.in)
	if err != nil {
		t.Fatal(err)
	}
	reset := storedPositions(t, pool, s.positions(), s.in)
	replay := int64(0)
	for part, end := range ends {
		o, _ := listed.Lookup(s.in, part)
		if reset[part] != o.Offset {
			t.Errorf("partition %d: stored position %d after the reset, want %d (first record at or after %s)", part, reset[part], o.Offset, mid)
		}
		replay += end - reset[part]
	}
	if replay < 500 {
		t.Fatalf("the reset moved positions back over %d offsets, want at least the 500 later events", replay)
	}

	p = startSink(t, topo, "a")
	waitSinkDone(t, pool, s, 1000, 2*time.Minute)
	p.stop()
	if rows, distinct := rowStats(t, pool, s.table()); rows != 1000 || distinct != 1000 {
		t.Fatalf("%s: %d rows, %d distinct event IDs; want 1000 and 1000", s.table(), rows, distinct)
	}
}

// guardFirstRun makes a stage (names from prefix) and its topics, and
// runs it over 1,000 events, 10 of them dead-lettered, to the end.
func guardFirstRun(t *testing.T, prefix string) (stageSpec, string) {
	t.Helper()
	st := stageSpec{name: uniqueName(prefix), in: uniqueName(prefix + "_in"), out: uniqueName(prefix + "_out"), dlq: uniqueName(prefix + "_dlq")}
	topo := topologyFile(t, []stageSpec{st}, "100ms", "10s", 500)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, st.in, crashInput(1000, 10))
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, st.out) == 1000 && kcatCount(t, st.dlq) == 10 }, func() string { return "first run did not finish" })
	p.stop()
	return st, topo
}

// TestResumeGuardAfterGroupDeleted: 1,000 events processed, the group
// deleted (as offsets.retention.minutes would); the next run refuses,
// naming exactly reset, and processes nothing again. After the reset it
// names (--to-latest here), the stage runs and adds nothing.
func TestResumeGuardAfterGroupDeleted(t *testing.T) {
	t.Parallel()
	st, topo := guardFirstRun(t, "guard")

	deleteGroup(t, "exactly-"+st.name)

	guardRefusal(t, st, topo, 1000, "exactly reset --stage "+st.name)
	guardResumeOne(t, st, topo, st.name, "--to-latest")
}

// deleteGroup deletes consumer group g, as offsets.retention.minutes
// would once it is empty.
func deleteGroup(t *testing.T, g string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adminClient(t).DeleteGroups(ctx, g)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete group %s: %v", g, err)
	}
}

// guardRefusal runs the stage of topo and requires the resume guard's
// refusal, its message holding each of says, with st's output still
// holding want records (read_uncommitted: nothing written again). It
// returns the output.
func guardRefusal(t *testing.T, st stageSpec, topo string, want int, says ...string) string {
	t.Helper()
	code, out := exactlyExit(t, nil, "run", "--topology", topo, "--instance-id", "a", "--metrics-addr=")
	if code == 0 || !strings.Contains(out, "no committed offsets") {
		t.Fatalf("exit %d, want the resume guard's refusal:\n%s", code, tail(out, 20))
	}
	for _, s := range says {
		if !strings.Contains(out, s) {
			t.Fatalf("the refusal does not say %q:\n%s", s, tail(out, 20))
		}
	}
	if n := kcatCountUncommitted(t, st.out); n != want {
		t.Fatalf("%s holds %d records (read_uncommitted) after the refusal, want %d: something was processed again", st.out, n, want)
	}
	return out
}

// guardResumeOne resets stage of topo with reset (as exactly reset
// arguments), runs it, and requires one new event to be its only new
// output: st's output then holds its 1,000 events and e-1000, once each.
func guardResumeOne(t *testing.T, st stageSpec, topo, stage string, reset ...string) {
	t.Helper()
	exactlyCmd(t, append([]string{"reset", "--topology", topo, "--stage", stage}, append(reset, "--execute")...)...)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, time.Minute, func() bool { return strings.Contains(p.logs.String(), "partitions assigned") }, func() string { return "the stage did not start after the reset" })
	kcatProduce(t, st.in, [][]byte{[]byte(`k-x|{"event_id":"e-1000","n":1000}`)})
	eventually(t, time.Minute, func() bool { return kcatCount(t, st.out) == 1001 }, func() string {
		return fmt.Sprintf("%s: %d outputs, want 1001 (the old 1000 and one new)", st.out, kcatCount(t, st.out))
	})
	p.stop()
	checkOutput(t, st.out, 1001)
}

// TestResumeGuardAfterStageRenamed: 1,000 events processed, then the
// stage renamed in the file (its group is exactly-<stage>: a new, empty
// group). The renamed stage refuses, naming the old stage and the offsets
// to resume after, and does not write the 1,000 again. After the reset it
// names, new events are processed once.
func TestResumeGuardAfterStageRenamed(t *testing.T) {
	t.Parallel()
	st, _ := guardFirstRun(t, "ren")

	renamed := st
	renamed.name = uniqueName("ren_v2")
	topo2 := topologyFile(t, []stageSpec{renamed}, "100ms", "10s", 500)
	out := guardRefusal(t, st, topo2, 1000, `renamed from \"`+st.name+`\"`)
	m := regexp.MustCompile(`--to-offsets ([0-9=,]+) --execute`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the refusal names no --to-offsets:\n%s", tail(out, 20))
	}
	guardResumeOne(t, st, topo2, renamed.name, "--to-offsets", m[1])
}

// TestResumeGuardAfterInputRecreated: 1,000 events processed, the input
// topic deleted and created again (Kafka deletes the group's offsets),
// 30 events of the new topic processed, then the group deleted. The
// outputs of the old topic carry higher source offsets than the new one
// holds; the guard still finds the new topic's outputs below them and
// refuses, rather than start every partition at its earliest offset and
// write the 30 again.
func TestResumeGuardAfterInputRecreated(t *testing.T) {
	t.Parallel()
	st, topo := guardFirstRun(t, "rec")
	recreateTopic(t, st.in, 3)
	var lines [][]byte
	for i := range 30 {
		lines = append(lines, fmt.Appendf(nil, `k-n%d|{"event_id":"n-%d","n":%d}`, i, i, i))
	}
	kcatProduce(t, st.in, lines)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, st.out) == 1030 }, func() string {
		return fmt.Sprintf("%s: %d outputs, want 1030", st.out, kcatCount(t, st.out))
	})
	p.stop()
	deleteGroup(t, "exactly-"+st.name)
	out := guardRefusal(t, st, topo, 1030)
	// The offsets it names are after the new topic's 30 records.
	m := regexp.MustCompile(`--to-offsets ([0-9=,]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the refusal names no --to-offsets:\n%s", tail(out, 20))
	}
	total := 0
	for _, po := range strings.Split(m[1], ",") {
		_, o, _ := strings.Cut(po, "=")
		n, _ := strconv.Atoi(o)
		total += n
	}
	if total != 30 {
		t.Errorf("--to-offsets %s: %d records in all, want the new topic's 30", m[1], total)
	}
}

// TestRedriveExactlyOnce: a transform dead-letters 10 of 100 records; the
// transform is fixed and the fixed stage runs; redrive is killed at
// crash-before-commit@1 and run again. The input topic gains each of the
// 10 exactly once, and the fixed stage writes them: every event once.
func TestRedriveExactlyOnce(t *testing.T) {
	t.Parallel()
	name, in, out, dlq := uniqueName("redrive"), uniqueName("din"), uniqueName("dout"), uniqueName("ddlq")
	topology := func(expr string) string {
		return stagesTopology{txnTimeout: "10s", stages: []stageYAML{{
			name: name, in: in, out: out, dlq: dlq, key: "event_id", interval: "100ms", maxRecords: 500,
			transform: fmt.Sprintf("- name: extra\n  set: { x: %q }", expr),
		}}}.write(t)
	}
	broken := topology("value.extra.x")
	exactlyCmd(t, "topics", "create", broken)
	kcatProduce(t, in, extraRecords(100))
	runBroken(t, "broken stage", broken, out, dlq, 90, 10)

	fixed := topology("has(value.extra) ? value.extra.x : 0")
	p := start(t, nil, "run", "--topology", fixed, "--instance-id", "a")

	crash := start(t, []string{"EXACTLY_FAILPOINT=crash-before-commit@1"}, "redrive", "--topology", fixed, "--stage", name)
	_ = crash.wait(2 * time.Minute)
	if !crash.killedBySIGKILL() {
		t.Fatalf("redrive was not killed at the failpoint:\n%s", crash.logs.String())
	}
	code, report := exactlyExit(t, nil, "redrive", "--topology", fixed, "--stage", name)
	if code != 0 || !strings.Contains(report, "10 read, 10 redriven") {
		t.Fatalf("redrive after the crash: exit %d:\n%s", code, report)
	}

	recs := kcatRead(t, in)
	if len(recs) != 110 {
		t.Fatalf("%s: %d records, want 110 (100 and each of the 10 redriven once)", in, len(recs))
	}
	redriven := map[string]int{}
	for _, r := range recs {
		if c, ok := r.Headers[deadletter.HeaderRedriveCount]; ok {
			if c != "1" {
				t.Errorf("%s: record %s has %s=%s, want 1", in, r.Key, deadletter.HeaderRedriveCount, c)
			}
			redriven[r.Key]++
		}
	}
	for i := 0; i < 100; i += 10 {
		if k := "e-" + strconv.Itoa(i); redriven[k] != 1 {
			t.Errorf("%s: %s redriven %d times, want 1", in, k, redriven[k])
		}
	}
	if len(redriven) != 10 {
		t.Fatalf("redriven records: %v, want the 10 dead letters", redriven)
	}

	// The fixed stage reads them: every event once, no new dead letter.
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == 100 }, func() string {
		return fmt.Sprintf("%s: %d outputs, want 100", out, kcatCount(t, out))
	})
	p.stop()
	checkOutput(t, out, 100)
	if n := kcatCount(t, dlq); n != 10 {
		t.Fatalf("%s: %d dead letters after the redrive, want the 10 of before", dlq, n)
	}

	// Done once: a second redrive finds nothing new.
	code, report = exactlyExit(t, nil, "redrive", "--topology", fixed, "--stage", name)
	if code != 0 || !strings.Contains(report, "0 read, 0 redriven") {
		t.Fatalf("second redrive: exit %d:\n%s", code, report)
	}
	if n := kcatCount(t, in); n != 110 {
		t.Fatalf("%s: %d records after a second redrive, want 110", in, n)
	}
}

// A redrive of a second stage's dead letters writes them to the first
// stage's output topic. They are not the first stage's outputs: redrive
// leaves out its lineage headers, and exactly verify finds no loss and no
// duplicate in either stage (it counted each as a duplicate output of the
// first stage when the headers were kept).
func TestRedriveSecondStageVerifies(t *testing.T) {
	t.Parallel()
	first, second := uniqueName("rd1"), uniqueName("rd2")
	raw, mid, out := uniqueName("rdraw"), uniqueName("rdmid"), uniqueName("rdout")
	dlq1, dlq2 := uniqueName("rddlq1"), uniqueName("rddlq2")
	topology := func(expr string) string {
		return stagesTopology{txnTimeout: "10s", stages: []stageYAML{
			{name: first, in: raw, out: mid, dlq: dlq1, key: "event_id", interval: "100ms", maxRecords: 500},
			{name: second, in: mid, out: out, dlq: dlq2, key: "event_id", interval: "100ms", maxRecords: 500,
				transform: fmt.Sprintf("- name: extra\n  set: { x: %q }", expr)},
		}}.write(t)
	}
	broken := topology("value.extra.x")
	exactlyCmd(t, "topics", "create", broken)
	kcatProduce(t, raw, extraRecords(50)) // the second stage fails on those without extra
	runBroken(t, "broken second stage", broken, out, dlq2, 45, 5)

	fixed := topology("has(value.extra) ? value.extra.x : 0")
	p := start(t, nil, "run", "--topology", fixed, "--instance-id", "a")
	if code, report := exactlyExit(t, nil, "redrive", "--topology", fixed, "--stage", second); code != 0 || !strings.Contains(report, "5 read, 5 redriven") {
		t.Fatalf("redrive: exit %d:\n%s", code, report)
	}
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == 50 }, func() string {
		return fmt.Sprintf("%s: %d outputs, want 50", out, kcatCount(t, out))
	})
	p.stop()
	checkOutput(t, out, 50)
	for _, r := range kcatRead(t, mid) {
		if _, redriven := r.Headers[deadletter.HeaderRedriveCount]; redriven && r.Headers["exactly.stage"] != "" {
			t.Errorf("%s: redriven record %s carries the first stage's lineage (exactly.stage=%s)", mid, r.Key, r.Headers["exactly.stage"])
		}
	}
	if code, report := exactlyExit(t, nil, "verify", "--topology", fixed, "--event-id", "event_id"); code != 0 {
		t.Fatalf("verify after the redrive: exit %d:\n%s", code, report)
	}
}

// extraRecords returns n kcat lines e-<i>|{"event_id":"e-<i>","n":<i>,"extra":{"x":1}},
// every tenth (i%10 == 0) without extra: a transform that reads
// value.extra.x fails on those.
func extraRecords(n int) [][]byte {
	var lines [][]byte
	for i := range n {
		if i%10 == 0 {
			lines = append(lines, fmt.Appendf(nil, `e-%d|{"event_id":"e-%d","n":%d}`, i, i, i))
		} else {
			lines = append(lines, fmt.Appendf(nil, `e-%d|{"event_id":"e-%d","n":%d,"extra":{"x":1}}`, i, i, i))
		}
	}
	return lines
}

// runBroken runs the stages of topo until out holds outs records and dlq
// dead letters, then stops them; what names the run in a failure.
func runBroken(t *testing.T, what, topo, out, dlq string, outs, dead int) {
	t.Helper()
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == outs && kcatCount(t, dlq) == dead }, func() string {
		return fmt.Sprintf("%s: %d outputs, %d dead letters; want %d and %d", what, kcatCount(t, out), kcatCount(t, dlq), outs, dead)
	})
	p.stop()
}

// TestRedriveWhereSeesJSONIntegers: the README's transforms treat a
// JSON number without '.', 'e' or 'E' as a CEL int "in every stage", and
// --where documents `value` as "the JSON value decoded". A user reuses a
// transform-style integer expression in --where: `value.n % 2 == 0` must
// select the dead letter with n=204 and reject the one with n=203. Were
// `value` to hold doubles in --where, `_%_` would have no overload and
// both dead letters would be reported "not redrivable", nothing redriven.
func TestRedriveWhereSeesJSONIntegers(t *testing.T) {
	t.Parallel()
	name, in, out, dlq := uniqueName("where"), uniqueName("win"), uniqueName("wout"), uniqueName("wdlq")
	topo := stagesTopology{partitions: 1, stages: []stageYAML{{
		name: name, in: in, out: out, dlq: dlq, format: "json", key: "event_id", interval: "100ms", maxRecords: 500,
		transform: `
- name: divide
  set: { q: 'value.n / value.d' }`,
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, in, [][]byte{
		[]byte(`k203|{"event_id":"e-203","n":203,"d":0}`),
		[]byte(`k204|{"event_id":"e-204","n":204,"d":0}`),
	})
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, time.Minute, func() bool { return kcatCount(t, dlq) == 2 },
		func() string { return fmt.Sprintf("%d dead letters, want 2", kcatCount(t, dlq)) })
	p.stop()

	t.Run("usage error prints no report", func(t *testing.T) {
		code, logs := exactlyExit(t, nil, "redrive", "--topology", topo, "--stage", name, "--where", "value.n +", "--no-progress")
		if code != 2 {
			t.Fatalf("exit %d, want 2:\n%s", code, logs)
		}
		if strings.Contains(logs, " read, ") {
			t.Errorf("a refused --where still printed a redrive report, as if it had run:\n%s", logs)
		}
	})

	code, logs := exactlyExit(t, nil, "redrive", "--topology", topo, "--stage", name, "--where", "value.n % 2 == 0", "--no-progress")
	if code != 0 {
		t.Fatalf("redrive exit %d, want 0:\n%s", code, logs)
	}
	if !strings.Contains(logs, "1 redriven, 1 not selected") {
		t.Errorf("report: want 1 redriven, 1 not selected (value.n is an int as in transforms):\n%s", logs)
	}
	var redriven []string
	for _, r := range kcatRead(t, in) {
		if r.Headers["exactly.redrive.count"] == "1" {
			redriven = append(redriven, r.Key)
		}
	}
	if len(redriven) != 1 || redriven[0] != "k204" {
		t.Errorf("redriven input records %v, want [k204]", redriven)
	}
}
