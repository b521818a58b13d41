package verify

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/resetlog"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// Input records deleted (by retention, here by DeleteRecords) above the
// stage's committed offset were never read: verify reports the partition
// and is not OK. A partition deleted only below the committed offset is
// no problem.
func TestRunReportsInputDeletedUnread(t *testing.T) {
	t.Setenv(topology.BrokersEnv, "")
	for _, tc := range []struct {
		name      string
		deleteTo  int64 // partition 0's new log start
		committed int64 // partition 0's committed offset; -1: none
		recorded  []resetlog.Partition
		want      []DeletedUnread
		problem   string
	}{
		{"deleted unread", 6, 2, nil, []DeletedUnread{{Topic: "in", Partition: 0, Position: 2, LogStart: 6}},
			"in/0: stage s's group committed offset is 2, below the log start offset 6: 4 offsets were deleted"},
		{"deleted once read", 6, 6, nil, nil, ""},
		{"nothing deleted", 0, 2, nil, nil, ""},
		// "in" is written outside the topology: its history before
		// the stage first ran is no loss (TestDeletedUnreadFirstStart).
		{"deleted before any offset was committed", 6, -1, nil, nil, ""},
		{"recorded where it first started", 6, 9, []resetlog.Partition{{Partition: 0, From: 0, To: 6, NoPosition: true}}, nil, ""},
		{"read past a range the stage recorded", 6, 9, []resetlog.Partition{{Partition: 0, From: 2, To: 6}},
			[]DeletedUnread{{Topic: "in", Partition: 0, Position: 2, LogStart: 6, Recorded: true}},
			"in/0: stage s found offsets 2 to 5 deleted (retention.ms, or records deleted) before it read them"},
		{"a recorded range and a lagging offset are one", 6, 2, []resetlog.Partition{{Partition: 0, From: 2, To: 4}},
			[]DeletedUnread{{Topic: "in", Partition: 0, Position: 2, LogStart: 6, Recorded: true}},
			"in/0: stage s found offsets 2 to 5 deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr := topologytest.Cluster(t, 2)
			topologytest.CommitInput(ctx, t, addr, 2, 2, 5) // 12 offsets a partition
			adm := topologytest.Admin(t, addr)
			var offs kadm.Offsets
			if tc.committed >= 0 {
				offs.AddOffset("in", 0, tc.committed, -1)
			}
			offs.AddOffset("in", 1, 0, -1)
			if _, err := adm.CommitOffsets(ctx, "exactly-s", offs); err != nil {
				t.Fatal(err)
			}
			if tc.deleteTo > 0 {
				var del kadm.Offsets
				del.AddOffset("in", 0, tc.deleteTo, -1)
				rs, err := adm.DeleteRecords(ctx, del)
				if err == nil {
					err = rs.Error()
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if tc.recorded != nil {
				e := resetlog.Entry{Kind: "stage", Name: "s", Topic: "in", Cause: resetlog.CauseDeletedUnread, Partitions: tc.recorded}
				if err := resetlog.Write(ctx, []kgo.Opt{kgo.SeedBrokers(addr)}, e); err != nil {
					t.Fatal(err)
				}
			}
			f := topologytest.Load(t, topologytest.Stage(addr, "s", 2, ""))
			rep, err := Run(ctx, Config{Topology: f, EventID: "event_id", OpenTxnWait: time.Millisecond, KafkaOptions: []kgo.Opt{kgo.SeedBrokers(addr)}})
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Stages[0].DeletedUnread
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Fatalf("deleted unread %+v, want %+v", got, tc.want)
			}
			var problem bool
			for _, p := range rep.Problems {
				problem = problem || (tc.problem != "" && strings.Contains(p, tc.problem))
			}
			if problem != (len(tc.want) > 0) || (problem && rep.OK) {
				t.Errorf("problems %q, OK %v", rep.Problems, rep.OK)
			}
		})
	}
}

