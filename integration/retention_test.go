//go:build integration

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/integration/opstest"
)

const day = 24 * time.Hour

// produceOld writes n records (event IDs prefix-0..) to topic with
// timestamp at; with bad, they lack the field n that the stage's set step
// reads, so the stage dead-letters them.
func produceOld(t testing.TB, topic, prefix string, n int, at time.Time, bad bool) {
	t.Helper()
	cl := kafkaClient(t)
	for i := range n {
		v := fmt.Sprintf(`{"event_id":"%s-%d","n":%d}`, prefix, i, i)
		if bad {
			v = fmt.Sprintf(`{"event_id":"%s-%d"}`, prefix, i)
		}
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "%s-%d", prefix, i), Value: []byte(v), Timestamp: at}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// setTopicConfig sets config key of topic to value.
func setTopicConfig(t testing.TB, topic, key, value string) {
	t.Helper()
	rs, err := adminClient(t).AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: key, Value: &value}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		t.Fatalf("set %s of %s: %v", key, topic, err)
	}
}

// logStart is partition 0's log start offset of topic.
func logStart(t testing.TB, topic string) int64 {
	t.Helper()
	starts, err := adminClient(t).ListStartOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := starts.Lookup(topic, 0)
	return o.Offset
}

// Dead letters 8 days old, redriven into an input whose retention.ms is a
// day while its stage is stopped, stay readable past the broker's
// retention check: redrive writes them with the time of writing (their
// original timestamp in exactly.redrive.timestamp), in a segment of their
// own. The check deletes the originals beside them. The stage, started
// again, reads every one at its original time, and verify says OK.
func TestRedriveOfOldDeadLettersOutlivesRetention(t *testing.T) {
	t.Parallel()
	in, out, dlq, name := uniqueName("ret_in"), uniqueName("ret_out"), uniqueName("ret_dlq"), uniqueName("ret")
	stageWith := func(step string) string {
		return "stages:\n" + stageYAML{name: name, in: in, out: out, dlq: dlq, format: "json", key: "event_id",
			interval: "100ms", maxRecords: 1000, transform: step}.yaml()
	}
	topics := []fileTopic{{in, 1, nil}, {out, 1, nil}, {dlq, 1, nil}}
	broken := userTopology(t, topics, stageWith("- set: { m: value.n + 1 }"))
	const n = 10
	old := time.UnixMilli(time.Now().Add(-8 * day).UnixMilli())
	produceOld(t, in, "e", n, old, true)

	p := start(t, nil, "run", "--topology", broken, "--instance-id", "i1")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, dlq) == n }, func() string {
		return fmt.Sprintf("%d of %d dead letters\n%s", kcatCount(t, dlq), n, tail(p.logs.String(), 10))
	})
	p.stop()

	setTopicConfig(t, in, "retention.ms", strconv.FormatInt(day.Milliseconds(), 10))
	got := exactlyCmd(t, "redrive", "--topology", broken, "--stage", name, "--no-progress")
	if !strings.Contains(got, fmt.Sprintf("%d redriven", n)) {
		t.Fatalf("redrive:\n%s\nwant %d redriven", got, n)
	}

	// The broker's retention check (every 5 seconds with deploy/local's
	// kafka.sh, 5 minutes by default) deletes the
	// originals, which are older than a day.
	eventually(t, 7*time.Minute, func() bool { return logStart(t, in) >= n }, func() string {
		return fmt.Sprintf("the log start of %s is %d: retention did not delete the %d originals", in, logStart(t, in), n)
	})
	redriven := kcatRead(t, in)
	ts := kcatTimestamps(t, in)
	if len(redriven) != n {
		t.Fatalf("%s holds %d records read_committed, want the %d redriven", in, len(redriven), n)
	}
	for _, r := range redriven {
		if r.Headers["exactly.redrive.timestamp"] != strconv.FormatInt(old.UnixMilli(), 10) || r.Headers["exactly.redrive.count"] != "1" {
			t.Errorf("redriven %s: headers %v, want the original timestamp and count 1", r.Key, r.Headers)
		}
		if ms, _ := strconv.ParseInt(ts[r.Key], 10, 64); time.Since(time.UnixMilli(ms)) > time.Hour {
			t.Errorf("redriven %s has timestamp %s, want the time of writing", r.Key, ts[r.Key])
		}
	}

	// Fixed, the stage reads all of them, at their original time.
	fixed := writeFile(t, "fixed.yaml", strings.Replace(readFile(t, broken), "value.n + 1", `'has(value.n) ? value.n + 1 : 0'`, 1))
	p = start(t, nil, "run", "--topology", fixed, "--instance-id", "i1")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == n }, func() string {
		return fmt.Sprintf("%d of %d outputs\n%s", kcatCount(t, out), n, tail(p.logs.String(), 10))
	})
	p.stop()
	for k, v := range kcatTimestamps(t, out) {
		if v != strconv.FormatInt(old.UnixMilli(), 10) {
			t.Errorf("output %s has timestamp %s, want the original %d", k, v, old.UnixMilli())
		}
	}
	if rep, code := runVerify(t, fixed); code != 0 || !rep.OK {
		t.Errorf("verify: exit %d, problems %v", code, rep.Problems)
	}
}

