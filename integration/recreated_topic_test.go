//go:build integration

package integration

// A topic's identity is part of a position. The input
// topic of a stage or a sink is deleted and created again with the same
// name (Kafka's TopicCommand), while the process runs or while it is
// stopped, and 5 events are produced to the new topic. Either documented
// policy is accepted: the new topic's records are processed from its
// first offset, or the process stops (exit status not 0) with an error
// that names the topic and says it was recreated. Never accepted: the
// new records skipped, or the process spinning (a log flood or a busy
// CPU) without doing either.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/exactly-io/exactly/processor/deadletter"
)

const (
	// recreateWait bounds the wait for either outcome.
	recreateWait = 60 * time.Second
	// recreateLogBudget bounds the log a process may write over that wait.
	recreateLogBudget = 1 << 20
	// idleCPU bounds the CPU an idle process may use, in cores (a
	// process spinning on a recreated topic uses 0.4); a race-detector
	// build is slower.
	idleCPU = 0.25
)

// genOld and genNew are the records before and after the topic is
// re-created: 3 + 2 before, 4 + 1 after. After re-creation partition 0
// ends above its old position (3 < 4: a position check alone would skip
// the first 3) and partition 1 below it (2 > 1: out of range).
var (
	genOld = [2][][]byte{eventLines("old0", 0, 3, 0), eventLines("old1", 0, 2, 0)}
	genNew = [2][][]byte{eventLines("new0", 0, 4, 0), eventLines("new1", 0, 1, 0)}
)

func produceGen(t *testing.T, topic string, gen [2][][]byte) {
	t.Helper()
	for p, lines := range gen {
		kcatProducePartition(t, topic, p, lines)
	}
}

func genKeys(gen [2][][]byte) []string { return append(keysOf(gen[0]), keysOf(gen[1])...) }

// awaitRecreateOutcome waits for p to either process the new topic's
// records (processed reports it) or stop with an error naming topic and
// its re-creation. It fails on a log flood, on a silent wait past the
// bound, and, when p goes on running, on a busy CPU afterwards. It
// returns true when the records were processed.
func awaitRecreateOutcome(t *testing.T, p *proc, topic string, processed func() bool) bool {
	t.Helper()
	logStart := len(p.logs.String())
	cpuStart, start := cpuSeconds(t, p.cmd.Process.Pid), time.Now()
	logged := func() int { return len(p.logs.String()) - logStart }
	for {
		if n := logged(); n > recreateLogBudget {
			t.Fatalf("%d bytes of log in %s after topic %s was re-created (budget %d); last lines:\n%s",
				n, time.Since(start).Round(time.Second), topic, recreateLogBudget, tail(p.logs.String(), 10))
		}
		if p.exited() {
			logs := p.logs.String()
			t.Logf("the process stopped after topic %s was re-created (%v), %d bytes of log; last lines:\n%s", topic, p.err, logged(), tail(logs, 5))
			if p.err == nil {
				t.Errorf("the process exited with status 0 after topic %s was re-created; want an error", topic)
			}
			if tl := strings.ToLower(tail(logs, 20)); !strings.Contains(tl, strings.ToLower(topic)) || !strings.Contains(tl, "recreat") && !strings.Contains(tl, "re-creat") {
				t.Errorf("the process stopped without an error naming topic %s and its re-creation; last lines:\n%s", topic, tail(logs, 20))
			}
			return false
		}
		if processed() {
			break
		}
		if time.Since(start) > recreateWait {
			secs := time.Since(start).Seconds()
			cpu := (cpuSeconds(t, p.cmd.Process.Pid) - cpuStart) / secs
			t.Fatalf("topic %s re-created: after %s the new records are not processed and the process runs on "+
				"(%d bytes of log, %.2f cores); last lines:\n%s", topic, recreateWait, logged(), cpu, tail(p.logs.String(), 10))
		}
		time.Sleep(250 * time.Millisecond) // polling the outputs and the process
	}
	// Processed, and still running: it must now be idle, not spinning.
	// Over a 5 s window the CPU it uses and the log it writes stay small.
	logMark, cpuMark, markAt := logged(), cpuSeconds(t, p.cmd.Process.Pid), time.Now()
	// A measurement window, not a wait for a condition: there is none to
	// await when the claim is that nothing happens.
	<-time.After(5 * time.Second)
	p.alive()
	cores := (cpuSeconds(t, p.cmd.Process.Pid) - cpuMark) / time.Since(markAt).Seconds()
	grew := logged() - logMark
	t.Logf("topic %s re-created: new records processed in %s; then %.2f cores and %d bytes of log over 5 s",
		topic, markAt.Sub(start).Round(100*time.Millisecond), cores, grew)
	if cores > idleCPU || grew > 64<<10 {
		t.Errorf("after processing the re-created topic %s the process is busy: %.2f cores, %d bytes of log in 5 s; last lines:\n%s",
			topic, cores, grew, tail(p.logs.String(), 10))
	}
	return true
}

