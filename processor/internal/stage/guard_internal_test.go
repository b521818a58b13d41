package stage

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// inputTime is the timestamp of every input record of these tests.
var inputTime = time.UnixMilli(1700000000000)

// lineageRecord is an output of stage from input partition p, offset o;
// outputs keep their input's timestamp.
func lineageRecord(topic, stage string, p int32, o int64) *kgo.Record {
	return &kgo.Record{Topic: topic, Value: []byte(`{}`), Timestamp: inputTime, Headers: []kgo.RecordHeader{
		{Key: HeaderLineageStage, Value: []byte(stage)},
		{Key: HeaderLineageTopic, Value: []byte("in")},
		{Key: HeaderLineagePartition, Value: strconv.AppendInt(nil, int64(p), 10)},
		{Key: HeaderLineageOffset, Value: strconv.AppendInt(nil, o, 10)},
		{Key: HeaderLineageIndex, Value: []byte("0")},
	}}
}

// oldOutput is an output of stage s from input partition p, offset o, of
// an earlier incarnation of the input topic: another timestamp.
func oldOutput(p int32, o int64) *kgo.Record {
	r := lineageRecord("out", "s", p, o)
	r.Timestamp = inputTime.Add(-time.Hour)
	return r
}

// deadLetterRecord is a dead letter of stage from input partition p, offset o.
func deadLetterRecord(stage string, p int32, o int64) *kgo.Record {
	in := &kgo.Record{Topic: "in", Partition: p, Offset: o, Value: []byte("x"), Timestamp: inputTime}
	return dlq.DeadLetter("dlq", stage, in, &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: errors.New("bad")})
}

// guardCluster starts a kfake cluster with topics in and out of 3
// partitions and dlq of 1; it returns the address and a client that
// produces to the partition each record names, closed when t ends.
func guardCluster(t *testing.T) (string, *kgo.Client) {
	t.Helper()
	addr := topologytest.Cluster(t, 3)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return addr, cl
}

