package stage_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/topology"
)

// The join while it runs: it must join each record with the table a
// restart would join it with, whatever happened to the topics meanwhile.

const coPartitionedJoin = "      - join: { table: customers, key: key, as: customer, missing: \"null\", history_retention: 1d }\n"

func compactTable(partitions int32) *topology.Topic {
	return &topology.Topic{Name: tableTopic, Partitions: partitions, Config: map[string]string{"cleanup.policy": "compact"}}
}

// waitUntil fails the test if cond is not true within 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAccounted waits until s has accounted for n input records.
func waitAccounted(t *testing.T, s *stage.Stage, n int64) {
	t.Helper()
	waitUntil(t, "records are accounted for", func() bool { return accounted(s.Stats()) >= n })
}

// ordersWritten returns the orders in the output, read_committed.
func ordersWritten(t *testing.T, seeds []string) []int {
	t.Helper()
	var out []int
	for _, r := range drain(t, seeds, outTopic) {
		var v struct {
			Order int `json:"order"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		out = append(out, v.Order)
	}
	return out
}

// TestStageJoinWaitsForOpenTableTransaction: another producer leaves a
// transaction open on a table partition, and a table update is committed
// behind it. The running join does not join the orders that follow with
// the version before the update: it waits for the transaction (and says
// so in Ready), or, when the transaction outlasts the stage's own,
// aborts and polls them again; once the transaction commits, every order
// is joined as of its time with every committed version, as a restart
// would join it.
func TestStageJoinWaitsForOpenTableTransaction(t *testing.T) {
	for _, tc := range []struct {
		name string
		tt   time.Duration // the stage's transaction timeout; 0: the default (30 s)
	}{
		{"ends within the stage's transaction", 0},
		{"outlasts the stage's transaction", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds := dedupeCluster(t, compactTable(3))
			vs := joinTable(0)
			produceTable(t, seeds, vs)
			produceOrders(t, seeds, 0, 20)
			s := joinStageTimeout(t, seeds, t.TempDir(), coPartitionedJoin, tc.tt)
			stop, _ := runInBackground(t, s)
			waitAccounted(t, s, 20)

			// Open on c1's table partition: a version after every order.
			ctx := context.Background()
			other := newClient(t, seeds, kgo.TransactionalID("table-other"), kgo.TransactionTimeout(time.Minute))
			if err := other.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			open := tableVersion{c: 1, ts: 1_000_000, tier: 777}
			if err := other.ProduceSync(ctx, &kgo.Record{Topic: tableTopic, Key: []byte("c1"), Value: []byte(`{"tier":777}`),
				Timestamp: time.UnixMilli(joinBase + open.ts)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			more := joinTable(1) // c1's update among them, behind the open transaction
			produceTable(t, seeds, more)
			vs = append(vs, more...)
			produceOrders(t, seeds, 20, 40)
			if tc.tt == 0 {
				waitUntil(t, "Ready says the join waits", func() bool {
					err := s.Ready()
					return err != nil && strings.Contains(err.Error(), "the join waits for an open transaction on its table") &&
						strings.Contains(err.Error(), `transactional ID "table-other"`)
				})
			} else {
				waitUntil(t, "a transaction aborts", func() bool { return s.Stats().Aborted > 0 })
			}
			for _, o := range ordersWritten(t, seeds) {
				if o >= 20 {
					t.Errorf("order %d written while the table's transaction was open", o)
				}
			}
			if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
				t.Fatal(err)
			}
			vs = append(vs, open)
			waitAccounted(t, s, 40)
			stop()
			checkJoined(t, seeds, vs, 40)
		})
	}
}

// TestStageJoinTableRecreatedWhileRunning: the table topic is deleted and
// created again, with other content, while the stage runs. The orders
// that follow are joined with the new table alone (a customer only the
// old one held is missing), as a restart would join them: the session is
// rebuilt and restores the table from the new topic.
func TestStageJoinTableRecreatedWhileRunning(t *testing.T) {
	seeds := dedupeCluster(t, compactTable(3))
	old := joinTable(0)
	produceTable(t, seeds, old)
	produceOrders(t, seeds, 0, 20)
	s := joinStage(t, seeds, t.TempDir())
	stop, _ := runInBackground(t, s)
	waitAccounted(t, s, 20)

	ctx := context.Background()
	adm := adminFor(t, seeds)
	if _, err := adm.DeleteTopics(ctx, tableTopic); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]*string{"cleanup.policy": new("compact")}
	if _, err := adm.CreateTopic(ctx, 3, 1, cfg, tableTopic); err != nil {
		t.Fatal(err)
	}
	var recreated []tableVersion
	for c := range 9 {
		if c != 3 {
			recreated = append(recreated, tableVersion{c: c, ts: 5_000, tier: 1000 + c})
		}
	}
	produceTable(t, seeds, recreated)
	produceOrders(t, seeds, 20, 40)
	waitAccounted(t, s, 40)
	stop()
	checkJoinedBy(t, seeds, 40, func(i int) *int {
		if i < 20 {
			return wantTier(old, i)
		}
		return wantTier(recreated, i)
	})
	if st := s.Stats(); st.Rebuilds == 0 {
		t.Errorf("stats %+v: want the session rebuilt to restore the new table", st)
	}
}

// TestStageJoinInputPartitionsAddedWhileRunning: partitions are added to
// the input topic of a co-partitioned join while it runs, or to both its
// topics. The order that follows is not joined with the old table
// partitions: the stage stops, with the error it gives at start for the
// mismatch, or saying the table's keying changed.
func TestStageJoinInputPartitionsAddedWhileRunning(t *testing.T) {
	for _, tt := range []struct {
		name  string
		grown []string
		want  string
	}{
		{"input", []string{inTopic}, `the join's table topic "customers" has 3 partitions, the input topic "in" has 4 (co_partitioned: input partition p looks up table partition p`},
		// Both at 4 again, but the table's keys stay where 3 partitions
		// put them: joined against partition p, most would be missed.
		{"input and table", []string{inTopic, tableTopic}, `the join's table topic "customers" went from 3 to 4 partitions while the stage ran; adding partitions does not move the keys already written`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			seeds := dedupeCluster(t, compactTable(3))
			produceTable(t, seeds, joinTable(0))
			produceOrders(t, seeds, 0, 20)
			s := joinStage(t, seeds, t.TempDir())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			waitAccounted(t, s, 20)
			if _, err := adminFor(t, seeds).CreatePartitions(context.Background(), 1, tt.grown...); err != nil {
				t.Fatal(err)
			}
			produceOrders(t, seeds, 20, 30)
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("the stage still runs")
			}
			var ce *fault.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Run = %v, want a config error with %q", err, tt.want)
			}
			for _, o := range ordersWritten(t, seeds) {
				if o >= 20 {
					t.Errorf("order %d written after the partition count changed", o)
				}
			}
		})
	}
}