// recreateStage is a stage reading a 2-partition input.
func recreateStage(t *testing.T, prefix string) refusedStage {
	t.Helper()
	s := refusedStage{name: uniqueName(prefix), in: uniqueName(prefix + "_in"), out: uniqueName(prefix + "_out"), dlq: uniqueName(prefix + "_dlq")}
	s.topo = userTopology(t, []fileTopic{{name: s.in, parts: 2}, {name: s.out, parts: 2}, {name: s.dlq, parts: 1}},
		"stages:\n"+jsonStageItem(s.name, s.in, s.out, s.dlq, "100ms", 10000))
	return s
}

// newOutputsIn reports whether every new key is in the stage's output.
func newOutputsIn(t *testing.T, s refusedStage) bool {
	got := keyCounts(t, s.out)
	for _, k := range genKeys(genNew) {
		if got[k] == 0 {
			return false
		}
	}
	return true
}

// runOld produces genOld to the input of s and runs s (exactly-once, as
// instance id) until its group has committed all of it.
func runOld(t *testing.T, s refusedStage, id string) *proc {
	t.Helper()
	produceGen(t, s.in, genOld)
	p := s.run(t, "exactly-once", id)
	s.waitCommitted(t, map[int32]int64{0: 3, 1: 2}, 45*time.Second)
	return p
}

func TestRecreatedTopicStageRunning(t *testing.T) {
	s := recreateStage(t, "rst")
	p := runOld(t, s, "i-1")
	recreateTopic(t, s.in, 2)
	produceGen(t, s.in, genNew)
	if awaitRecreateOutcome(t, p, s.in, func() bool { return newOutputsIn(t, s) }) {
		s.checkOutputs(t, "exactly-once", append(genKeys(genOld), genKeys(genNew)...))
		p.stop()
	}
}

func TestRecreatedTopicStageStopped(t *testing.T) {
	s := recreateStage(t, "sst")
	p := runOld(t, s, "i-1")
	p.stop()
	recreateTopic(t, s.in, 2)
	produceGen(t, s.in, genNew)
	t.Logf("group offsets after the re-creation: %v", groupOffsets(t, s.group(), s.in))
	p = s.run(t, "exactly-once", "i-1")
	if awaitRecreateOutcome(t, p, s.in, func() bool { return newOutputsIn(t, s) }) {
		s.checkOutputs(t, "exactly-once", append(genKeys(genOld), genKeys(genNew)...))
		p.stop()
	}
}

// recreateSink is a sink reading a 2-partition input into a table the
// sink creates.
func recreateSink(t *testing.T, prefix string) loadSink {
	t.Helper()
	c := loadSink{name: uniqueName(prefix), in: uniqueName(prefix + "_in"), dlq: uniqueName(prefix + "_dlq")}
	c.schema = freshSchema(t, pgPool(t), prefix)
	c.table = c.schema + ".events"
	c.topo = userTopology(t, []fileTopic{{name: c.in, parts: 2}, {name: c.dlq, parts: 1}},
		"sinks:\n"+jsonSinkItem(c.name, c.in, c.dlq, c.table, "", "{ event_id: event_id, body: $value }", ""))
	return c
}

func sinkHasNew(t *testing.T, pool *pgxpool.Pool, c loadSink) bool {
	return pgInt(t, pool, "SELECT count(*) FROM "+c.table+" WHERE event_id LIKE 'new%'") == 5
}

