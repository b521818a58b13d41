//go:build integration

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
)

// deleteTo deletes the records of topic below offsets, by partition
// (kadm's DeleteRecords, as kafka-delete-records.sh does).
func deleteTo(t testing.TB, topic string, offsets map[int32]int64) {
	t.Helper()
	var del kadm.Offsets
	for p, o := range offsets {
		del.AddOffset(topic, p, o, -1)
	}
	rs, err := adminClient(t).DeleteRecords(context.Background(), del)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatalf("delete records of %s: %v", topic, err)
	}
}

// endOffsets returns topic's high watermarks by partition.
func endOffsets(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	ends, err := adminClient(t).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// deletedProblem reports whether rep names a deleted range of topic.
func deletedProblem(rep processor.VerifyReport, topic string) bool {
	for _, p := range rep.Problems {
		if strings.HasPrefix(p, topic+"/") && strings.Contains(p, "deleted") {
			return true
		}
	}
	return false
}

// oneStage writes a topology of one JSON stage over new one-partition
// topics named after prefix, and returns its input, output and name, the
// file, and run, which runs the stage until its output holds want records.
func oneStage(t *testing.T, prefix string) (in, out, name, topo string, run func(want int)) {
	t.Helper()
	in, out, dlq, name := uniqueName(prefix+"_in"), uniqueName(prefix+"_out"), uniqueName(prefix+"_dlq"), uniqueName(prefix)
	topo = userTopology(t, []fileTopic{{in, 1, nil}, {out, 1, nil}, {dlq, 1, nil}}, "stages:\n"+stageYAML{name: name, in: in, out: out, dlq: dlq,
		format: "json", key: "event_id", interval: "100ms", maxRecords: 1000}.yaml())
	run = func(want int) {
		p := start(t, nil, "run", "--topology", topo, "--instance-id", "i1")
		eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == want }, func() string {
			return fmt.Sprintf("%d of %d outputs\n%s", kcatCount(t, out), want, tail(p.logs.String(), 10))
		})
		p.stop()
	}
	return in, out, name, topo, run
}

// A stage stopped while records it had not read were deleted (a
// DeleteRecords here; retention does the same) resumes at the log start
// and commits past them. Verify sees the range while the offset lags, and
// after the stage moved on too: the stage recorded it in exactly-resets.
func TestVerifySeesInputDeletedUnreadAfterTheStageMovedOn(t *testing.T) {
	t.Parallel()
	in, _, _, topo, run := oneStage(t, "du")
	now := time.Now()
	produceOld(t, in, "a", 5, now, false) // offsets 0-4
	run(5)
	produceOld(t, in, "b", 5, now, false) // offsets 5-9, never read
	deleteTo(t, in, map[int32]int64{0: 8})

	rep, code := runVerify(t, topo)
	if code == 0 || rep.OK || !deletedProblem(rep, in) {
		t.Fatalf("verify while the offset lags: exit %d, OK %v, problems %q; want offsets 5 to 7 of %s deleted unread", code, rep.OK, rep.Problems, in)
	}

	run(7) // reads 8 and 9 from the log start
	rep, code = runVerify(t, topo)
	got := rep.Stages[0].DeletedUnread
	if code == 0 || rep.OK || len(got) != 1 || got[0].Topic != in || got[0].Position != 5 || got[0].LogStart != 8 || !got[0].Recorded {
		t.Fatalf("verify after the stage moved on: exit %d, OK %v, deleted unread %+v, want offsets 5 to 7 of %s recorded; problems %q", code, rep.OK, got, in, rep.Problems)
	}
}

