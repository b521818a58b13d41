package stage_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
	"github.com/exactly-io/exactly/processor/internal/stage"
)

// Input records deleted before the stage read them are written to the
// reset log as the stage reads on from the log start: below a committed
// offset (partition 0), and below the log start of a partition with no
// committed offset (partition 1). A partition read to its end before the
// deletion (partition 2) records nothing.
func TestStageRecordsInputDeletedUnread(t *testing.T) {
	seeds := newCluster(t)
	adm := adminFor(t, seeds)
	id := inputTopicID(t, adm)
	parts := map[int32][]string{0: events("p0", 5), 1: events("p1", 5), 2: events("p2", 5)}
	producePartitions(t, seeds, parts)
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: inTopic, Partition: 0, At: 1, LeaderEpoch: -1, Metadata: partpos.CommitMetadata(id)})
	offs.Add(kadm.Offset{Topic: inTopic, Partition: 2, At: 5, LeaderEpoch: -1, Metadata: partpos.CommitMetadata(id)})
	if err := adm.CommitAllOffsets(context.Background(), "exactly-clean", offs); err != nil {
		t.Fatal(err)
	}
	var del kadm.Offsets
	del.AddOffset(inTopic, 0, 3, -1)
	del.AddOffset(inTopic, 1, 2, -1)
	del.AddOffset(inTopic, 2, 5, -1)
	if rs, err := adm.DeleteRecords(context.Background(), del); err != nil || rs.Error() != nil {
		t.Fatal(err, rs.Error())
	}

	s := stageWith(t, seeds, stage.ExactlyOnce)
	if err := runUntil(t, s, 5); err != nil { // p0 3-4, p1 2-4
		t.Fatal(err)
	}
	got := map[int32]resetlog.Partition{}
	for _, r := range drain(t, seeds, resetlog.Topic) {
		var e resetlog.Entry
		if err := json.Unmarshal(r.Value, &e); err != nil {
			t.Fatal(err)
		}
		if e.Kind != "stage" || e.Name != "clean" || e.Topic != inTopic || e.Cause != resetlog.CauseDeletedUnread || e.TopicID != kadm.TopicID(id).String() {
			t.Errorf("entry %+v: want stage clean, input %s, cause %s", e, inTopic, resetlog.CauseDeletedUnread)
		}
		for _, p := range e.Partitions {
			got[p.Partition] = p
		}
	}
	// Partition 1's range lies below where the stage first started:
	// verify counts it only if the topology writes the topic.
	want := map[int32]resetlog.Partition{0: {Partition: 0, From: 1, To: 3}, 1: {Partition: 1, From: 0, To: 2, NoPosition: true}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("recorded %v, want %v", got, want)
	}
}