func checkSinkRows(t *testing.T, pool *pgxpool.Pool, c loadSink) {
	t.Helper()
	want := append(genKeys(genOld), genKeys(genNew)...)
	if n, d := tableCounts(t, pool, c.table); n != int64(len(want)) || d != n {
		t.Errorf("%s: %d rows, %d distinct; want %d", c.table, n, d, len(want))
	}
}

// loadOld produces genOld to the input of c and runs c until its rows are
// in and its positions at the end.
func loadOld(t *testing.T, pool *pgxpool.Pool, c loadSink) *proc {
	t.Helper()
	produceGen(t, c.in, genOld)
	p := c.run(t, "i-1", "")
	c.waitLoaded(t, pool, 5, 45*time.Second, p)
	return p
}

func TestRecreatedTopicSinkRunning(t *testing.T) {
	c := recreateSink(t, "rsk")
	pool := pgPool(t)
	p := loadOld(t, pool, c)
	recreateTopic(t, c.in, 2)
	produceGen(t, c.in, genNew)
	if awaitRecreateOutcome(t, p, c.in, func() bool { return sinkHasNew(t, pool, c) }) {
		checkSinkRows(t, pool, c)
		p.stop()
	}
}

func TestRecreatedTopicSinkStopped(t *testing.T) {
	c := recreateSink(t, "ssk")
	pool := pgPool(t)
	p := loadOld(t, pool, c)
	p.stop()
	recreateTopic(t, c.in, 2)
	produceGen(t, c.in, genNew)
	p = c.run(t, "i-1", "")
	if awaitRecreateOutcome(t, p, c.in, func() bool { return sinkHasNew(t, pool, c) }) {
		checkSinkRows(t, pool, c)
		p.stop()
	}
	t.Logf("stored positions at the end: %v", storedPositions(t, pool, c.schema+".exactly_positions", c.in))
}

// A record whose output the broker refused (too large) is dead-lettered;
// then the input topic is deleted and created again while the stage runs.
// The new topic's record at the same offset is another record, and goes
// to the output, in both guarantees: a refusal remembered by topic name,
// partition and offset alone would dead-letter it unread with the old
// record's error. Each dead letter names its topic's ID
// (exactly.dlq.source.topic_id), which tells the two topics apart.
func TestRecreatedTopicForgetsRefusedRecords(t *testing.T) {
	for _, g := range []string{"exactly-once", "at-least-once"} {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			s := newRefusedStage(t, "rcpois", 1, "100ms", 10000)
			old := append(append(eventLines("old", 0, 1, 0), eventLines("old", 1, 1, 6000)...), eventLines("old", 2, 1, 0)...)
			kcatProduce(t, s.in, old)
			p := s.run(t, g, "i1")
			eventually(t, time.Minute, func() bool { return kcatCount(t, s.dlq) == 1 && kcatCount(t, s.out) == 2 },
				func() string {
					return fmt.Sprintf("%d outputs, %d dead letters", kcatCount(t, s.out), kcatCount(t, s.dlq))
				})
			oldID, newID := recreateTopic(t, s.in, 1)
			fresh := eventLines("new", 0, 3, 0) // offsets 0, 1, 2 again
			kcatProduce(t, s.in, fresh)
			eventually(t, 2*time.Minute, func() bool {
				got := keyCounts(t, s.out)
				return got["new-0"] > 0 && got["new-1"] > 0 && got["new-2"] > 0
			},
				func() string {
					return fmt.Sprintf("outputs %v, dead letters %v; logs:\n%s", keyCounts(t, s.out), s.deadLetters(t), tail(p.logs.String(), 15))
				})
			dead := kcatReadJSON(t, s.dlq)
			if len(dead) != 1 || dead[0].Key != "old-1" {
				t.Fatalf("dead letters %+v, want only old-1, the record the broker refused", dead)
			}
			if got := dead[0].Headers[deadletter.HeaderSourceTopicID]; got != oldID {
				t.Errorf("the dead letter's %s is %q, want the old topic's ID %q (the new one is %q)", deadletter.HeaderSourceTopicID, got, oldID, newID)
			}
			p.stop()
		})
	}
}
