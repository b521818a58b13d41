package verify

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

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
		committed int64 // partition 0's committed offset
		want      []DeletedUnread
	}{
		{"deleted unread", 6, 2, []DeletedUnread{{Topic: "in", Partition: 0, Position: 2, LogStart: 6}}},
		{"deleted once read", 6, 6, nil},
		{"nothing deleted", 0, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			addr := topologytest.Cluster(t, 2)
			topologytest.CommitInput(ctx, t, addr, 2, 2, 5) // 12 offsets a partition
			adm := topologytest.Admin(t, addr)
			var offs kadm.Offsets
			offs.AddOffset("in", 0, tc.committed, -1)
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
			f := topologytest.Load(t, topologytest.Stage(addr, "s", 2, ""))
			rep, err := Run(ctx, Config{Topology: f, EventID: "event_id", OpenTxnWait: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Stages[0].DeletedUnread
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Fatalf("deleted unread %+v, want %+v", got, tc.want)
			}
			var problem bool
			for _, p := range rep.Problems {
				problem = problem || strings.Contains(p, "in/0: stage s's group committed offset is 2, below the log start offset 6: 4 offsets were deleted")
			}
			if problem != (len(tc.want) > 0) || (problem && rep.OK) {
				t.Errorf("problems %q, OK %v", rep.Problems, rep.OK)
			}
		})
	}
}
