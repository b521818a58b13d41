//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
)

// A reset to the latest position (a stage) or to a time after every record
// (a sink) while another producer's transaction is open on the input: the new positions are the last stable offsets, the
// first offset of that transaction on each partition, so once it commits
// the stage or sink processes all of its records, and skips exactly the
// committed records that were there at the reset. Read back with kcat
// (read_committed) and psql; verify reports the skipped records as
// skipped by the reset, not lost.
//
// Events: e-0..e-299 processed before the reset; e-300..e-499 committed
// but not processed (skipped by the reset); e-500..e-549 in the open
// transaction; e-550..e-579 committed after it started (above the last
// stable offset, so read after the reset).

// openForeignTxn begins a transaction of a producer that is not exactly's
// and writes events e-from..e-(from+n-1) to topic in it; commit ends it.
func openForeignTxn(t *testing.T, topic, txnID string, from, n int) (commit func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers(t)), kgo.TransactionalID(txnID), kgo.TransactionTimeout(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := from; i < from+n; i++ {
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "e-%d", i), Value: fmt.Appendf(nil, `{"event_id":"e-%d","n":%d}`, i, i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce in transaction %s: %v", txnID, err)
		}
	}
	return func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit transaction %s: %v", txnID, err)
		}
	}
}

// resetAtOpenTxn runs the dry run and the reset to target (its flags) of
// the stage or sink named by flag ("--stage" or "--sink") while txnID's
// transaction is open on in, and checks that both name it, that an
// explicit offset inside it is refused, and that the positions
// positions() returns after it are the last stable offsets.
func resetAtOpenTxn(t *testing.T, topo, flag, name, in, txnID string, positions func() map[int32]int64, target ...string) {
	t.Helper()
	lso, before := committedEnds(t, in), positions()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hwm, err := adminClient(t).ListEndOffsets(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	hwm.Each(func(o kadm.ListedOffset) {
		if o.Offset <= lso[o.Partition] {
			return
		}
		// The high watermark is past the open transaction's first record.
		code, out := exactlyExit(t, nil, "reset", "--topology", topo, flag, name, "--to-offsets", fmt.Sprintf("%d=%d", o.Partition, o.Offset))
		want := fmt.Sprintf("offset %d is past the last stable offset %d", o.Offset, lso[o.Partition])
		if code != 2 || !strings.Contains(out, want) {
			t.Errorf("--to-offsets inside the open transaction: exit %d, want 2 and %q:\n%s", code, want, out)
		}
	})
	code, out := exactlyExit(t, nil, append([]string{"reset", "--topology", topo, flag, name}, target...)...)
	for _, want := range []string{"open transactions on " + in, txnID, "so no open transaction is split", "dry run: nothing changed"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("dry run: exit %d, want 0 and %q:\n%s", code, want, out)
		}
	}
	if after := positions(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a dry run changed the positions: %v -> %v", before, after)
	}
	code, out = exactlyExit(t, nil, append([]string{"reset", "--topology", topo, flag, name, "--execute"}, target...)...)
	if code != 0 || !strings.Contains(out, "done: reset 3 partitions") {
		t.Fatalf("reset: exit %d:\n%s", code, out)
	}
	t.Logf("reset at an open transaction:\n%s", out)
	if got := positions(); fmt.Sprint(got) != fmt.Sprint(lso) {
		t.Fatalf("positions after the reset %v, want the last stable offsets %v", got, lso)
	}
}

// checkOnceEach fails unless counts holds e-0..e-299 and e-500..e-579 once
// each and nothing of e-300..e-499.
func checkOnceEach(t *testing.T, counts map[string]int) {
	t.Helper()
	for i := range 580 {
		want := 1
		if i >= 300 && i < 500 {
			want = 0
		}
		if got := counts[fmt.Sprintf("e-%d", i)]; got != want {
			t.Errorf("e-%d: %d times, want %d", i, got, want)
		}
	}
}

// checkResetSkipped fails unless skipped is 200 and the ranges count 200
// records.
func checkResetSkipped(t *testing.T, what string, rep processor.VerifyReport, skipped, lost int64, skips []processor.VerifyResetSkip) {
	t.Helper()
	var inRanges int64
	for _, s := range skips {
		inRanges += s.Records
	}
	if !rep.OK || skipped != 200 || inRanges != 200 || lost != 0 {
		t.Fatalf("verify of %s: ok %v, reset-skipped %d (ranges: %d), lost %d; want ok, 200, 200, 0; problems %v", what, rep.OK, skipped, inRanges, lost, rep.Problems)
	}
}