// Outputs a stage recorded as written past their topic's retention are a
// problem once deleted from a topic that no stage or sink of the topology
// reads: nothing tells that anyone read them. Not yet deleted, they are
// none.
func TestRunReportsOutputsDeletedPastRetention(t *testing.T) {
	t.Setenv(topology.BrokersEnv, "")
	for _, tc := range []struct {
		name     string
		deleteTo int64 // out/0's new log start
		want     []DeletedUnread
	}{
		{"deleted", 4, []DeletedUnread{{Topic: "out", Partition: 0, Position: 1, LogStart: 3, Recorded: true}}},
		{"partly deleted", 2, []DeletedUnread{{Topic: "out", Partition: 0, Position: 1, LogStart: 2, Recorded: true}}},
		{"kept", 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr := topologytest.Cluster(t, 1)
			kopts := []kgo.Opt{kgo.SeedBrokers(addr)}
			cl, err := kgo.NewClient(append(kopts, kgo.DefaultProduceTopic("out"))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for range 5 {
				if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(`{}`)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
			e := resetlog.Entry{Kind: "stage", Name: "s", Topic: "out", Cause: resetlog.CausePastRetention,
				Partitions: []resetlog.Partition{{Partition: 0, From: 1, To: 3}}}
			if err := resetlog.Write(ctx, kopts, e); err != nil {
				t.Fatal(err)
			}
			if tc.deleteTo > 0 {
				var del kadm.Offsets
				del.AddOffset("out", 0, tc.deleteTo, -1)
				if rs, err := topologytest.Admin(t, addr).DeleteRecords(ctx, del); err != nil || rs.Error() != nil {
					t.Fatal(err, rs.Error())
				}
			}
			var offs kadm.Offsets
			offs.AddOffset("in", 0, 0, -1)
			if _, err := topologytest.Admin(t, addr).CommitOffsets(ctx, "exactly-s", offs); err != nil {
				t.Fatal(err)
			}
			f := topologytest.Load(t, topologytest.Stage(addr, "s", 1, ""))
			rep, err := Run(ctx, Config{Topology: f, EventID: "event_id", OpenTxnWait: time.Millisecond, KafkaOptions: kopts})
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Stages[0].DeletedOutputs
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Fatalf("deleted outputs %+v, want %+v", got, tc.want)
			}
			if rep.OK != (tc.want == nil) {
				t.Errorf("OK %v, problems %q", rep.OK, rep.Problems)
			}
		})
	}
}

// An input with no output and no dead letter left is not lost when its
// output may lie below the log start of an output partition: below the
// first output still there of its input partition, retention took it.
// Without a log start past 0, or above that first output, it is lost.
func TestStageAccountOutputDeleted(t *testing.T) {
	for _, tc := range []struct {
		name        string
		outStart    int64 // out/0's log start
		wantDeleted int64
		wantLost    int64
	}{
		{name: "outputs deleted", outStart: 4, wantDeleted: 2},
		{name: "nothing deleted", outStart: 0, wantLost: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			json, _ := serde.New(serde.JSON)
			c := &StageCheck{Name: "st", Input: "in", Outputs: []string{"out"}, DeadLetter: "dlq", in: json, out: json,
				group: map[int32]int64{0: 4}, DeadLettersByReason: map[string]int64{}}
			c.lineage, c.ids = newTestSpills(t)
			var rec [linSize]byte
			var idRec [idSize]byte
			// Inputs 0-3; only the outputs of 2 and 3 are left.
			for _, h := range []handled{{kIn, input(0, "a")}, {kIn, input(1, "b")}, {kIn, input(2, "c")}, {kIn, input(3, "d")},
				{kOut, output(2, 0, "c")}, {kOut, output(3, 0, "d")}} {
				if err := c.handle(h.kind, h.r, rec[:], idRec[:], "id"); err != nil {
					t.Fatal(err)
				}
			}
			c.starts = map[string]map[int32]int64{"in": {0: 0}, "out": {0: tc.outStart}, "dlq": {0: 0}}
			if err := c.account(map[int32]int64{0: 0}); err != nil {
				t.Fatal(err)
			}
			if c.Processed != 2 || c.OutputDeleted != tc.wantDeleted || c.Lost != tc.wantLost {
				t.Errorf("processed %d, output deleted %d, lost %d; want 2, %d, %d", c.Processed, c.OutputDeleted, c.Lost, tc.wantDeleted, tc.wantLost)
			}
		})
	}
}

// Offsets deleted below where a reader first started (it had no position)
// are lost only from a topic the topology writes; of a topic written
// outside it they are its producers' history, which retention was free
// to delete before the reader existed. Below a position, or recorded
// below one, they are lost whoever wrote the topic.
func TestDeletedUnreadFirstStart(t *testing.T) {
	starts := map[int32]int64{0: 6, 1: 4, 2: 0}
	positions := map[int32]int64{1: 2} // 0 and 2 have none
	recorded := map[int32][]resetlog.Partition{
		0: {{Partition: 0, From: 0, To: 3, NoPosition: true}},
		2: {{Partition: 2, From: 1, To: 2}},
	}
	for _, tc := range []struct {
		written bool
		want    []DeletedUnread
	}{
		{true, []DeletedUnread{
			{Topic: "t", Partition: 0, Position: 0, LogStart: 6, NoPosition: true, Recorded: true},
			{Topic: "t", Partition: 1, Position: 2, LogStart: 4},
			{Topic: "t", Partition: 2, Position: 1, LogStart: 2, Recorded: true},
		}},
		{false, []DeletedUnread{
			{Topic: "t", Partition: 1, Position: 2, LogStart: 4},
			{Topic: "t", Partition: 2, Position: 1, LogStart: 2, Recorded: true},
		}},
	} {
		got := deletedUnread("t", tc.written, positions, starts, recorded)
		if !slices.Equal(got, tc.want) {
			t.Errorf("written %v: %+v, want %+v", tc.written, got, tc.want)
		}
	}
}
