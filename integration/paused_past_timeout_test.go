//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPausedPastTransactionTimeout: a stage is stopped (SIGSTOP) with a
// transaction open until its coordinator aborts it at the transaction
// timeout, resumed, and the same again within a minute. No other process
// ever uses its transactional ID, so it must not exit saying another one
// took its place, nor log franz-go's retries at ERROR; it runs on, and
// every event is in the output once. The local broker runs
// transaction.version 2, where the client recovers from the abort.
func TestPausedPastTransactionTimeout(t *testing.T) {
	in, out, dlq, stage := uniqueName("pz_in"), uniqueName("pz_out"), uniqueName("pz_dlq"), uniqueName("pz")
	topo := stagesTopology{txnTimeout: "3s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, key: "event_id", interval: "500ms", maxRecords: 100000,
	}}}.write(t)
	exactlyCmd(t, "topics", "create", "--topology", topo)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	txnID := "exactly-" + stage + "-it-1"

	// A steady input, so that a transaction is open most of the time.
	prod := kafkaClient(t, kgo.DefaultProduceTopic(in))
	defer prod.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Int64
	feeding := make(chan struct{})
	go func() {
		defer close(feeding)
		for i := 0; ctx.Err() == nil; i++ {
			id := fmt.Sprintf("e-%d", i)
			if err := prod.ProduceSync(ctx, &kgo.Record{Key: []byte(id), Value: fmt.Appendf(nil, `{"event_id":%q}`, id)}).FirstErr(); err != nil {
				return
			}
			sent.Add(1)
			time.Sleep(20 * time.Millisecond) // a steady rate, not a flood
		}
	}()

	cl := kafkaClient(t)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	state := func() string {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := adm.DescribeTransactions(c, txnID)
		if err != nil {
			return ""
		}
		return d[txnID].State
	}
	committed := func() int64 {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		offs, err := adm.FetchOffsets(c, "exactly-"+stage)
		if err != nil {
			return -1
		}
		var n int64
		offs.Each(func(o kadm.OffsetResponse) { n += o.At })
		return n
	}
	waitLogged(t, p, "partitions assigned", 1, time.Minute, "the stage never got its partitions")
	for round := 1; round <= 2; {
		// Stop it while a transaction is open, then wait for that
		// transaction to end: the coordinator aborts it at its timeout.
		eventually(t, time.Minute, func() bool {
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			if state() == "Ongoing" {
				return true
			}
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			return false
		}, func() string { return "never stopped the stage with a transaction open" })
		var ended string
		eventually(t, time.Minute, func() bool { ended = state(); return ended != "Ongoing" && ended != "" },
			func() string { return "the paused stage's transaction never ended" })
		if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatalf("round %d: the stage is gone: %v\n%s", round, err, tail(p.logs.String(), 30))
		}
		if ended != "PrepareAbort" && ended != "CompleteAbort" {
			continue // its EndTxn was on its way when it stopped: again
		}
		t.Logf("round %d: the coordinator aborted the paused stage's transaction (%s)", round, ended)
		// Progress after the pause: it commits again. (Read from the
		// group, not the output: read_committed readers of a topic
		// whose transactions never pause see no end to it.)
		before := committed()
		eventually(t, time.Minute, func() bool { p.alive(); return committed() > before },
			func() string { return fmt.Sprintf("round %d: no commit after the pause", round) })
		round++
	}
	cancel()
	<-feeding
	waitGroupCaughtUp(t, "exactly-"+stage, in, 2*time.Minute)
	p.stop()

	logs := p.logs.String()
	t.Logf("timeouts told apart from fences: %d; sessions rebuilt: %d",
		strings.Count(logs, "the transaction coordinator aborted this instance's transaction"), strings.Count(logs, "rebuilding"))
	if strings.Contains(logs, "took this instance's place") {
		t.Fatalf("a stage paused past its transaction timeout says another process took its place:\n%s", tail(logs, 40))
	}
	if n := strings.Count(logs, "level=ERROR"); n > 0 {
		t.Fatalf("%d ERROR lines while recovering from a transaction timeout:\n%s", n, tail(logs, 40))
	}
	// Every event once: verify reads the output with another client, and
	// names any transaction still open.
	rep, code := runVerify(t, topo)
	if code != 0 || !rep.OK || len(rep.Stages) != 1 {
		t.Fatalf("verify: exit %d, ok %v; problems %v", code, rep.OK, rep.Problems)
	}
	if st := rep.Stages[0]; st.In != sent.Load() || st.Processed != sent.Load() || st.Lost != 0 || st.Duplicates != 0 || st.DeadLettered != 0 {
		t.Fatalf("verify: %+v; want all %d events processed once, none lost or dead-lettered", *st, sent.Load())
	}
}
