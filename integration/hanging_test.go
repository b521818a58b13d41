//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A transaction left open on an output partition by a producer that never
// ends it: `exactly status` and `exactly verify` list it with its
// transactional ID, producer ID, partition, first offset and age once it is
// older than --hanging-after (and not before: its own timeout is 10 min),
// verify fails for it, and once Kafka's own tool aborts it
// (kafka-transactions.sh abort) both stop listing it and verify passes.
func TestHangingTransaction(t *testing.T) {
	libs := os.Getenv("KAFKA_LIBS")
	if libs == "" {
		t.Fatal("KAFKA_LIBS (the Kafka jars, for kafka-transactions.sh) is not set: source /tmp/exactly-local/env")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stage, in, out, dlq := uniqueName("hang"), uniqueName("hang_in"), uniqueName("hang_out"), uniqueName("hang_dlq")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 100)
	exactlyCmd(t, "topics", "create", topo)

	txnID := uniqueName("hang_txn")
	const timeout = 10 * time.Minute
	p := kafkaClient(t, kgo.TransactionalID(txnID), kgo.TransactionTimeout(timeout),
		kgo.DefaultProduceTopic(out), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	rec, err := p.ProduceSync(ctx, &kgo.Record{Partition: 1, Value: []byte(`{"event_id":"e-1"}`)}).First()
	if err != nil {
		t.Fatal(err)
	}
	opened := time.Now()
	pid, _, err := p.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.EndTransaction(context.Background(), kgo.TryAbort) })

	find := func(txns []processor.OpenTxn) *processor.OpenTxn {
		for i := range txns {
			if txns[i].TransactionalID == txnID {
				return &txns[i]
			}
		}
		return nil
	}
	statusJSON := func(args ...string) processor.StatusReport {
		t.Helper()
		raw := exactlyCmd(t, append([]string{"status", "--topology", topo, "--json"}, args...)...)
		var rep processor.StatusReport
		if err := json.Unmarshal([]byte(raw), &rep); err != nil {
			t.Fatalf("status --json: %v\n%s", err, raw)
		}
		return rep
	}

	// Younger than its timeout: not listed by default.
	if got := find(statusJSON().HangingTransactions); got != nil {
		t.Fatalf("status lists a transaction younger than its %s timeout: %+v", timeout, *got)
	}
	// Older than --hanging-after: listed, with what an operator needs.
	const after = 2 * time.Second
	var got *processor.OpenTxn
	eventually(t, 30*time.Second, func() bool {
		got = find(statusJSON("--hanging-after", after.String()).HangingTransactions)
		return got != nil
	}, func() string { return "status --hanging-after 2s never listed transaction " + txnID })
	if got.Topic != out || got.Partition != 1 || got.ProducerID != pid || got.StartOffset != rec.Offset ||
		got.TimeoutMs != timeout.Milliseconds() || got.State != "Ongoing" {
		t.Errorf("status: got %+v, want %s/1 producer ID %d start offset %d timeout %s state Ongoing", *got, out, pid, rec.Offset, timeout)
	}
	if got.Open() < after || got.Open() > time.Since(opened)+5*time.Second {
		t.Errorf("status: open for %s, want between %s and %s", got.Open(), after, time.Since(opened))
	}
	table := exactlyCmd(t, "status", "--topology", topo, "--hanging-after", after.String())
	t.Logf("exactly status --hanging-after %s:\n%s", after, table)
	for _, want := range []string{txnID, strconv.FormatInt(pid, 10), out + "/1", "open longer than 2s"} {
		if !strings.Contains(table, want) {
			t.Errorf("status table lacks %q:\n%s", want, table)
		}
	}

	// verify fails for it.
	rep, code := runVerify(t, topo, "--hanging-after", after.String(), "--open-txn-wait", "1s")
	if code != 1 || rep.OK {
		t.Fatalf("verify: exit %d, ok %v with an open transaction; problems %v", code, rep.OK, rep.Problems)
	}
	if find(rep.HangingTransactions) == nil || !slices.ContainsFunc(rep.Problems, func(p string) bool {
		return strings.Contains(p, "transaction "+txnID) && strings.Contains(p, "producer ID "+strconv.FormatInt(pid, 10))
	}) {
		t.Errorf("verify does not name transaction %s as a problem: %+v\n%v", txnID, rep.HangingTransactions, rep.Problems)
	}

	// Kafka's own tool aborts it, as the README says.
	abort := exec.CommandContext(ctx, "java", "-cp", libs+"/*", "org.apache.kafka.tools.TransactionsCommand",
		"--bootstrap-server", brokers(t), "abort", "--topic", out, "--partition", "1", "--start-offset", strconv.FormatInt(got.StartOffset, 10))
	if b, err := abort.CombinedOutput(); err != nil {
		t.Fatalf("kafka-transactions.sh abort: %v\n%s", err, b)
	}
	eventually(t, 30*time.Second, func() bool {
		return find(statusJSON("--hanging-after", after.String()).HangingTransactions) == nil
	}, func() string { return "status still lists transaction " + txnID + " after kafka-transactions.sh abort" })
	if n := kcatCount(t, out); n != 0 {
		t.Errorf("kcat read_committed reads %d records of %s, want 0 (the record was aborted)", n, out)
	}
	rep, code = runVerify(t, topo, "--hanging-after", after.String(), "--open-txn-wait", "1s")
	if code != 0 || !rep.OK || len(rep.HangingTransactions) != 0 {
		t.Errorf("verify after the abort: exit %d, ok %v, hanging %+v, problems %v", code, rep.OK, rep.HangingTransactions, rep.Problems)
	}
}