func TestResetStageAtOpenTransaction(t *testing.T) {
	t.Parallel()
	st := stageSpec{name: uniqueName("rtxn"), in: uniqueName("rtxn_in"), out: uniqueName("rtxn_out"), dlq: uniqueName("rtxn_dlq")}
	topo := topologyFile(t, []stageSpec{st}, "100ms", "10s", 500)
	exactlyCmd(t, "topics", "create", topo)
	now := time.Now().Truncate(time.Millisecond)
	produceTimed(t, st.in, 0, 300, now)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, st.out) == 300 }, func() string { return "the stage did not write 300 outputs" })
	p.stop()

	produceTimed(t, st.in, 300, 200, now)
	txnID := uniqueName("foreign")
	commit := openForeignTxn(t, st.in, txnID, 500, 50)
	produceTimed(t, st.in, 550, 30, now)

	group := "exactly-" + st.name
	resetAtOpenTxn(t, topo, "--stage", st.name, st.in, txnID, func() map[int32]int64 {
		out := map[int32]int64{}
		for p, o := range groupOffsetResponses(t, group, st.in) {
			out[p] = o.At
		}
		return out
	}, "--to-latest")
	commit()

	p = start(t, nil, "run", "--topology", topo, "--instance-id", "a")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, st.out) >= 380 }, func() string {
		return fmt.Sprintf("after the reset: %d outputs, want 380", kcatCount(t, st.out))
	})
	p.stop()
	counts, n := keyCountsTotal(t, st.out)
	if n != 380 {
		t.Errorf("%s: %d outputs, want 380", st.out, n)
	}
	checkOnceEach(t, counts)

	rep, code := runVerify(t, topo)
	if code != 0 || len(rep.Stages) != 1 {
		t.Fatalf("verify: exit %d, problems %v", code, rep.Problems)
	}
	c := rep.Stages[0]
	checkResetSkipped(t, "stage "+st.name, rep, c.ResetSkipped, c.Lost, c.ResetSkips)
	code, out := exactlyExit(t, nil, "verify", "--topology", topo, "--event-id", "event_id")
	if want := "stage " + st.name + ": 200 records skipped on purpose by exactly reset (not lost):"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("verify: exit %d, want 0 and %q:\n%s", code, want, out)
	}
	t.Logf("verify:\n%s", out)
}

func TestResetSinkAtOpenTransaction(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("srtxn")
	topo := sinkTopology(t, s)
	pool := pgPool(t)
	now := time.Now().Truncate(time.Millisecond)
	produceTimed(t, s.in, 0, 300, now)
	p := startSink(t, topo, "a")
	waitSinkDone(t, pool, s, 300, 2*time.Minute)
	p.stop()

	produceTimed(t, s.in, 300, 200, now)
	txnID := uniqueName("foreign")
	commit := openForeignTxn(t, s.in, txnID, 500, 50)
	produceTimed(t, s.in, 550, 30, now)

	resetAtOpenTxn(t, topo, "--sink", s.name, s.in, txnID, func() map[int32]int64 {
		return storedPositions(t, pool, s.positions(), s.in)
	}, "--to-datetime", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)) // after every record: the last stable offset
	commit()

	p = startSink(t, topo, "a")
	waitSinkDone(t, pool, s, 380, 2*time.Minute)
	p.stop()
	counts := map[string]int{}
	for _, id := range psqlLines(t, "SELECT event_id FROM "+s.table()) {
		counts[id]++
	}
	checkOnceEach(t, counts)

	rep, code := runVerify(t, topo)
	if code != 0 || len(rep.Sinks) != 1 {
		t.Fatalf("verify: exit %d, problems %v", code, rep.Problems)
	}
	c := rep.Sinks[0]
	if c.Missing != 0 || c.Extra != 0 {
		t.Errorf("verify: %d missing rows, %d extra", c.Missing, c.Extra)
	}
	checkResetSkipped(t, "sink "+s.name, rep, c.ResetSkipped, c.Lost, c.ResetSkips)
}
