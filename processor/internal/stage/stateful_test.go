package stage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
)

const sumChangelog = "exactly-clean-sums-changelog"

// sumEvent is the i-th input of the running-sum tests: account a-(i%7),
// amount i%5 (0 writes no output), and every 40th fails after it changed
// the sum (a dead letter, which must change nothing).
func sumEvent(i int) (account string, amount int64, fail bool) {
	return "a-" + strconv.Itoa(i%7), int64(i % 5), i%40 == 39
}

// runningSum is the stateful transform of the tests: it adds amount to
// its account's sum and writes {"account", "sum"}, nothing for an amount
// of 0; a record marked fail puts a wrong sum, then fails. transient, if
// not nil, decides when to fail (with serde.ErrTransient) first.
func runningSum(transient func(r transform.Record) error) transform.StatefulFunc {
	return func(_ context.Context, r transform.Record, st transform.Store) ([]transform.Record, error) {
		if transient != nil {
			if err := transient(r); err != nil {
				return nil, err
			}
		}
		v, _ := r.Value.(map[string]any)
		amount, _ := v["amount"].(int64)
		cur, _, err := st.Get(r.Key)
		if err != nil {
			return nil, err
		}
		sum, _ := strconv.ParseInt(string(cur), 10, 64)
		if fail, _ := v["fail"].(bool); fail {
			if err := st.Put(r.Key, []byte("-1000000")); err != nil {
				return nil, err
			}
			return nil, errors.New("refused after a write")
		}
		if amount == 0 {
			return nil, nil
		}
		sum += amount
		if err := st.Put(r.Key, strconv.AppendInt(nil, sum, 10)); err != nil {
			return nil, err
		}
		r.Value = map[string]any{"account": string(r.Key), "sum": sum}
		return []transform.Record{r}, nil
	}
}

func sumPipeline(t *testing.T, fn transform.StatefulFunc) *transform.Pipeline {
	t.Helper()
	reg := transform.NewRegistry()
	if err := reg.RegisterStateful("sum", fn); err != nil {
		t.Fatal(err)
	}
	return cleanPipeline(t, reg, "      - stateful: { func: sum, store: sums }\n")
}

