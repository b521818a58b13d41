package reset

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/status"
)

// openTxnCluster returns a kfake cluster whose topic "in" (one partition)
// holds 10 committed records at offsets 0-9, then a transaction of 5
// records at 10-14 that stays open, and the client options to reach it.
func openTxnCluster(t *testing.T) ([]kgo.Opt, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	ctx := context.Background()
	plain, err := kgo.NewClient(append(kopts, kgo.DefaultProduceTopic("in"))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	for i := range 10 {
		if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	txn, err := kgo.NewClient(append(kopts, kgo.DefaultProduceTopic("in"), kgo.TransactionalID("loader"),
		kgo.TransactionTimeout(time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Close)
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte{byte(i)}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	return kopts, kadm.NewClient(plain)
}

// Every position a reset computes is at most the last stable offset, the
// first offset of the open transaction: a position inside it would skip
// its first records and read the rest once it commits.
func TestPlanStopsAtOpenTransaction(t *testing.T) {
	_, adm := openTxnCluster(t)
	ctx := context.Background()
	future := time.Now().Add(time.Hour)
	for _, tt := range []struct {
		name    string
		target  Target
		want    int64
		wantErr string
	}{
		{name: "latest", target: Target{Kind: Latest}, want: 10},
		{name: "earliest", target: Target{Kind: Earliest}, want: 0},
		{name: "time after every record", target: Target{Kind: Time, Time: future}, want: 10},
		{name: "time before every record", target: Target{Kind: Time, Time: time.Unix(0, 0)}, want: 0},
		{name: "offset at the last stable offset", target: Target{Kind: Offsets, Offsets: map[int32]int64{0: 10}}, want: 10},
		{name: "offset inside the open transaction", target: Target{Kind: Offsets, Offsets: map[int32]int64{0: 12}},
			wantErr: "offset 12 is past the last stable offset 10"},
		{name: "offset at the high watermark", target: Target{Kind: Offsets, Offsets: map[int32]int64{0: 15}},
			wantErr: "offset 15 is past the last stable offset 10"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := PlanStage(ctx, adm, "clean", "exactly-clean", "in", tt.target)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a usage error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Changes) != 1 || p.Changes[0].New != tt.want {
				t.Fatalf("changes %+v, want partition 0 to %d", p.Changes, tt.want)
			}
			if p.Stable[0] != 10 || p.HighWatermark[0] != 15 {
				t.Fatalf("last stable offset %d, high watermark %d, want 10 and 15", p.Stable[0], p.HighWatermark[0])
			}
		})
	}
}

// The dry run names the open transaction and says what the reset does
// about it.
func TestPlanPrintNamesOpenTransaction(t *testing.T) {
	_, adm := openTxnCluster(t)
	p, err := PlanStage(context.Background(), adm, "clean", "exactly-clean", "in", Target{Kind: Latest})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	p.Print(&b)
	out := b.String()
	for _, want := range []string{
		"open transactions on in",
		"FIRST OFFSET",
		"loader",
		"partition 0: new position 10 is at most the last stable offset 10 (high watermark 15), so no open transaction is split",
		"the stage waits at 10 until the transaction ends, then reads all of its records if it commits, none if it aborts",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}
	if len(p.Open) != 1 || p.Open[0].StartOffset != 10 || p.Open[0].TransactionalID != "loader" {
		t.Errorf("open transactions %+v, want loader's at 10", p.Open)
	}
}

// An entry is read back only when the change it describes succeeded.
func TestWithLogCommitsOnlyAppliedResets(t *testing.T) {
	kopts, adm := openTxnCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := ReadLog(ctx, kopts); err != nil || len(got) != 0 {
		t.Fatalf("before any reset: %v, %v; want no entries", got, err)
	}
	p, err := PlanStage(ctx, adm, "clean", "exactly-clean", "in", Target{Kind: Latest})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("commit refused")
	if err := WithLog(ctx, kopts, p, func(context.Context) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("failed apply: err = %v", err)
	}
	applied := 0
	if err := WithLog(ctx, kopts, p, func(context.Context) error { applied++; return nil }); err != nil || applied != 1 {
		t.Fatalf("apply: err = %v, applied %d times", err, applied)
	}
	got, err := ReadLog(ctx, kopts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("entries %+v, want the applied reset's only", got)
	}
	e := got[0]
	if e.Kind != "stage" || e.Name != "clean" || e.Topic != "in" || e.Target != "latest" ||
		len(e.Partitions) != 1 || e.Partitions[0] != (LogPartition{Partition: 0, From: NoPosition, To: 10}) {
		t.Fatalf("entry %+v", e)
	}
	skips := Skips(got, LogEntry{Kind: "stage", Name: "clean", Topic: "in", TopicID: e.TopicID})
	if len(skips[0]) != 1 || skips[0][0].From != 0 || skips[0][0].To != 10 {
		t.Fatalf("skips %+v, want [0, 10)", skips)
	}
}

func TestSkips(t *testing.T) {
	entry := func(name string, parts ...LogPartition) LogEntry {
		return LogEntry{Kind: "stage", Name: name, Topic: "in", TopicID: "id", Target: "latest", Partitions: parts}
	}
	type rng struct{ from, to int64 }
	for _, tt := range []struct {
		name    string
		entries []LogEntry
		want    map[int32][]rng
	}{
		{name: "forward", entries: []LogEntry{entry("clean", lp(0, 100, 500))}, want: map[int32][]rng{0: {{100, 500}}}},
		{name: "nothing stored", entries: []LogEntry{entry("clean", lp(1, NoPosition, 40))}, want: map[int32][]rng{1: {{0, 40}}}},
		{name: "backward skips nothing", entries: []LogEntry{entry("clean", lp(0, 500, 100))}, want: map[int32][]rng{}},
		{name: "a later rewind reads part again", entries: []LogEntry{
			entry("clean", lp(0, 100, 500)), entry("clean", lp(0, 800, 300))},
			want: map[int32][]rng{0: {{100, 300}}}},
		{name: "a rewind below the range reads it all again", entries: []LogEntry{
			entry("clean", lp(0, 100, 500)), entry("clean", lp(0, 800, 0))},
			want: map[int32][]rng{}},
		{name: "two skips", entries: []LogEntry{
			entry("clean", lp(0, 100, 500)), entry("clean", lp(0, 600, 900))},
			want: map[int32][]rng{0: {{100, 500}, {600, 900}}}},
		{name: "other stage", entries: []LogEntry{entry("enrich", lp(0, 100, 500))}, want: map[int32][]rng{}},
		{name: "another positions table", entries: []LogEntry{{Kind: "stage", Name: "clean", PositionsTable: "other.positions",
			Topic: "in", TopicID: "id", Partitions: []LogPartition{lp(0, 100, 500)}}}, want: map[int32][]rng{}},
		{name: "topic re-created", entries: []LogEntry{{Kind: "stage", Name: "clean", Topic: "in", TopicID: "old",
			Partitions: []LogPartition{lp(0, 100, 500)}}}, want: map[int32][]rng{}},
		{name: "a range deleted unread is no reset", entries: []LogEntry{{Kind: "stage", Name: "clean", Topic: "in", TopicID: "id",
			Cause: "deleted_unread", Partitions: []LogPartition{lp(0, 100, 500)}}}, want: map[int32][]rng{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Skips(tt.entries, LogEntry{Kind: "stage", Name: "clean", Topic: "in", TopicID: "id"})
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for p, rs := range tt.want {
				if len(got[p]) != len(rs) {
					t.Fatalf("partition %d: got %+v, want %+v", p, got[p], rs)
				}
				for i, r := range rs {
					if got[p][i].From != r.from || got[p][i].To != r.to {
						t.Fatalf("partition %d: got %+v, want %+v", p, got[p], rs)
					}
				}
			}
		})
	}
}

// A transaction its coordinator does not know, or open past its timeout,
// hangs: the plan says nothing ends it and how to abort it.
func TestPlanPrintNamesHangingTransaction(t *testing.T) {
	p := Plan{Kind: "sink", Topic: "in", Changes: []Change{{Partition: 0, Current: 5, New: 10}},
		Stable: map[int32]int64{0: 10}, HighWatermark: map[int32]int64{0: 15},
		Open: []status.OpenTxn{{Topic: "in", Partition: 0, ProducerID: 9, StartOffset: 10, OpenMs: 3_600_000,
			Reason: "no coordinator knows this producer ID: nothing will end the transaction"}}}
	var b strings.Builder
	p.Print(&b)
	want := "partition 0: the transaction at 10 hangs (no coordinator knows this producer ID: nothing will end the transaction): " +
		"nothing will end it, so the sink would wait there for good; abort it: kafka-transactions.sh --bootstrap-server BROKER abort --topic in --partition 0 --start-offset 10"
	if !strings.Contains(b.String(), want) {
		t.Errorf("plan lacks %q:\n%s", want, b.String())
	}
}

// lp is one partition of a log entry.
func lp(p int32, from, to int64) LogPartition { return LogPartition{Partition: p, From: from, To: to} }