// TestStageJoinGlobalTablePartitionsAdded: partitions are added to a
// global join's table while it runs, and a customer written only to a new
// one. The orders that follow find it, as after a restart: the new
// partition is restored.
func TestStageJoinGlobalTablePartitionsAdded(t *testing.T) {
	seeds := dedupeCluster(t, compactTable(2))
	steps := "      - join: { table: customers, key: value.customer, as: customer, missing: \"null\", mode: global, history_retention: 1d }\n"
	vs := joinTable(0)
	produceTable(t, seeds, vs)
	produceOrders(t, seeds, 0, 20, true)
	s := joinStageWith(t, seeds, t.TempDir(), steps)
	stop, _ := runInBackground(t, s)
	waitAccounted(t, s, 20)

	ctx := context.Background()
	if _, err := adminFor(t, seeds).CreatePartitions(ctx, 1, tableTopic); err != nil {
		t.Fatal(err)
	}
	c9 := tableVersion{c: 9, ts: 10_000, tier: 90}
	cl := newClient(t, seeds, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: tableTopic, Partition: 2, Key: []byte("c9"), Value: []byte(`{"tier":90}`),
		Timestamp: time.UnixMilli(joinBase + c9.ts)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	vs = append(vs, c9)
	produceOrders(t, seeds, 20, 40, true)
	waitAccounted(t, s, 40)
	stop()
	checkJoined(t, seeds, vs, 40)
}
