package stage_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

const day = 24 * time.Hour

// produceAt writes n events e-0.. to the input, partition i%3, with
// timestamp ts and headers hs.
func produceAt(t *testing.T, seeds []string, n int, ts time.Time, hs ...kgo.RecordHeader) {
	t.Helper()
	cl := newClient(t, seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := range n {
		k := "e-" + strconv.Itoa(i)
		r := &kgo.Record{Topic: inTopic, Partition: int32(i % 3), Key: []byte(k), Value: fmt.Appendf(nil, `{"event_id":%q}`, k), Timestamp: ts, Headers: hs}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// setRetention sets retention.ms of topic.
func setRetention(t *testing.T, seeds []string, topic string, d time.Duration) {
	t.Helper()
	v := strconv.FormatInt(d.Milliseconds(), 10)
	rs, err := adminFor(t, seeds).AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "retention.ms", Value: &v}}, topic)
	if err == nil {
		_, err = rs.On(topic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// With output_timestamp: write, outputs of 8-day-old input carry the time
// of writing, and their input's timestamp in the lineage.
func TestOutputTimestampWrite(t *testing.T) {
	seeds := newCluster(t)
	old := time.UnixMilli(time.Now().Add(-8 * day).UnixMilli())
	produceAt(t, seeds, 6, old)
	s, err := stage.New(stage.Config{Stage: "clean", InstanceID: "i1", Brokers: seeds, Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
		KeyField: "event_id", OutputTimestamp: topology.OutputTimestampWrite})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Second)
	if err := runUntilStats(t, s, func(st stage.Stats) bool { return st.Produced == 6 }); err != nil {
		t.Fatal(err)
	}
	for _, r := range drain(t, seeds, outTopic) {
		if r.Timestamp.Before(start) {
			t.Errorf("output %s timestamp %s, want the time of writing (after %s)", r.Key, r.Timestamp, start)
		}
		if got := header(r, stage.HeaderLineageTimestamp); got != strconv.FormatInt(old.UnixMilli(), 10) {
			t.Errorf("output %s %s = %q, want %d", r.Key, stage.HeaderLineageTimestamp, got, old.UnixMilli())
		}
	}
}

// With output_timestamp: input (the default), outputs older than their
// topic's retention.ms are written as they are, counted in
// exactly_stage_outputs_past_retention_total, and warned about once per
// output partition; recent ones are not.
func TestOutputsPastRetentionCountedAndWarned(t *testing.T) {
	seeds := newCluster(t)
	setRetention(t, seeds, outTopic, day)
	produceAt(t, seeds, 6, time.Now().Add(-8*day))
	produceAt(t, seeds, 3, time.Now()) // e-0..e-2 again, recent
	reg, m := promtest.Registered(t, stage.NewMetrics)
	logs := &countingHandler{n: map[string]int{}}
	s := stageOf(t, seeds, "", 0, 0, stage.WithMetrics(m), stage.WithLogger(slog.New(logs)))
	if err := runUntilStats(t, s, func(st stage.Stats) bool { return st.Produced == 9 }); err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, mt := range promtest.Family(t, reg, "exactly_stage_outputs_past_retention_total") {
		counted += mt.GetCounter().GetValue()
	}
	if counted != 6 {
		t.Errorf("outputs past retention counted %v, want 6", counted)
	}
	warned := 0
	for msg, n := range logs.n {
		if strings.HasPrefix(msg, "outputs are older than their topic's retention") {
			warned += n
		}
	}
	if warned != 3 {
		t.Errorf("warned %d times, want once for each of the 3 output partitions", warned)
	}
	if n := len(drain(t, seeds, outTopic)); n != 9 {
		t.Errorf("output holds %d records, want all 9", n)
	}
}

// A record that redrive wrote back (time of writing, original timestamp
// in a header) is processed at its original time: its output keeps that
// time, without the redrive's header.
func TestRedrivenRecordKeepsItsEventTime(t *testing.T) {
	seeds := newCluster(t)
	orig := time.UnixMilli(time.Now().Add(-8 * day).UnixMilli())
	produceAt(t, seeds, 3, time.Now(), kgo.RecordHeader{Key: deadletter.HeaderRedriveTimestamp, Value: strconv.AppendInt(nil, orig.UnixMilli(), 10)})
	s := stageOf(t, seeds, "", 0, 0)
	if err := runUntilStats(t, s, func(st stage.Stats) bool { return st.Produced == 3 }); err != nil {
		t.Fatal(err)
	}
	for _, r := range drain(t, seeds, outTopic) {
		if !r.Timestamp.Equal(orig) {
			t.Errorf("output %s timestamp %s, want the original %s", r.Key, r.Timestamp, orig)
		}
		if v := header(r, deadletter.HeaderRedriveTimestamp); v != "" {
			t.Errorf("output %s carries %s=%s", r.Key, deadletter.HeaderRedriveTimestamp, v)
		}
	}
}

// A route step's topic is watched from the first transaction, as the
// output topic is: old outputs routed there are counted and warned about
// at once, not from the next metadata refresh (an hour away here).
func TestRoutedOutputsPastRetentionCountedFromTheStart(t *testing.T) {
	seeds := newCluster(t)
	const routed = "routed"
	if _, err := adminFor(t, seeds).CreateTopic(context.Background(), 3, 1, nil, routed); err != nil {
		t.Fatal(err)
	}
	setRetention(t, seeds, routed, day)
	produceAt(t, seeds, 6, time.Now().Add(-8*day))
	text := strings.Replace(topologytest.Stage("127.0.0.1:1", "clean", 3, "    transform:\n      - route: [ { topic: "+routed+" } ]\n"),
		"stages:\n", "  - { name: "+routed+", partitions: 3 }\nstages:\n", 1)
	f, err := topology.Parse("t.yaml", []byte(text), nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := transform.Compile(f, transform.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	reg, m := promtest.Registered(t, stage.NewMetrics)
	cfg := stage.StageConfig(f, &f.Stages[0], "i1")
	cfg.Brokers, cfg.KeyField, cfg.MetadataMaxAge = seeds, "event_id", time.Hour
	s, err := stage.New(cfg, stage.WithTransform(ps["clean"]), stage.WithMetrics(m))
	if err != nil {
		t.Fatal(err)
	}
	if err := runUntilStats(t, s, func(st stage.Stats) bool { return st.Produced == 6 }); err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, mt := range promtest.Family(t, reg, "exactly_stage_outputs_past_retention_total") {
		for _, l := range mt.GetLabel() {
			if l.GetName() == "topic" && l.GetValue() == routed {
				counted += mt.GetCounter().GetValue()
			}
		}
	}
	if counted != 6 {
		t.Errorf("routed outputs past retention counted %v, want 6", counted)
	}
}