func TestResumeGuard(t *testing.T) {
	tests := []struct {
		name      string
		records   []*kgo.Record
		committed []int32   // input partitions with a committed offset
		inputAt   time.Time // timestamp of the input records; default inputTime
		inputs    int       // input records per partition; default 10
		want      map[int32]int64
		other     string // the stage the refusal names when not s
	}{
		{name: "new stage, empty outputs"},
		// The output topic holds what another stage wrote from this
		// input: this stage before a rename (its group was
		// exactly-other), whose outputs would all be written again
		// Refused, naming both remedies.
		{name: "outputs of another stage from this input", records: []*kgo.Record{lineageRecord("out", "other", 0, 5)},
			want: map[int32]int64{0: 5}, other: "other"},
		// A shared dead-letter topic holds other stages' dead letters of
		// the same input: no sign of this stage.
		{name: "dead letters of another stage", records: []*kgo.Record{deadLetterRecord("other", 0, 5)}},
		// Renamed, and the old name's last record of a partition was
		// dead-lettered: the offsets named are after it, so following
		// them does not write it again.
		{name: "renamed, a dead letter last", records: []*kgo.Record{lineageRecord("out", "other", 0, 5), deadLetterRecord("other", 0, 6), deadLetterRecord("other", 1, 2)},
			want: map[int32]int64{0: 6, 1: 2}, other: "other"},
		{name: "offsets committed", committed: []int32{0, 1, 2},
			records: []*kgo.Record{lineageRecord("out", "s", 0, 5), lineageRecord("out", "s", 1, 9)}},
		{name: "group lost its offsets", want: map[int32]int64{0: 7, 1: 9},
			records: []*kgo.Record{lineageRecord("out", "s", 0, 5), lineageRecord("out", "s", 0, 7), lineageRecord("out", "s", 1, 9)}},
		{name: "only dead letters", want: map[int32]int64{2: 3},
			records: []*kgo.Record{deadLetterRecord("s", 2, 3)}},
		{name: "a partition added after the last commit", committed: []int32{0, 1},
			records: []*kgo.Record{lineageRecord("out", "s", 0, 5), lineageRecord("out", "s", 1, 9)}},
		{name: "one partition's offset lost", committed: []int32{0, 1}, want: map[int32]int64{2: 4},
			records: []*kgo.Record{lineageRecord("out", "s", 0, 5), lineageRecord("out", "s", 2, 4)}},
		// The input topic was deleted and created again: Kafka deleted the
		// group's offsets, and the outputs came from the old topic.
		{name: "input recreated, other records at the offsets", inputAt: inputTime.Add(time.Hour),
			records: []*kgo.Record{lineageRecord("out", "s", 0, 5), lineageRecord("out", "s", 1, 9)}},
		{name: "input recreated, shorter", inputs: 3,
			records: []*kgo.Record{lineageRecord("out", "s", 0, 5), lineageRecord("out", "s", 1, 9)}},
		// The old incarnation's outputs carry higher source offsets than
		// the current one holds or than its outputs: the current outputs
		// below them still count, so the partition does not start at its
		// earliest offset and write its outputs twice.
		{name: "input recreated, then processed, then the group lost", inputs: 3, want: map[int32]int64{0: 2, 1: 1},
			records: []*kgo.Record{oldOutput(0, 7), oldOutput(0, 2), lineageRecord("out", "s", 0, 1), lineageRecord("out", "s", 0, 2),
				oldOutput(1, 9), lineageRecord("out", "s", 1, 1), oldOutput(2, 8)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, cl := guardCluster(t)
			ctx := context.Background()
			at, n := tt.inputAt, tt.inputs
			if at.IsZero() {
				at = inputTime
			}
			if n == 0 {
				n = 10
			}
			var inputs []*kgo.Record
			for p := range int32(3) {
				for range n {
					inputs = append(inputs, &kgo.Record{Topic: "in", Partition: p, Value: []byte("{}"), Timestamp: at})
				}
			}
			if err := cl.ProduceSync(ctx, append(inputs, tt.records...)...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			var os kadm.Offsets
			for _, p := range tt.committed {
				os.Add(kadm.Offset{Topic: "in", Partition: p, At: 0, LeaderEpoch: -1})
			}
			if len(os) > 0 {
				if _, err := kadm.NewClient(cl).CommitOffsets(ctx, "exactly-s", os); err != nil {
					t.Fatal(err)
				}
			}
			s, err := New(Config{Stage: "s", InstanceID: "i", Brokers: []string{addr}, Input: "in", Output: "out", DeadLetter: "dlq"})
			if err != nil {
				t.Fatal(err)
			}
			err = s.guard(ctx)
			var re *ResumeError
			switch {
			case tt.want == nil && err != nil:
				t.Fatalf("guard: %v, want nil", err)
			case tt.want == nil:
				return
			case !errors.As(err, &re) || !errors.Is(err, ErrNoCommittedOffsets):
				t.Fatalf("guard: %v, want a *ResumeError", err)
			}
			if len(re.Found) != len(tt.want) {
				t.Fatalf("found %v, want %v", re.Found, tt.want)
			}
			for p, o := range tt.want {
				if re.Found[p] != o {
					t.Errorf("partition %d: highest source offset %d, want %d", p, re.Found[p], o)
				}
			}
			if msg := err.Error(); !strings.Contains(msg, "exactly reset --stage s") || !strings.Contains(msg, "--to-offsets") {
				t.Errorf("message does not name exactly reset: %s", msg)
			}
			if re.Other != tt.other || (tt.other != "" && !strings.Contains(err.Error(), "renamed from \""+tt.other+"\"")) {
				t.Errorf("other stage %q, want %q: %s", re.Other, tt.other, err)
			}
		})
	}
}

// TestResumeGuardAtLeastOnce: an at-least-once stage's outputs without
// offsets are its normal state after a crash; it is not refused.
func TestResumeGuardAtLeastOnce(t *testing.T) {
	addr, cl := guardCluster(t)
	ctx := context.Background()
	var recs []*kgo.Record
	for range 10 {
		recs = append(recs, &kgo.Record{Topic: "in", Partition: 0, Value: []byte("{}"), Timestamp: inputTime})
	}
	if err := cl.ProduceSync(ctx, append(recs, lineageRecord("out", "s", 0, 5))...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		guarantee string
		refused   bool
	}{{ExactlyOnce, true}, {AtLeastOnce, false}} {
		t.Run(tt.guarantee, func(t *testing.T) {
			s, err := New(Config{Stage: "s", InstanceID: "i", Brokers: []string{addr}, Input: "in", Output: "out", DeadLetter: "dlq", Guarantee: tt.guarantee})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.checkResume(ctx); errors.Is(err, ErrNoCommittedOffsets) != tt.refused {
				t.Fatalf("checkResume: %v, refused want %v", err, tt.refused)
			}
		})
	}
}

// TestResumeGuardRecordsInputDeletedUnread: the outputs show partition 0
// read up to offset 3, and the broker has since deleted offsets 4 to 6,
// which the stage never read. The refusal says so, suggests the log
// start (7), which exactly reset accepts, and the range is in the reset
// log, so that verify reports it whatever position the user picks.
// Partition 1, read past its log start, loses nothing.
func TestResumeGuardRecordsInputDeletedUnread(t *testing.T) {
	addr, cl := guardCluster(t)
	ctx := context.Background()
	var recs []*kgo.Record
	for p := range int32(2) {
		for range 10 {
			recs = append(recs, &kgo.Record{Topic: "in", Partition: p, Value: []byte("{}"), Timestamp: inputTime})
		}
	}
	recs = append(recs, lineageRecord("out", "s", 0, 3), lineageRecord("out", "s", 1, 5))
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	var del kadm.Offsets
	del.AddOffset("in", 0, 7, -1)
	del.AddOffset("in", 1, 2, -1)
	if rs, err := adm.DeleteRecords(ctx, del); err != nil || rs.Error() != nil {
		t.Fatal(err, rs.Error())
	}
	s, err := New(Config{Stage: "s", InstanceID: "i", Brokers: []string{addr}, Input: "in", Output: "out", DeadLetter: "dlq"})
	if err != nil {
		t.Fatal(err)
	}
	err = s.guard(ctx)
	var re *ResumeError
	if !errors.As(err, &re) {
		t.Fatalf("guard: %v, want a *ResumeError", err)
	}
	want := map[int32]resetlog.Partition{0: {Partition: 0, From: 4, To: 7}}
	if !reflect.DeepEqual(re.Deleted, want) || re.NotRecorded != nil {
		t.Errorf("deleted %v (not recorded: %v), want %v", re.Deleted, re.NotRecorded, want)
	}
	msg := err.Error()
	for _, s := range []string{"--to-offsets 0=7,1=6", "partition 0 offsets 4 to 6", "exactly verify reports them as lost"} {
		if !strings.Contains(msg, s) {
			t.Errorf("refusal lacks %q: %s", s, msg)
		}
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(resetlog.Topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fs := rd.PollFetches(pctx)
	if fs.NumRecords() != 1 {
		t.Fatalf("reset log holds %d records (%v), want 1", fs.NumRecords(), fs.Errors())
	}
	var e resetlog.Entry
	if err := json.Unmarshal(fs.Records()[0].Value, &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != "stage" || e.Name != "s" || e.Topic != "in" || e.Cause != resetlog.CauseDeletedUnread || e.TopicID == "" ||
		!reflect.DeepEqual(e.Partitions, []resetlog.Partition{want[0]}) {
		t.Errorf("reset log entry %+v, want stage s's deleted_unread range %v of in", e, want[0])
	}
}