func sumStage(t *testing.T, seeds []string, stateDir string, fn transform.StatefulFunc, opts ...stage.Option) *stage.Stage {
	t.Helper()
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
		CommitInterval: 20 * time.Millisecond, MaxRecords: 50, StateDir: stateDir,
	}, append([]stage.Option{stage.WithTransform(sumPipeline(t, fn))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// produceSums writes events from..to-1 (see sumEvent), keyed by account.
func produceSums(t *testing.T, seeds []string, from, to int) {
	t.Helper()
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		account, amount, fail := sumEvent(i)
		v := fmt.Sprintf(`{"i":%d,"amount":%d}`, i, amount)
		if fail {
			v = fmt.Sprintf(`{"i":%d,"amount":%d,"fail":true}`, i, amount)
		}
		recs = append(recs, &kgo.Record{Topic: inTopic, Key: []byte(account), Value: []byte(v)})
	}
	if err := newClient(t, seeds).ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// sumCounts returns what events 0..n-1 make: outputs, dead letters and
// filtered records.
func sumCounts(n int) (outs, dead, filtered int64) {
	for i := range n {
		switch _, amount, fail := sumEvent(i); {
		case fail:
			dead++
		case amount == 0:
			filtered++
		default:
			outs++
		}
	}
	return outs, dead, filtered
}

// checkSums reads the output read_committed: per account, the sums in
// order are exactly the running sums of events 0..n-1, each once; the
// dead letters are the failing events and the refused ones.
func checkSums(t *testing.T, seeds []string, n int, refused ...int) {
	t.Helper()
	want := map[string][]int64{}
	sums := map[string]int64{}
	for i := range n {
		account, amount, fail := sumEvent(i)
		if fail || amount == 0 || slices.Contains(refused, i) {
			continue
		}
		sums[account] += amount
		want[account] = append(want[account], sums[account])
	}
	got := map[string][]int64{}
	for _, r := range drain(t, seeds, outTopic) {
		var v struct {
			Account string `json:"account"`
			Sum     int64  `json:"sum"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Account != string(r.Key) {
			t.Fatalf("output %s = %s: %v", r.Key, r.Value, err)
		}
		got[v.Account] = append(got[v.Account], v.Sum)
	}
	for account, w := range want {
		if !slices.Equal(got[account], w) {
			t.Errorf("account %s: sums %v, want %v", account, got[account], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("outputs of %d accounts, want %d", len(got), len(want))
	}
	_, dead, _ := sumCounts(n)
	if dlq := drain(t, seeds, dlqTopic); int64(len(dlq)) != dead+int64(len(refused)) {
		t.Errorf("dead letters: %d, want %d", len(dlq), dead+int64(len(refused)))
	}
}

func sumCluster(t *testing.T) []string {
	t.Helper()
	return dedupeCluster(t, &topology.Topic{Name: sumChangelog, Partitions: 3, Config: map[string]string{"cleanup.policy": "compact"}})
}

func accounted(st stage.Stats) int64 { return st.Produced + st.DeadLettered + st.Filtered }

// TestStageStatefulSum: a running sum per account through a stateful step,
// with transactions aborted for a transient fault in the middle: every sum
// exact, a dead letter's write and an aborted transaction's writes gone,
// and the changelog holding each account's final sum.
func TestStageStatefulSum(t *testing.T) {
	seeds := sumCluster(t)
	const n = 700
	produceSums(t, seeds, 0, n)
	flaky := failTransiently(2, func(r transform.Record) bool {
		v, _ := r.Value.(map[string]any)
		return v["i"] == int64(333)
	})
	s := sumStage(t, seeds, t.TempDir(), runningSum(flaky))
	if err := runUntilStats(t, s, func(st stage.Stats) bool { return accounted(st) >= n }); err != nil {
		t.Fatal(err)
	}
	outs, dead, filtered := sumCounts(n)
	if st := s.Stats(); st.Aborted < 2 || st.Produced != outs || st.DeadLettered != dead || st.Filtered != filtered {
		t.Fatalf("stats %+v: want 2 aborts, %d produced, %d dead letters, %d filtered", st, outs, dead, filtered)
	}
	checkSums(t, seeds, n)

	final := map[string]string{}
	for i := range n {
		account, amount, fail := sumEvent(i)
		if !fail {
			s, _ := strconv.ParseInt(final[account], 10, 64)
			final[account] = strconv.FormatInt(s+amount, 10)
		}
	}
	last := map[string]string{}
	for _, r := range drain(t, seeds, sumChangelog) {
		last[string(r.Key)] = string(r.Value)
	}
	for account, sum := range final {
		if sum != "0" && last[account] != sum {
			t.Errorf("changelog: account %s ends at %q, want %s", account, last[account], sum)
		}
	}
}

// TestStageStatefulCrashRecovery: a crash before or after a commit, then a
// restart that restores the store from the changelog (into a fresh state
// dir) or from its checkpoint (the same dir); more events come after the
// crash, and every running sum stays exact: no input counted twice, none
// lost.
func TestStageStatefulCrashRecovery(t *testing.T) {
	for _, fp := range []string{failpoint.CrashBeforeCommit, failpoint.CrashAfterCommit} {
		for _, sameDir := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, same state dir %v", fp, sameDir), func(t *testing.T) {
				seeds := sumCluster(t)
				const n, more = 600, 300
				produceSums(t, seeds, 0, n)
				dir := t.TempDir()
				before := crashStage(t, func(t *testing.T, seeds []string, opts ...stage.Option) *stage.Stage {
					return sumStage(t, seeds, dir, runningSum(nil), opts...)
				}, seeds, fp, 4)
				if before.Committed < 3 {
					t.Fatalf("committed %d transactions before the crash", before.Committed)
				}
				if !sameDir {
					dir = t.TempDir()
				}
				produceSums(t, seeds, n, n+more)
				restarted := sumStage(t, seeds, dir, runningSum(nil))
				err := runUntilStats(t, restarted, func(st stage.Stats) bool { return accounted(before)+accounted(st) >= n+more })
				if err != nil {
					t.Fatal(err)
				}
				checkSums(t, seeds, n+more)
			})
		}
	}
}

// TestStageStatefulValueTooLarge: a record whose function puts a value
// larger than the changelog topic's max.message.bytes is found and
// dead-lettered with reason produce, as a refused output is; its changes
// are not kept, and the other records' sums stay exact.
func TestStageStatefulValueTooLarge(t *testing.T) {
	seeds := dedupeCluster(t, &topology.Topic{Name: sumChangelog, Partitions: 3,
		Config: map[string]string{"cleanup.policy": "compact", "max.message.bytes": "4096"}})
	const n, big = 300, 101
	produceSums(t, seeds, 0, n)
	sum := runningSum(nil)
	fn := func(ctx context.Context, r transform.Record, st transform.Store) ([]transform.Record, error) {
		if v, _ := r.Value.(map[string]any); v["i"] == int64(big) {
			noise := make([]byte, 10_000) // incompressible: the broker measures compressed batches
			_, _ = rand.NewChaCha8([32]byte{1}).Read(noise)
			if err := st.Put([]byte("big"), noise); err != nil {
				return nil, err
			}
		}
		return sum(ctx, r, st)
	}
	s := sumStage(t, seeds, t.TempDir(), fn)
	if err := runUntilStats(t, s, func(st stage.Stats) bool { return accounted(st) >= n }); err != nil {
		t.Fatal(err)
	}
	checkSums(t, seeds, n, big)
	var reason string
	for _, r := range drain(t, seeds, dlqTopic) {
		if v := string(r.Value); v == fmt.Sprintf(`{"i":%d,"amount":%d}`, big, big%5) {
			reason = header(r, deadletter.HeaderReason)
		}
	}
	if reason != deadletter.ReasonProduce {
		t.Fatalf("the record with the large value: dead letter reason %q, want %s", reason, deadletter.ReasonProduce)
	}
}
