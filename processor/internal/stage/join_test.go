package stage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/topology"
)

const tableTopic = "customers"

// joinBase is the timestamp, ms, the join tests count from.
const joinBase = 1_700_000_000_000

// tableVersion is one table record of the join tests: customer c at ts
// (ms after joinBase), with tier, or a tombstone.
type tableVersion struct {
	c     int
	ts    int64
	tier  int
	tombs bool
}

// joinTable is the table of the join tests: customers c0..c8, each with
// tiers set at 0 s, 10 s and 20 s (c8 only from 10 s), c7 deleted at 15 s
// and set again at 25 s. c9 never exists.
func joinTable(phase int) []tableVersion {
	var out []tableVersion
	for c := range 9 {
		if c == 8 && phase == 0 {
			continue
		}
		out = append(out, tableVersion{c: c, ts: int64(phase) * 10_000, tier: c*10 + phase})
	}
	if phase == 1 {
		out = append(out, tableVersion{c: 7, ts: 15_000, tombs: true})
	}
	if phase == 2 {
		out = append(out, tableVersion{c: 7, ts: 25_000, tier: 99})
	}
	return out
}

// produceTable writes vs to the table topic, keyed by customer.
func produceTable(t *testing.T, seeds []string, vs []tableVersion) {
	t.Helper()
	var recs []*kgo.Record
	for _, v := range vs {
		r := &kgo.Record{Topic: tableTopic, Key: []byte("c" + strconv.Itoa(v.c)), Timestamp: time.UnixMilli(joinBase + v.ts)}
		if !v.tombs {
			r.Value = []byte(fmt.Sprintf(`{"tier":%d}`, v.tier))
		}
		recs = append(recs, r)
	}
	// In a transaction: the table is read read_committed, across markers.
	cl := newClient(t, seeds, kgo.TransactionalID("table-writer"))
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// orderAt is the timestamp of order i: phase p's orders are 0.5 s apart
// from p*10 s.
func orderAt(i int) int64 { return int64(i/20)*10_000 + int64(i%20)*500 }

// produceOrders writes orders from..to-1, for customer c(i%10), keyed by
// customer, or by order with byOrder.
func produceOrders(t *testing.T, seeds []string, from, to int, byOrder ...bool) {
	t.Helper()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		c := "c" + strconv.Itoa(i%10)
		key := c
		if len(byOrder) > 0 && byOrder[0] {
			key = "o" + strconv.Itoa(i)
		}
		recs = append(recs, &kgo.Record{Topic: inTopic, Key: []byte(key), Timestamp: time.UnixMilli(joinBase + orderAt(i)),
			Value: []byte(fmt.Sprintf(`{"order":%d,"customer":%q}`, i, c))})
	}
	if err := newClient(t, seeds).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// wantTier is the tier order i must be joined with, as of its timestamp,
// over the table versions vs: nil if none.
func wantTier(vs []tableVersion, i int) *int {
	at, c := orderAt(i), i%10
	var best *tableVersion
	for k := range vs {
		v := &vs[k]
		if v.c == c && v.ts <= at && (best == nil || v.ts >= best.ts) {
			best = v
		}
	}
	if best == nil || best.tombs {
		return nil
	}
	return &best.tier
}

func joinStage(t *testing.T, seeds []string, dir string, opts ...stage.Option) *stage.Stage {
	t.Helper()
	return joinStageWith(t, seeds, dir, "      - join: { table: customers, key: key, as: customer, missing: \"null\", history_retention: 1d }\n", opts...)
}

func joinStageWith(t *testing.T, seeds []string, dir, steps string, opts ...stage.Option) *stage.Stage {
	t.Helper()
	return joinStageTimeout(t, seeds, dir, steps, 0, opts...)
}

// joinStageTimeout is joinStageWith with the transaction timeout tt (0:
// the default).
func joinStageTimeout(t *testing.T, seeds []string, dir, steps string, tt time.Duration, opts ...stage.Option) *stage.Stage {
	t.Helper()
	p := cleanPipeline(t, nil, steps)
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
		CommitInterval: 20 * time.Millisecond, MaxRecords: 7, StateDir: dir, TransactionTimeout: tt,
	}, append([]stage.Option{stage.WithTransform(p)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkJoined reads the output read_committed: orders 0..n-1, each once,
// each with the tier its customer had at its timestamp.
func checkJoined(t *testing.T, seeds []string, vs []tableVersion, n int) {
	t.Helper()
	checkJoinedBy(t, seeds, n, func(i int) *int { return wantTier(vs, i) })
}

// checkJoinedBy is checkJoined with the tier order i must have from want.
func checkJoinedBy(t *testing.T, seeds []string, n int, wantOf func(i int) *int) {
	t.Helper()
	seen := map[int]int{}
	for _, r := range drain(t, seeds, outTopic) {
		var v struct {
			Order    int `json:"order"`
			Customer *struct {
				Tier int `json:"tier"`
			} `json:"customer"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("output %s: %v", r.Value, err)
		}
		seen[v.Order]++
		want := wantOf(v.Order)
		switch {
		case want == nil && v.Customer != nil:
			t.Errorf("order %d: joined with %s, want null", v.Order, r.Value)
		case want != nil && (v.Customer == nil || v.Customer.Tier != *want):
			t.Errorf("order %d: joined %s, want tier %d", v.Order, r.Value, *want)
		}
	}
	for i := range n {
		if seen[i] != 1 {
			t.Errorf("order %d written %d times", i, seen[i])
		}
	}
	if len(seen) != n {
		t.Errorf("%d orders written, want %d", len(seen), n)
	}
}

// TestStageJoinAsOfEventTime: orders joined with a versioned table as of
// their timestamps, across a crash, a restart from the checkpoint or from
// an empty state dir, and table updates committed while the stage runs:
// each order written once, with the version current at its time (a
// tombstone's key missing, kept with null).
func TestStageJoinAsOfEventTime(t *testing.T) {
	for _, fp := range []string{failpoint.CrashBeforeCommit, failpoint.CrashAfterCommit} {
		for _, sameDir := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, same state dir %v", fp, sameDir), func(t *testing.T) {
				seeds := dedupeCluster(t, &topology.Topic{Name: tableTopic, Partitions: 3, Config: map[string]string{"cleanup.policy": "compact"}})
				vs := joinTable(0)
				produceTable(t, seeds, vs)
				produceOrders(t, seeds, 0, 20)
				dir := t.TempDir()
				before := crashStage(t, func(t *testing.T, seeds []string, opts ...stage.Option) *stage.Stage {
					return joinStage(t, seeds, dir, opts...)
				}, seeds, fp, 2)
				if !sameDir {
					dir = t.TempDir()
				}
				s := joinStage(t, seeds, dir)
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() { errc <- s.Run(ctx) }()
				wait := func(n int64) {
					t.Helper()
					deadline := time.Now().Add(30 * time.Second)
					for accounted(before)+accounted(s.Stats()) < n {
						if time.Now().After(deadline) {
							t.Fatalf("stats %+v after %+v: want %d records accounted for", s.Stats(), before, n)
						}
						time.Sleep(10 * time.Millisecond)
					}
				}
				wait(20)
				for phase := 1; phase <= 2; phase++ {
					more := joinTable(phase)
					produceTable(t, seeds, more) // committed before the orders that follow
					vs = append(vs, more...)
					produceOrders(t, seeds, phase*20, phase*20+20)
					wait(int64(phase*20 + 20))
				}
				cancel()
				if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
					t.Fatal(err)
				}
				checkJoined(t, seeds, vs, 60)
			})
		}
	}
}

// TestStageJoinGlobal: in global mode the table has its own partition
// count (2, the input 3) and keying, and orders keyed by order ID find
// their customer in any table partition, as of their timestamps, across a
// crash and a restart on an empty state dir, with table updates while the
// stage runs.
func TestStageJoinGlobal(t *testing.T) {
	seeds := dedupeCluster(t, &topology.Topic{Name: tableTopic, Partitions: 2, Config: map[string]string{"cleanup.policy": "compact"}})
	steps := "      - join: { table: customers, key: value.customer, as: customer, missing: \"null\", mode: global, history_retention: 1d }\n"
	vs := joinTable(0)
	produceTable(t, seeds, vs)
	produceOrders(t, seeds, 0, 20, true)
	before := crashStage(t, func(t *testing.T, seeds []string, opts ...stage.Option) *stage.Stage {
		return joinStageWith(t, seeds, t.TempDir(), steps, opts...)
	}, seeds, failpoint.CrashAfterCommit, 1)
	s := joinStageWith(t, seeds, t.TempDir(), steps)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	wait := func(n int64) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for accounted(before)+accounted(s.Stats()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("stats %+v after %+v: want %d records accounted for", s.Stats(), before, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait(20)
	for phase := 1; phase <= 2; phase++ {
		more := joinTable(phase)
		produceTable(t, seeds, more)
		vs = append(vs, more...)
		produceOrders(t, seeds, phase*20, phase*20+20, true)
		wait(int64(phase*20 + 20))
	}
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	checkJoined(t, seeds, vs, 60)
}

// TestStageJoinStartCheck: the table topic is checked at start, in the
// join's words: it exists, is compacted alone, and has the input's
// partition count unless the join is global.
func TestStageJoinStartCheck(t *testing.T) {
	const coPartitioned = "      - join: { table: customers, key: key, as: c, history_retention: 1d }\n"
	const global = "      - join: { table: customers, key: key, as: c, mode: global, history_retention: 1d }\n"
	table := func(parts int32, policy string) *topology.Topic {
		return &topology.Topic{Name: tableTopic, Partitions: parts, Config: map[string]string{"cleanup.policy": policy}}
	}
	for _, tc := range []struct {
		name, steps string
		table       *topology.Topic
		want        string
	}{
		{name: "missing", steps: coPartitioned, want: `the join's table topic "customers" does not exist (create it compacted, keyed by the lookup key, with the input's partition count)`},
		{name: "partitions", steps: coPartitioned, table: table(2, "compact"),
			want: `the join's table topic "customers" has 2 partitions, the input topic "in" has 3 (co_partitioned: input partition p looks up table partition p`},
		{name: "not compacted", steps: global, table: table(2, "delete"), want: `the join's table topic "customers" has cleanup.policy=delete, want compact alone`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds := dedupeCluster(t, tc.table)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := joinStageWith(t, seeds, t.TempDir(), tc.steps).Run(ctx)
			var ce *fault.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want a config error with %q", err, tc.want)
			}
		})
	}
}
