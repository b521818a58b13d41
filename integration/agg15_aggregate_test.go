//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/kit"
)

// TestAggregateCrashRestart: 20,000 order events over 60 event-time
// minutes, keyed by customer, into 1-minute tumbling windows with count and
// sum(amount) (decimals), emit final, through a stage killed at
// crash-before-commit and crash-after-commit and restarted. Read back
// read_committed with kcat, every window of every customer is emitted
// exactly once, with the count and the exact sum computed here from the
// input.
func TestAggregateCrashRestart(t *testing.T) {
	in, out, dlq, stage := uniqueName("agg15_in"), uniqueName("agg15_out"), uniqueName("agg15_dlq"), uniqueName("agg15")
	topo := writeFile(t, "topology.yaml", fmt.Sprintf(`version: 1
kafka:
  brokers: [%q]
  transaction_timeout: 20s
topics:
  - { name: %s, partitions: 3 }
  - { name: %s, partitions: 3 }
  - { name: %s, partitions: 1 }
stages:
  - name: %s
    input: { topic: %s }
    output: { topic: %s }
    dead_letter: { topic: %s }
    commit: { interval: 100ms, max_records: 500 }
    transform:
      - aggregate:
          window: { tumbling: 1m }
          time: value.ts
          aggregations: { n: count, total: { sum: value.amount } }
          emit: final
`, brokers(t), in, out, dlq, stage, in, out, dlq))
	changelog := "exactly-" + stage + "-aggregate-changelog"
	if created := exactlyCmd(t, "topics", "create", "--topology", topo); !strings.Contains(created, changelog) {
		t.Fatalf("topics create did not create %s:\n%s", changelog, created)
	}
	checkChangelogTopic(t, changelog)

	base := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).UnixMilli()
	type win struct {
		key   string
		start int64
	}
	type agg struct {
		n     int64
		cents int64
	}
	want := map[win]*agg{}
	var lines [][]byte
	const events, customers = 20000, 17
	for i := range events {
		key := fmt.Sprintf("c-%d", i%customers)
		ts := base + int64(i)*180 // 60 minutes
		cents := int64(i*7919%100000 + 1)
		lines = append(lines, fmt.Appendf(nil, `%s|{"id":"o-%d","ts":%d,"amount":%d.%02d}`, key, i, ts, cents/100, cents%100))
		w := win{key, ts - (ts-base)%60000}
		if want[w] == nil {
			want[w] = &agg{}
		}
		want[w].n++
		want[w].cents += cents
	}
	kcatProduce(t, in, lines)

	stateDir := t.TempDir()
	runArgs := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}
	for _, fp := range []string{kit.CrashBeforeCommit, kit.CrashAfterCommit} {
		p := start(t, []string{kit.FailpointEnv + "=" + fp + "@6"}, runArgs...)
		_ = p.wait(3 * time.Minute)
		if !p.killedBySIGKILL() {
			t.Fatalf("want the process killed by SIGKILL at %s@6, got %v\n%s", fp, p.cmd.ProcessState, tail(p.logs.String(), 40))
		}
	}
	run := start(t, nil, runArgs...)
	// Closers: one record per customer two hours later advances every
	// partition's stream time past all the windows above.
	lines = lines[:0]
	for c := range customers {
		lines = append(lines, fmt.Appendf(nil, `c-%d|{"id":"closer-%d","ts":%d,"amount":0}`, c, c, base+2*3600_000))
	}
	kcatProduce(t, in, lines)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	run.stop()
	if !strings.Contains(run.logs.String(), "state restored") {
		t.Errorf("the last run logged no restore:\n%s", tail(run.logs.String(), 30))
	}

	seen := map[win]int{}
	for _, r := range kcatReadJSON(t, out) {
		var v struct {
			Key    string
			Window struct {
				Start   string
				StartMs int64 `json:"start_ms"`
				EndMs   int64 `json:"end_ms"`
			}
			Results struct {
				N     int64
				Total json.Number
			}
		}
		d := json.NewDecoder(strings.NewReader(r.Payload))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			t.Fatalf("output %q: %v", r.Payload, err)
		}
		w := win{v.Key, v.Window.StartMs}
		seen[w]++
		if r.Key != v.Key || v.Window.EndMs != v.Window.StartMs+60000 || v.Window.Start != time.UnixMilli(v.Window.StartMs).UTC().Format(time.RFC3339Nano) {
			t.Errorf("output %s: key %q, window %+v", r.Payload, r.Key, v.Window)
		}
		exp := want[w]
		if exp == nil {
			t.Errorf("output for a window with no input: %s", r.Payload)
			continue
		}
		got, ok := new(big.Rat).SetString(string(v.Results.Total))
		if !ok || !strings.Contains(string(v.Results.Total), ".") || v.Results.N != exp.n || got.Cmp(big.NewRat(exp.cents, 100)) != 0 {
			t.Errorf("window %v: n %d total %s, want n %d total %s", w, v.Results.N, v.Results.Total, exp.n, big.NewRat(exp.cents, 100).FloatString(2))
		}
	}
	for w := range want {
		if seen[w] != 1 {
			t.Errorf("window %v emitted %d times, want once", w, seen[w])
		}
	}
	if len(seen) != len(want) {
		t.Errorf("%d windows emitted, want %d", len(seen), len(want))
	}
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, n)
	}
	// exactly verify: every input is accounted for as aggregated, none
	// lost, and the window results are not taken for orphans.
	rep, code := runVerify(t, topo)
	if code != 0 || !rep.OK || len(rep.Stages) != 1 || rep.Stages[0].In == 0 || rep.Stages[0].Aggregated != rep.Stages[0].In || rep.Stages[0].Lost != 0 || rep.Stages[0].Orphans != 0 {
		t.Errorf("exactly verify: exit %d, %+v; want ok, every input aggregated", code, rep.Stages)
	}
}