// A stage whose group was deleted (offsets.retention.minutes does the
// same) while records it had not read were deleted: the resume guard
// refuses, names the lost offsets, suggests the log start, and records
// the range, so verify reports it even after the reset to the earliest
// offset that the refusal also offers.
func TestVerifySeesInputDeletedWhileTheGroupWasGone(t *testing.T) {
	t.Parallel()
	in, _, name, topo, run := oneStage(t, "dg")
	now := time.Now()
	produceOld(t, in, "a", 5, now, false) // offsets 0-4
	run(5)
	produceOld(t, in, "b", 5, now, false) // offsets 5-9, never read
	deleteGroup(t, "exactly-"+name)
	deleteTo(t, in, map[int32]int64{0: 8})

	code, logs := exactlyExit(t, nil, "run", "--topology", topo, "--instance-id", "i1", "--metrics-addr=")
	for _, want := range []string{"no committed offsets", "--to-offsets 0=8", "partition 0 offsets 5 to 7", "exactly verify reports them as lost"} {
		if code == 0 || !strings.Contains(logs, want) {
			t.Fatalf("run after the group and records were deleted: exit %d, want the resume guard's refusal holding %q:\n%s", code, want, tail(logs, 20))
		}
	}
	exactlyCmd(t, "reset", "--topology", topo, "--stage", name, "--to-earliest", "--execute")
	run(7) // reads 8 and 9
	rep, code := runVerify(t, topo)
	if code == 0 || rep.OK || !deletedProblem(rep, in) {
		t.Fatalf("verify after the reset to the earliest offset: exit %d, OK %v, problems %q; want offsets 5 to 7 of %s deleted unread", code, rep.OK, rep.Problems, in)
	}
}

// Records deleted under a running stage before it could read them (here
// records of an open transaction, which read_committed holds back, are
// deleted before the transaction commits): the client resumes at the log
// start, silently, and the stage commits past them. The stage recorded
// the range, so verify reports it after.
func TestVerifySeesInputDeletedUnderARunningStage(t *testing.T) {
	t.Parallel()
	in, out, dlq, name := uniqueName("dr_in"), uniqueName("dr_out"), uniqueName("dr_dlq"), uniqueName("dr")
	topo := userTopology(t, []fileTopic{{in, 1, nil}, {out, 1, nil}, {dlq, 1, nil}}, "stages:\n"+stageYAML{name: name, in: in, out: out, dlq: dlq,
		format: "json", key: "event_id", interval: "100ms", maxRecords: 1000}.yaml())
	produceOld(t, in, "a", 5, time.Now(), false) // offsets 0-4
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "i1")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == 5 }, func() string {
		return fmt.Sprintf("%d of 5 outputs\n%s", kcatCount(t, out), tail(p.logs.String(), 10))
	})
	ctx := context.Background()
	tx := kafkaClient(t, kgo.TransactionalID(uniqueName("dr_tx")), kgo.DefaultProduceTopic(in))
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 { // offsets 5-9
		r := &kgo.Record{Key: fmt.Appendf(nil, "b-%d", i), Value: fmt.Appendf(nil, `{"event_id":"b-%d","n":%d}`, i, i)}
		if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	deleteTo(t, in, map[int32]int64{0: 8})
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == 7 }, func() string {
		return fmt.Sprintf("%d of 7 outputs\n%s", kcatCount(t, out), tail(p.logs.String(), 10))
	})
	waitGroupCaughtUp(t, "exactly-"+name, in, time.Minute)
	p.stop()
	if !strings.Contains(p.logs.String(), "input records were deleted before the stage read them") {
		t.Errorf("the stage did not warn of the deleted range:\n%s", tail(p.logs.String(), 10))
	}
	rep, code := runVerify(t, topo)
	got := rep.Stages[0].DeletedUnread
	if code == 0 || rep.OK || len(got) != 1 || got[0].Position != 5 || got[0].LogStart != 8 || !got[0].Recorded {
		t.Fatalf("verify: exit %d, OK %v, deleted unread %+v, want offsets 5 to 7 of %s recorded; problems %q", code, rep.OK, got, in, rep.Problems)
	}
}