// Three stages read one input of 8-day-old records, each into an output
// topic of its own: with output_timestamp: write, kcat shows the time of
// writing and the lineage keeps the input's; with input (the default),
// into a topic whose retention.ms is 8.5 days (more than the records'
// age, so the broker's check keeps them for the test to read, and less
// than a tenth of it away, so the stage warns), the outputs keep the
// input's timestamp and the stage warns once per output partition and
// counts them; into a topic whose message.timestamp.before.max.ms is a day, the
// broker refuses them and they are dead-lettered (reason produce), the
// dead letters taking the time of writing.
func TestStageOutputTimestampsAndRetention(t *testing.T) {
	t.Parallel()
	in, dlq := uniqueName("ots_in"), uniqueName("ots_dlq")
	outW, outI, outB := uniqueName("ots_write"), uniqueName("ots_input"), uniqueName("ots_bounded")
	sw, si, sb := uniqueName("ots_w"), uniqueName("ots_i"), uniqueName("ots_b")
	dayMs := strconv.FormatInt(day.Milliseconds(), 10)
	nearMs := strconv.FormatInt((8*day + day/2).Milliseconds(), 10)
	stage := func(name, out, extra string) string {
		return stageYAML{name: name, in: in, out: out, dlq: dlq, format: "json", key: "event_id", interval: "100ms", maxRecords: 1000}.yaml() + extra
	}
	topo := userTopology(t, []fileTopic{{in, 2, map[string]string{"retention.ms": "-1"}}, {dlq, 1, nil},
		{outW, 2, map[string]string{"retention.ms": dayMs}}, {outI, 2, map[string]string{"retention.ms": nearMs}},
		{outB, 1, map[string]string{"message.timestamp.before.max.ms": dayMs}}},
		"stages:\n"+stage(sw, outW, "    output_timestamp: write\n")+stage(si, outI, "")+stage(sb, outB, ""))
	const n = 20
	old := time.UnixMilli(time.Now().Add(-8 * day).UnixMilli())
	produceOld(t, in, "e", n, old, false)

	written := time.Now().Add(-time.Second)
	addr := opstest.FreeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "i1", "--metrics-addr", addr)
	defer p.stop()
	eventually(t, 3*time.Minute, func() bool {
		return kcatCount(t, outW) == n && kcatCount(t, outI) == n && kcatCount(t, dlq) == n
	}, func() string {
		return fmt.Sprintf("%s %d, %s %d, %s %d of %d\n%s", outW, kcatCount(t, outW), outI, kcatCount(t, outI), dlq, kcatCount(t, dlq), n, tail(p.logs.String(), 10))
	})

	wTimes := kcatTimestamps(t, outW)
	for _, r := range kcatRead(t, outW) {
		ms, _ := strconv.ParseInt(wTimes[r.Key], 10, 64)
		if time.UnixMilli(ms).Before(written) {
			t.Errorf("%s: %s has timestamp %d, want the time of writing", outW, r.Key, ms)
		}
		if r.Headers["exactly.source.timestamp"] != strconv.FormatInt(old.UnixMilli(), 10) {
			t.Errorf("%s: %s headers %v, want exactly.source.timestamp %d", outW, r.Key, r.Headers, old.UnixMilli())
		}
	}
	for k, v := range kcatTimestamps(t, outI) {
		if v != strconv.FormatInt(old.UnixMilli(), 10) {
			t.Errorf("%s: %s has timestamp %s, want the input's %d", outI, k, v, old.UnixMilli())
		}
	}
	waitMetric(t, addr, "exactly_stage_outputs_past_retention_total", map[string]string{"stage": si, "topic": outI}, n, 30*time.Second)
	if v, _ := sum(scrape(t, addr), "exactly_stage_outputs_past_retention_total", map[string]string{"stage": sw}); v != 0 {
		t.Errorf("stage %s (output_timestamp: write) counted %v outputs past retention, want 0", sw, v)
	}
	warnings := 0
	for line := range strings.Lines(p.logs.String()) {
		if strings.Contains(line, "outputs are older than their topic's retention allows") {
			warnings++
			if !strings.Contains(line, si) || !strings.Contains(line, outI) {
				t.Errorf("warning names another stage or topic: %s", line)
			}
		}
	}
	if warnings != 2 {
		t.Errorf("%d warnings, want one for each of the 2 partitions of %s\n%s", warnings, outI, tail(p.logs.String(), 20))
	}
	for _, r := range kcatRead(t, dlq) {
		if r.Headers["exactly.dlq.stage"] != sb || r.Headers["exactly.dlq.reason"] != "produce" || !strings.Contains(r.Headers["exactly.dlq.error"], "INVALID_TIMESTAMP") {
			t.Errorf("dead letter %s: headers %v, want stage %s, reason produce, INVALID_TIMESTAMP", r.Key, r.Headers, sb)
		}
	}
}
