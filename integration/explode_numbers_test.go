//go:build integration

package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestExplodeKeepsNumberText: explode on the real broker writes each
// number of the input list with the text it came with, read back with
// kcat: 1E1 stays 1E1 and 12.50 stays 12.50, as a set step keeps them.
func TestExplodeKeepsNumberText(t *testing.T) {
	const events = 50
	in, out, dlq, stage := uniqueName("explnum_in"), uniqueName("explnum_out"), uniqueName("explnum_dlq"), uniqueName("explnum")
	topo := stagesTopology{txnTimeout: "60s", partitions: 1, stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, format: "json",
		transform: "- explode: 'value.amounts'\n",
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)
	texts := []string{"1E1", "12.50", "-0.0", "7", "1e-7", "12345678901234567890.12", "2.0E+3"}
	var lines [][]byte
	var want []string
	for i := range events {
		a, b := texts[i%len(texts)], texts[(i+3)%len(texts)]
		lines = append(lines, fmt.Appendf(nil, `k%d|{"id":%d,"amounts":[%s, %s]}`, i, i, a, b))
		want = append(want, a, b)
	}
	kcatProduce(t, in, lines)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out)+kcatCount(t, dlq) >= 2*events },
		func() string {
			return fmt.Sprintf("%d of %d out, %d dead letters", kcatCount(t, out), 2*events, kcatCount(t, dlq))
		})
	p.stop()
	if n := kcatCount(t, dlq); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	recs := kcatReadJSON(t, out)
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		if r.Payload != want[i] || r.Key != "k"+strconv.Itoa(i/2) {
			t.Fatalf("record %d: %s %s, want %s %s", i, r.Key, r.Payload, "k"+strconv.Itoa(i/2), want[i])
		}
	}
	t.Logf("%d exploded numbers read back with kcat as their input text", len(recs))
}
