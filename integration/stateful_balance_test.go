//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// payment is the i-th payment of TestStatefulRunningBalance: account
// acct-(i%40), an amount in cents from -1000 to 1000, and every 997th
// one bad (its amount is text: a dead letter, which changes no balance).
func payment(i int) (account string, cents int64, bad bool) {
	return "acct-" + strconv.Itoa(i%40), int64(i*7919%2001) - 1000, i%997 == 996
}

// paymentLines are payments from..to-1 as kcat "key|value" lines.
func paymentLines(from, to int) [][]byte {
	var lines [][]byte
	for i := from; i < to; i++ {
		account, cents, bad := payment(i)
		amount := strconv.FormatInt(cents, 10)
		if bad {
			amount = `"` + amount + `"`
		}
		lines = append(lines, fmt.Appendf(nil, `%s|{"id":"p-%d","amount_cents":%s}`, account, i, amount))
	}
	return lines
}

// TestStatefulRunningBalance runs deploy/examples/balances, a custom
// binary with the stateful transform running-balance, on 20,000 payments
// of 40 accounts. It is killed at crash-before-commit and then at
// crash-after-commit, on one state dir, and the last run starts on an
// empty state dir (a rebuild from the changelog) while more payments
// arrive. Read back read_committed
// with kcat, each account's outputs are its payments in order, each once,
// with the exact running balance after it: no payment counted twice, none
// lost; the changelog ends at each final balance, and verify finds
// nothing lost or doubled.
func TestStatefulRunningBalance(t *testing.T) {
	bin := buildBin(t, true, "../deploy/examples/balances")
	in, out, dlq, stage := uniqueName("pay"), uniqueName("bal"), uniqueName("dlq"), uniqueName("bal")
	topo := stagesTopology{txnTimeout: "20s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, interval: "100ms", maxRecords: 500,
		transform: "- stateful: { func: running-balance, store: balances }",
	}}}.write(t)
	if out, err := exec.Command(bin, "validate", topo).CombinedOutput(); err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	changelog := "exactly-" + stage + "-balances-changelog"
	if created := exactlyCmd(t, "topics", "create", "--topology", topo); !strings.Contains(created, changelog) {
		t.Fatalf("topics create did not create %s:\n%s", changelog, created)
	}
	checkChangelogTopic(t, changelog)

	const first, total = 12000, 20000
	kcatProduce(t, in, paymentLines(0, first))
	dir := t.TempDir()
	args := func(dir string) []string {
		return []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", dir}
	}
	for _, fp := range []string{crashBeforeCommit, crashAfterCommit} {
		p := startBin(t, bin, []string{failpointEnv + "=" + fp + "@4"}, args(dir)...)
		_ = p.wait(3 * time.Minute)
		if !p.killedBySIGKILL() {
			t.Fatalf("want the process killed by SIGKILL at %s@4, got %v\n%s", fp, p.cmd.ProcessState, tail(p.logs.String(), 40))
		}
		// A kill loses Pebble's unflushed writes (no WAL): the run after
		// it resumes from what checkpoints survived, or rebuilds.
		t.Logf("after %s: %d records in %s; restores (resumed, rebuilt, records read): %v", fp, kcatCount(t, out), out, restores(p.logs.String()))
	}
	if n := kcatCount(t, out); n >= first-first/997 {
		t.Fatalf("the crashes came after all %d first payments were out (%d): nothing was tested", first, n)
	}

	run := startBin(t, bin, nil, args(t.TempDir())...) // an empty state dir: rebuilt from the changelog
	kcatProduce(t, in, paymentLines(first, total))
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	run.stop()
	if rs := restores(run.logs.String()); len(rs) == 0 || rs[0][1] != "0 1 2" {
		t.Errorf("the last run: restores %v, want partitions 0 1 2 rebuilt from the changelog", rs)
	}

	// Expected: per account, its good payments in order with the balance
	// after each.
	type entry struct {
		ID      string `json:"id"`
		Cents   int64  `json:"amount_cents"`
		Balance int64  `json:"balance_cents"`
	}
	want, balance := map[string][]entry{}, map[string]int64{}
	bad := 0
	for i := range total {
		account, cents, isBad := payment(i)
		if isBad {
			bad++
			continue
		}
		balance[account] += cents
		want[account] = append(want[account], entry{"p-" + strconv.Itoa(i), cents, balance[account]})
	}
	got := map[string][]entry{}
	for _, r := range kcatRead(t, out) {
		var e entry
		if err := json.Unmarshal([]byte(r.Value), &e); err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		got[r.Key] = append(got[r.Key], e) // one account, one partition: in order
	}
	for account, w := range want {
		if g := got[account]; !slices.Equal(g, w) {
			at := 0
			for at < min(len(g), len(w)) && g[at] == w[at] {
				at++
			}
			t.Errorf("account %s: %d outputs, want %d; first difference at %d: got %v, want %v", account, len(g), len(w), at, g[at:min(at+3, len(g))], w[at:min(at+3, len(w))])
		}
	}
	if len(got) != len(want) {
		t.Errorf("outputs of %d accounts, want %d", len(got), len(want))
	}
	if n := kcatCount(t, dlq); n != bad {
		t.Errorf("%s holds %d dead letters, want %d", dlq, n, bad)
	}
	last := map[string]string{}
	for _, r := range kcatRead(t, changelog) {
		last[r.Key] = r.Value
	}
	for account, b := range balance {
		if last[account] != strconv.FormatInt(b, 10) {
			t.Errorf("changelog %s: account %s ends at %q, want %d", changelog, account, last[account], b)
		}
	}

	rep, code := runVerifyBin(t, bin, topo, "id")
	if code != 0 || len(rep.Stages) != 1 {
		t.Fatalf("exactly verify: exit %d, %d stages; want exit 0 and 1 stage; problems %v", code, len(rep.Stages), rep.Problems)
	}
	if st := rep.Stages[0]; !rep.OK || st.In != total || st.Processed != int64(total-bad) || st.DeadLettered != int64(bad) || st.Lost != 0 || st.Duplicates != 0 {
		t.Fatalf("verify: ok %v, %+v; want %d in, %d processed, %d dead-lettered, none lost; problems %v", rep.OK, *st, total, total-bad, bad, rep.Problems)
	}
}
