//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestRestoreNoCheckpointAfterDeletion: a dedupe stage processes events,
// stops, and starts again with an empty state directory after the records
// of changelog partition 1 were deleted (DeleteRecords to its end). With
// no checkpoint, the rebuild of partition 1 starts at a log start past 0:
// the state it held is lost, and the stage says so with the "partition
// state lost" warning; partition 0, whose changelog starts at 0, is a
// plain rebuild.
func TestRestoreNoCheckpointAfterDeletion(t *testing.T) {
	in, _, _, stage, topo := dedupeTopology(t, 500)
	changelog := "exactly-" + stage + "-dedupe-changelog"
	exactlyCmd(t, "topics", "create", "--topology", topo)

	const events = 2000
	var lines [][]byte
	for i := range events {
		lines = append(lines, line(i))
	}
	first := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir())
	kcatProduce(t, in, lines)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	first.stop()

	cl := kafkaClient(t)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	setPolicy := func(policy string) {
		t.Helper()
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: &policy}}, changelog)
		if err == nil {
			_, err = rs.On(changelog, nil)
		}
		if err != nil {
			t.Fatalf("set cleanup.policy=%s on %s: %v", policy, changelog, err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, changelog)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(changelog, 1)
	if !ok || end.Offset <= 0 {
		t.Fatalf("changelog %s partition 1 ends at %v (%v), want records", changelog, end.Offset, ok)
	}
	setPolicy("compact,delete")
	del := kadm.Offsets{}
	del.AddOffset(changelog, 1, end.Offset, -1)
	var delErr error
	eventually(t, 30*time.Second, func() bool {
		rs, err := adm.DeleteRecords(ctx, del)
		if err == nil {
			err = rs.Error()
		}
		delErr = err
		return err == nil
	}, func() string { return fmt.Sprintf("delete records of %s: %v", changelog, delErr) })
	setPolicy("compact")

	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--state-dir", t.TempDir())
	waitLogged(t, p, "state restored", 1, 2*time.Minute, "the stage finished no restore")
	p.stop()
	var lost []string
	for _, l := range strings.Split(p.logs.String(), "\n") {
		if strings.Contains(l, `level=WARN msg="partition state lost`) {
			lost = append(lost, l)
		}
	}
	if len(lost) != 1 || !strings.Contains(lost[0], "partition=1 ") || !strings.Contains(lost[0], "no checkpoint") ||
		!strings.Contains(lost[0], "pass the dedupe step again") {
		t.Fatalf("WARN lines of lost state: %q, want one for partition 1 without checkpoint, with the consequence", lost)
	}
}