// chainSinkTopology is the topology of sink s whose input a stage of the
// topology writes (the stage itself never runs here): records of it
// deleted before the sink read them are the chain's, and lost.
func chainSinkTopology(t *testing.T, s sinkSpec) string {
	t.Helper()
	up := uniqueName("dus_up")
	b := sinkYAMLHead(t, s, 3, "{ event_id: event_id, body: $value }")
	fmt.Fprintf(b, "    commit: { interval: %s, max_records: %d }\n", s.interval, s.maxRecords)
	text := strings.Replace(b.String(), "sinks:\n", fmt.Sprintf("  - { name: %s, partitions: 1 }\nstages:\n  - name: %s\n    input: { topic: %s }\n    output: { topic: %s }\n    dead_letter: { topic: %s }\nsinks:\n",
		up, up, up, s.in, s.dlq), 1)
	return writeSinkTopology(t, s, "topology.yaml", text)
}

// Records a stage of the chain wrote and the broker deleted before the
// sink reading them stored any position were never read by it: verify
// reports them while the sink has not run, and after it ran and stored
// positions past them (it recorded the range at its start). So too
// records deleted under its stored positions while it was stopped.
func TestVerifySeesInputDeletedBeforeTheSinkFirstRan(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("dus")
	pool := pgPool(t)
	pgExec(t, pool, "CREATE SCHEMA IF NOT EXISTS "+s.schema)
	topo := chainSinkTopology(t, s)
	kcatProduce(t, s.in, events("a", 0, 12))
	ends := endOffsets(t, s.in)
	deleteTo(t, s.in, ends)

	rep, code := runVerify(t, topo)
	if code == 0 || rep.OK || !deletedProblem(rep, s.in) {
		t.Fatalf("verify before the sink ran: exit %d, OK %v, problems %q; want %s deleted before the sink read any", code, rep.OK, rep.Problems, s.in)
	}

	kcatProduce(t, s.in, events("b", 0, 6))
	p := startSink(t, topo, "a1")
	eventually(t, time.Minute, func() bool { rows, _ := rowStats(t, pool, s.table()); return rows == 6 }, func() string {
		rows, _ := rowStats(t, pool, s.table())
		return fmt.Sprintf("%d of 6 rows\n%s", rows, tail(p.logs.String(), 10))
	})
	p.stop()
	rep, code = runVerify(t, topo)
	var deleted int64
	for _, d := range rep.Sinks[0].DeletedUnread {
		if !d.Recorded || d.Position != 0 || d.LogStart != ends[d.Partition] {
			t.Errorf("deleted unread %+v, want [0, %d) recorded", d, ends[d.Partition])
		}
		deleted += d.Offsets()
	}
	var all int64
	for _, o := range ends {
		all += o
	}
	if code == 0 || rep.OK || deleted != all {
		t.Fatalf("verify after the sink ran: exit %d, OK %v, %d offsets deleted unread, want %d; problems %q", code, rep.OK, deleted, all, rep.Problems)
	}

	// Stopped, the sink misses more records deleted under its stored
	// positions; run again, it records them too.
	read := endOffsets(t, s.in) // its stored positions
	kcatProduce(t, s.in, events("c", 0, 6))
	more := endOffsets(t, s.in)
	deleteTo(t, s.in, more)
	kcatProduce(t, s.in, events("d", 0, 6))
	p = startSink(t, topo, "a1")
	eventually(t, time.Minute, func() bool { rows, _ := rowStats(t, pool, s.table()); return rows == 12 }, func() string {
		rows, _ := rowStats(t, pool, s.table())
		return fmt.Sprintf("%d of 12 rows\n%s", rows, tail(p.logs.String(), 10))
	})
	p.stop()
	rep, code = runVerify(t, topo)
	deleted = 0
	for _, d := range rep.Sinks[0].DeletedUnread {
		deleted += d.Offsets()
	}
	var wantMore int64
	for p, o := range more {
		wantMore += o - read[p]
	}
	if code == 0 || rep.OK || deleted != all+wantMore {
		t.Fatalf("verify after the sink ran again: exit %d, OK %v, %d offsets deleted unread, want %d; problems %q", code, rep.OK, deleted, all+wantMore, rep.Problems)
	}
}

