//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The join while it runs, on the real broker: what it writes equals what a
// restart would write, Postgres's as-of join over the table's committed
// versions, whatever happened to the topics meanwhile.

// runningJoin is a co-partitioned join stage over new topics, jc's orders
// joined with its table (3 partitions each), started once its topics
// exist.
type runningJoin struct {
	jc                         joinCase
	table, in, out, dlq, stage string
	topo                       string
	tableCl, ordersCl          *kgo.Client
	run                        *proc
}

func startRunningJoin(t *testing.T, rounds int, transactionTimeout string) *runningJoin {
	t.Helper()
	rj := &runningJoin{
		jc: joinCase{base: time.Now().Add(-2 * time.Hour).Truncate(time.Second), customers: 40, rounds: rounds,
			versionsPer: 150, ordersPer: 300, roundLen: time.Minute},
		table: uniqueName("jf_customers"), in: uniqueName("jf_orders"), out: uniqueName("jf_out"), dlq: uniqueName("jf_dlq"), stage: uniqueName("jf"),
	}
	rj.topo = userTopology(t, []fileTopic{
		{name: rj.table, parts: 3, config: map[string]string{"cleanup.policy": "compact"}},
		{name: rj.in, parts: 3}, {name: rj.out, parts: 3}, {name: rj.dlq, parts: 1},
	}, fmt.Sprintf(`stages:
  - name: %s
    input: { topic: %s, format: json }
    output: { topic: %s, format: json }
    dead_letter: { topic: %s }
    commit: { interval: 100ms, max_records: 200 }
    transform:
      - join: { table: %s, key: value.customer_id, as: customer, missing: "null", history_retention: 30d }
`, rj.stage, rj.in, rj.out, rj.dlq, rj.table))
	if transactionTimeout != "" {
		b, err := os.ReadFile(rj.topo)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(rj.topo, []byte(strings.Replace(string(b), "transaction_timeout: 30s", "transaction_timeout: "+transactionTimeout, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rj.tableCl = kafkaClient(t, kgo.TransactionalID(uniqueName("jf_table_writer")))
	t.Cleanup(rj.tableCl.Close)
	rj.ordersCl = kafkaClient(t)
	t.Cleanup(rj.ordersCl.Close)
	rj.run = start(t, nil, "run", "--topology", rj.topo, "--instance-id", "it-1", "--state-dir", t.TempDir())
	return rj
}

// rounds produces jc's rounds [from, to).
func (rj *runningJoin) rounds(t *testing.T, from, to int) {
	t.Helper()
	for r := from; r < to; r++ {
		rj.jc.produceRound(t, rj.tableCl, rj.ordersCl, rj.table, rj.in, r)
	}
}

func (rj *runningJoin) caughtUp(t *testing.T) {
	t.Helper()
	waitGroupCaughtUp(t, "exactly-"+rj.stage, rj.in, 3*time.Minute)
}

// tableTxn writes records to the table in one transaction of cl, ended
// with end.
func tableTxn(t *testing.T, cl *kgo.Client, end kgo.TransactionEndTry, recs ...*kgo.Record) {
	t.Helper()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		t.Fatal(err)
	}
}

// TestJoinWaitsForOpenTableTransaction: another producer opens a
// transaction on every table partition and leaves it open while two
// rounds of table updates are committed behind it and their orders
// arrive. The running stage joins none of those orders with the table
// before the updates: it waits for the transaction, saying so in its log,
// or, when the transaction outlasts the stage's own (transaction_timeout
// 5s), aborts and retries. Once the transaction aborts, every order is
// written once, joined with the value Postgres computes as of its time
// over the committed versions (kcat, read_committed).
func TestJoinWaitsForOpenTableTransaction(t *testing.T) {
	for _, tc := range []struct {
		name, timeout, logged string
	}{
		{"ends within the stage's transaction", "", "the join waits for an open transaction on its table"},
		{"outlasts the stage's transaction", "5s", "outlasted the stage's transaction"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rj := startRunningJoin(t, 4, tc.timeout)
			rj.rounds(t, 0, 2)
			rj.caughtUp(t)

			other := kafkaClient(t, kgo.TransactionalID(uniqueName("jf_other")), kgo.TransactionTimeout(2*time.Minute),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			defer other.Close()
			ctx := context.Background()
			if err := other.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			for p := range int32(3) {
				r := &kgo.Record{Topic: rj.table, Partition: p, Key: []byte("c-0"), Value: []byte(`{"v":-2}`), Timestamp: rj.jc.base}
				if err := other.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			rj.rounds(t, 2, 4) // committed behind the open transaction
			waitLogged(t, rj.run, tc.logged, 1, 2*time.Minute, "the stage did not wait for the table's open transaction")
			if n := kcatCount(t, rj.out); n != 2*rj.jc.ordersPer {
				t.Errorf("%d orders written while the table's transaction was open, want the %d of rounds 0-1", n, 2*rj.jc.ordersPer)
			}
			if err := other.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
			rj.caughtUp(t)
			rj.run.stop()
			checkJoinOutput(t, rj.jc, rj.out, rj.dlq)
		})
	}
}

// TestJoinTableRecreatedWhileRunning: the table topic is deleted and
// created again while the stage runs. The old topic held, besides rounds
// 0-1, a version of every customer at the start of round 2 that the new
// one lacks; the new one holds rounds 0-3. The stage rebuilds its table
// from the new topic, as a restart would: every order is joined as
// Postgres computes it over the new topic's versions (rounds 0-3).
func TestJoinTableRecreatedWhileRunning(t *testing.T) {
	rj := startRunningJoin(t, 4, "")
	rj.rounds(t, 0, 2)
	var stale []*kgo.Record
	for c := range rj.jc.customers {
		k := fmt.Sprintf("c-%d", c)
		stale = append(stale, &kgo.Record{Topic: rj.table, Key: []byte(k), Value: fmt.Appendf(nil, `{"customer":%q,"v":-1}`, k),
			Timestamp: rj.jc.base.Add(2 * rj.jc.roundLen)})
	}
	tableTxn(t, rj.tableCl, kgo.TryCommit, stale...)
	rj.caughtUp(t)

	if oldID, newID := recreateTopic(t, rj.table, 3); oldID == newID {
		t.Fatalf("the table topic kept its ID %s", oldID)
	}
	adm, closeAdm := readAdmin(t)
	defer closeAdm()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kadm.StringPtr("compact")}}, rj.table); err != nil {
		t.Fatal(err)
	}
	// A new writer: the old one's metadata names the old topic's ID.
	rj.tableCl = kafkaClient(t, kgo.TransactionalID(uniqueName("jf_table_writer")))
	t.Cleanup(rj.tableCl.Close)
	var history []*kgo.Record
	for j := range 2 * rj.jc.versionsPer {
		k, at, v := rj.jc.version(j)
		history = append(history, &kgo.Record{Topic: rj.table, Key: []byte(k), Value: v, Timestamp: at})
	}
	tableTxn(t, rj.tableCl, kgo.TryCommit, history...)
	rj.rounds(t, 2, 4)
	rj.caughtUp(t)
	rj.run.stop()
	if !strings.Contains(rj.run.logs.String(), "the join's table topic was deleted and created again") {
		t.Errorf("the stage did not log the table's rebuild:\n%s", tail(rj.run.logs.String(), 30))
	}
	checkJoinOutput(t, rj.jc, rj.out, rj.dlq)
}

// TestJoinInputPartitionsAddedWhileRunning: a partition is added to the
// input topic of a co-partitioned join while it runs, and orders keyed
// for 4 partitions follow. The stage joins none of them with the 3 table
// partitions: it exits with the error it gives at start.
func TestJoinInputPartitionsAddedWhileRunning(t *testing.T) {
	rj := startRunningJoin(t, 2, "")
	rj.rounds(t, 0, 1)
	rj.caughtUp(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(rj.ordersCl).CreatePartitions(ctx, 1, rj.in); err != nil {
		t.Fatal(err)
	}
	rj.ordersCl = kafkaClient(t) // a producer that knows the 4 partitions
	t.Cleanup(rj.ordersCl.Close)
	rj.rounds(t, 1, 2)
	if err := rj.run.wait(2 * time.Minute); err == nil {
		t.Fatalf("the stage exited cleanly, want an error:\n%s", tail(rj.run.logs.String(), 30))
	}
	// As the log writes it, quotes escaped.
	want := fmt.Sprintf(`the join's table topic \"%s\" has 3 partitions, the input topic \"%s\" has 4`, rj.table, rj.in)
	if !strings.Contains(rj.run.logs.String(), want) {
		t.Errorf("the stage's logs lack %q:\n%s", want, tail(rj.run.logs.String(), 30))
	}
	if n := kcatCount(t, rj.out); n != rj.jc.ordersPer {
		t.Errorf("%d orders written, want the %d of round 0 alone", n, rj.jc.ordersPer)
	}
}
