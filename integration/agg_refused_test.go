//go:build integration

package integration

import (
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A window result the broker refuses closes its window all the same: the
// result is a dead letter (reason produce, the group key as key, the
// result as value), and the records after it go on: the record whose
// stream time closed the window is not dead-lettered in its place, which
// would leave the window open and dead-letter every later record of the
// partition that advances stream time, for ever. Refused here:
// results whose timestamp (their largest event time) is more than the
// output topic's message.timestamp.after.max.ms (1 h) ahead of the
// broker's clock, and a result larger than its max.message.bytes. Event
// times before 1970 or after 2262-04-11 are the records' own dead letters
// (reason transform): no Kafka record timestamp holds them.
func TestAggregateRefusedResultDoesNotPoison(t *testing.T) {
	t.Parallel()
	in, out, dlq, stage := uniqueName("aggref_in"), uniqueName("aggref_out"), uniqueName("aggref_dlq"), uniqueName("aggref")
	const minute = int64(60_000)
	body := "stages:\n" + stageYAML{name: stage, in: in, out: out, dlq: dlq, format: "json", interval: "100ms", maxRecords: 1000,
		transform: `
- aggregate:
    window: { tumbling: 1m }
    time: value.ts
    grace: 0s
    aggregations: { n: count, last_id: { last: value.id } }
    emit: final`}.yaml()
	// The dead-letter topic refuses the large result too (an envelope
	// goes instead), and the dead letter of a large late record.
	topo := userTopology(t, []fileTopic{{name: in, parts: 2}, {name: dlq, parts: 1, config: map[string]string{"max.message.bytes": "3000"}},
		{name: out, parts: 1, config: map[string]string{"message.timestamp.after.max.ms": "3600000", "max.message.bytes": "2048"}}}, body)

	now := time.Now().Truncate(time.Minute).UnixMilli()
	future := now + 3*60*minute
	rec := func(key, id string, ts int64) []byte {
		return fmt.Appendf(nil, `%s|{"id":%q,"ts":%d}`, key, id, ts)
	}
	// Random letters: the output is snappy-compressed, and
	// max.message.bytes bounds the compressed batch.
	big := rand.Text() + rand.Text()
	for len(big) < 4000 {
		big += rand.Text()
	}
	// Partition 0: three windows three hours ahead (their results are
	// refused), each closed by the next; the last stays open.
	kcatProducePartition(t, in, 0, [][]byte{
		rec("f", "f1", future), rec("f", "f2", future+minute), rec("f", "f3", future+2*minute),
	})
	// Partition 1: windows an hour ago; the second's result is too large.
	// Then the records with no Kafka timestamp, and one closing the rest.
	past := now - 60*minute
	kcatProducePartition(t, in, 1, [][]byte{
		rec("p", "p1", past), rec("p", big, past+minute), rec("p", "p3", past+2*minute),
		rec("p", "pre1970", -60_000), rec("p", "post2262", 9_300_000_000_000),
		rec("late", big, past), rec("p", "p4", past+3*minute),
	})
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "i1", "--state-dir", t.TempDir())
	// Outputs: the windows of p1 and p3; dead letters: f1's and f2's
	// results, the large result's envelope, pre1970, post2262 and the
	// late record's envelope.
	eventually(t, 2*time.Minute, func() bool {
		return kcatCount(t, out) >= 2 && kcatCount(t, dlq) >= 6
	}, func() string {
		return fmt.Sprintf("%d outputs, want 2; %d dead letters, want 6", kcatCount(t, out), kcatCount(t, dlq))
	})
	p.stop()

	var outs []string
	for _, r := range kcatReadJSON(t, out) {
		outs = append(outs, r.Payload)
	}
	if len(outs) != 2 || !strings.Contains(outs[0]+outs[1], `"last_id":"p1"`) || !strings.Contains(outs[0]+outs[1], `"last_id":"p3"`) {
		t.Errorf("outputs %q, want the windows of p1 and p3", outs)
	}
	byWhat := map[string]kcatJSONRecord{}
	for _, r := range kcatReadJSON(t, dlq) {
		what := r.Headers["exactly.dlq.reason"] + " "
		_, envelope := r.Headers["exactly.dlq.value.omitted"]
		switch {
		case r.Headers["exactly.dlq.window.result"] == "true" && envelope:
			what += "result envelope " + r.Key
		case r.Headers["exactly.dlq.window.result"] == "true":
			what += "result " + r.Key + " " + r.Payload[strings.Index(r.Payload, `"last_id"`):]
		case envelope:
			what += "envelope " + r.Key // the record's own reason, late
		default:
			what += "record " + r.Payload
		}
		byWhat[what] = r
	}
	for _, want := range []string{
		`produce result f "last_id":"f1","n":1}}`,
		`produce result f "last_id":"f2","n":1}}`,
		`produce result envelope p`,
		`transform record {"id":"pre1970","ts":-60000}`,
		`transform record {"id":"post2262","ts":9300000000000}`,
		`late envelope late`,
	} {
		if _, ok := byWhat[want]; !ok {
			t.Errorf("no dead letter %q; dead letters: %v", want, keys(byWhat))
		}
	}
	if len(byWhat) != 6 {
		t.Errorf("%d dead letters, want 6: %v", len(byWhat), keys(byWhat))
	}
	for what, r := range byWhat {
		if strings.HasPrefix(what, "transform") && !strings.Contains(r.Headers["exactly.dlq.error"], "outside what a Kafka record timestamp can hold") {
			t.Errorf("%s: error %q, want the event time range", what, r.Headers["exactly.dlq.error"])
		}
		// A result's source is its own input partition (f on 0, p on 1).
		if strings.Contains(what, "result") {
			if want := map[string]string{"f": "0", "p": "1"}[r.Key]; r.Headers["exactly.dlq.source.partition"] != want {
				t.Errorf("%s: source partition %s, want %s", what, r.Headers["exactly.dlq.source.partition"], want)
			}
		}
	}
	// A result is no input record: redrive leaves the three (and the
	// late record's envelope), and sends back the two records.
	got := exactlyCmd(t, "redrive", "--topology", topo, "--stage", stage, "--no-progress")
	if !strings.Contains(got, "2 redriven") || !strings.Contains(got, "4 not redrivable") || strings.Count(got, "an aggregate window's result") != 3 {
		t.Errorf("redrive:\n%s\nwant the 3 results and the envelope not redrivable", got)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