// An aggregate stage's window results, written with the old event time of
// their inputs (8 days) into a topic whose retention.ms is a day, are deleted by
// the broker's next retention check. No stage or sink of the topology
// reads that topic: verify reports the results the stage recorded as
// written past retention, instead of OK.
func TestVerifySeesWindowResultsDeletedFromAnUnreadTopic(t *testing.T) {
	t.Parallel()
	in, out, dlq, name := uniqueName("dw_in"), uniqueName("dw_out"), uniqueName("dw_dlq"), uniqueName("dw")
	st := stageYAML{name: name, in: in, out: out, dlq: dlq, format: "json", interval: "100ms", maxRecords: 1000,
		transform: "- aggregate:\n    window: { tumbling: 1m }\n    aggregations:\n      n: count\n"}.yaml() + "    upstream_idle_timeout: 2s\n"
	topo := userTopology(t, []fileTopic{{in, 1, nil}, {dlq, 1, nil},
		{out, 1, map[string]string{"retention.ms": strconv.FormatInt(day.Milliseconds(), 10)}}}, "stages:\n"+st)
	old := time.UnixMilli(time.Now().Add(-8 * day).UnixMilli())
	produceOld(t, in, "e", 5, old, false)
	produceOld(t, in, "late", 1, old.Add(2*time.Minute), false) // stream time closes the first window

	p := start(t, nil, "run", "--topology", topo, "--instance-id", "i1")
	eventually(t, 2*time.Minute, func() bool {
		return strings.Contains(p.logs.String(), "outputs are older than their topic's retention allows")
	},
		func() string { return "no warning of old outputs\n" + tail(p.logs.String(), 10) })
	// The broker's retention check (every 5 s with deploy/local's
	// kafka.sh) deletes them.
	eventually(t, 7*time.Minute, func() bool { return logStart(t, out) > 0 }, func() string {
		return fmt.Sprintf("the log start of %s is %d: retention did not delete the window results", out, logStart(t, out))
	})
	p.stop()

	rep, code := runVerify(t, topo)
	got := rep.Stages[0].DeletedOutputs
	if code == 0 || rep.OK || len(got) == 0 || got[0].Topic != out || !deletedProblem(rep, out) {
		t.Fatalf("verify: exit %d, OK %v, deleted outputs %+v, problems %q; want the window results deleted from %s", code, rep.OK, got, rep.Problems, out)
	}
}

// Records that the next stage read before they were deleted are no
// problem: stage a's outputs, read by stage b, then deleted (a
// DeleteRecords here; retention does the same), leave a's inputs without
// outputs, counted as output_deleted, and verify says OK.
func TestVerifyOKWhenOutputsWereReadBeforeTheyWereDeleted(t *testing.T) {
	t.Parallel()
	in, mid, out, dlq := uniqueName("dk_in"), uniqueName("dk_mid"), uniqueName("dk_out"), uniqueName("dk_dlq")
	a, b := uniqueName("dka"), uniqueName("dkb")
	stage := func(name, from, to string) string {
		return stageYAML{name: name, in: from, out: to, dlq: dlq, format: "json", key: "event_id", interval: "100ms", maxRecords: 1000}.yaml()
	}
	topo := userTopology(t, []fileTopic{{in, 1, nil}, {mid, 1, nil}, {out, 1, nil}, {dlq, 1, nil}}, "stages:\n"+stage(a, in, mid)+stage(b, mid, out))
	produceOld(t, in, "e", 6, time.Now(), false)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "i1")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) == 6 }, func() string {
		return fmt.Sprintf("%d of 6 outputs\n%s", kcatCount(t, out), tail(p.logs.String(), 10))
	})
	waitGroupCaughtUp(t, "exactly-"+b, mid, time.Minute)
	p.stop()
	deleteTo(t, mid, endOffsets(t, mid))

	rep, code := runVerify(t, topo)
	if code != 0 || !rep.OK || rep.Stages[0].OutputDeleted != 6 || rep.Stages[0].Lost != 0 {
		t.Fatalf("verify: exit %d, OK %v, stage %s: output deleted %d, lost %d (want 6, 0); problems %q", code, rep.OK, a,
			rep.Stages[0].OutputDeleted, rep.Stages[0].Lost, rep.Problems)
	}
}

// A sink that first runs on a topic written outside the topology, whose
// history retention already deleted, loses nothing: those records were
// its producers' past, not the pipeline's. Verify is OK after it ran,
// and before, and after retention deleted what it read. Records deleted
// under its stored positions are lost.
func TestVerifyOKForHistoryDeletedBeforeTheSinkFirstRan(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("duh")
	pool := pgPool(t)
	pgExec(t, pool, "CREATE SCHEMA IF NOT EXISTS "+s.schema)
	topo := sinkTopology(t, s)
	kcatProduce(t, s.in, events("a", 0, 12))
	deleteTo(t, s.in, endOffsets(t, s.in))
	if rep, code := runVerify(t, topo); code != 0 || !rep.OK {
		t.Fatalf("verify before the sink ran: exit %d, OK %v, problems %q; want OK", code, rep.OK, rep.Problems)
	}
	kcatProduce(t, s.in, events("b", 0, 6))
	p := startSink(t, topo, "a1")
	eventually(t, time.Minute, func() bool { rows, _ := rowStats(t, pool, s.table()); return rows == 6 }, func() string {
		rows, _ := rowStats(t, pool, s.table())
		return fmt.Sprintf("%d of 6 rows\n%s", rows, tail(p.logs.String(), 10))
	})
	p.stop()
	if strings.Contains(p.logs.String(), "input records were deleted before the sink read them") {
		t.Errorf("the sink warned of a loss at its first start:\n%s", tail(p.logs.String(), 10))
	}
	if rep, code := runVerify(t, topo); code != 0 || !rep.OK || len(rep.Sinks[0].DeletedUnread) != 0 {
		t.Fatalf("verify after the sink ran: exit %d, OK %v, deleted unread %+v, problems %q; want OK", code, rep.OK, rep.Sinks[0].DeletedUnread, rep.Problems)
	}
	// Retention deletes the records the sink read: their rows are no
	// extra rows.
	deleteTo(t, s.in, endOffsets(t, s.in))
	if rep, code := runVerify(t, topo); code != 0 || !rep.OK || rep.Sinks[0].InputDeleted != 6 || rep.Sinks[0].Extra != 0 {
		t.Fatalf("verify after the input the sink read was deleted: exit %d, OK %v, rows input deleted %d, extra %d, problems %q; want OK, 6, 0",
			code, rep.OK, rep.Sinks[0].InputDeleted, rep.Sinks[0].Extra, rep.Problems)
	}

	// Stopped, the sink misses records deleted under its positions.
	kcatProduce(t, s.in, events("c", 0, 6))
	deleteTo(t, s.in, endOffsets(t, s.in))
	kcatProduce(t, s.in, events("d", 0, 6))
	p = startSink(t, topo, "a1")
	eventually(t, time.Minute, func() bool { rows, _ := rowStats(t, pool, s.table()); return rows == 12 }, func() string {
		rows, _ := rowStats(t, pool, s.table())
		return fmt.Sprintf("%d of 12 rows\n%s", rows, tail(p.logs.String(), 10))
	})
	p.stop()
	if rep, code := runVerify(t, topo); code == 0 || rep.OK || !deletedProblem(rep, s.in) {
		t.Fatalf("verify after records were deleted under the sink's positions: exit %d, OK %v, problems %q; want %s deleted unread", code, rep.OK, rep.Problems, s.in)
	}
}
