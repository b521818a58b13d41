//go:build integration

package integration

// Rewinds and start positions. No input offset is ever
// skipped, whatever the group has committed (nothing, some partitions),
// whether partitions are added while running or revoked in the middle of
// the one-record-per-transaction retry that finds a record the broker
// refuses, in both guarantees.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// bothGuarantees are the two guarantees of `exactly run`.
var bothGuarantees = []string{"exactly-once", "at-least-once"}

// refusedPad pads a record's value past the 4000-byte max.message.bytes of
// a refusedStage's output topic: its output is refused by the broker, its dead
// letter (to a topic with the broker's default limit) is not.
const refusedPad = 6000

// refusedStage is a stage whose output topic refuses records over 4000
// bytes; in has parts partitions.
type refusedStage struct {
	name, in, out, dlq, topo string
}

func newRefusedStage(t *testing.T, prefix string, parts int, interval string, maxRecords int) refusedStage {
	t.Helper()
	s := refusedStage{name: uniqueName(prefix), in: uniqueName(prefix + "_in"), out: uniqueName(prefix + "_out"), dlq: uniqueName(prefix + "_dlq")}
	s.topo = userTopology(t, []fileTopic{
		{name: s.in, parts: parts},
		{name: s.out, parts: 1, config: map[string]string{"max.message.bytes": "4000"}},
		{name: s.dlq, parts: 1},
	}, "stages:\n"+jsonStageItem(s.name, s.in, s.out, s.dlq, interval, maxRecords))
	return s
}

func (s refusedStage) group() string { return "exactly-" + s.name }

// run starts the stage as instance id with guarantee g, at log level info.
func (s refusedStage) run(t *testing.T, g, id string) *proc {
	t.Helper()
	return start(t, nil, "run", "--topology", s.topo, "--instance-id", id, "--guarantee", g, "--log-level", "info")
}

// dlqSource is where a dead letter's record came from, and why.
type dlqSource struct {
	partition, offset int64
	reason            string
}

// deadLetters returns the stage's dead letters by source, counted.
func (s refusedStage) deadLetters(t *testing.T) map[dlqSource]int {
	t.Helper()
	out := map[dlqSource]int{}
	for _, r := range kcatReadJSON(t, s.dlq) {
		p, _ := strconv.ParseInt(r.Headers["exactly.dlq.source.partition"], 10, 64)
		o, _ := strconv.ParseInt(r.Headers["exactly.dlq.source.offset"], 10, 64)
		out[dlqSource{p, o, r.Headers["exactly.dlq.reason"]}]++
	}
	return out
}

// waitCommitted waits until the stage's group has committed want for
// every partition of want.
func (s refusedStage) waitCommitted(t *testing.T, want map[int32]int64, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() bool {
		got := groupOffsets(t, s.group(), s.in)
		for p, o := range want {
			if got[p] != o {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("group %s committed %v, want %v; %d outputs, dead letters %v",
			s.group(), groupOffsets(t, s.group(), s.in), want, kcatCount(t, s.out), s.deadLetters(t))
	})
}

// checkOutputs requires every key of want in the output: exactly once with
// exactly-once, at least once with at-least-once; and no other key.
func (s refusedStage) checkOutputs(t *testing.T, g string, want []string) {
	t.Helper()
	got := keyCounts(t, s.out)
	var missing, doubled []string
	for _, k := range want {
		switch n := got[k]; {
		case n == 0:
			missing = append(missing, k)
		case n > 1 && g == "exactly-once":
			doubled = append(doubled, k)
		}
		delete(got, k)
	}
	if len(missing) > 0 || len(doubled) > 0 || len(got) > 0 {
		t.Errorf("output %s: %d of %d keys missing %v, %d doubled %v, unexpected %v",
			s.out, len(missing), len(want), firstOf(missing), len(doubled), firstOf(doubled), got)
	}
}

// checkDeadLetters requires exactly the sources of want (reason produce),
// each once with exactly-once and at least once with at-least-once.
func (s refusedStage) checkDeadLetters(t *testing.T, g string, want []dlqSource) {
	t.Helper()
	got := s.deadLetters(t)
	for _, w := range want {
		n := got[w]
		if n == 0 || (n > 1 && g == "exactly-once") {
			t.Errorf("dead letters of %s: %d for partition %d offset %d reason %s, want 1; all: %v", s.dlq, n, w.partition, w.offset, w.reason, got)
		}
		delete(got, w)
	}
	if len(got) > 0 {
		t.Errorf("dead letters of %s: unexpected %v", s.dlq, got)
	}
}

// settle waits until the stage's group has committed ends, with p
// running throughout; then it requires the outputs want and the dead
// letters wantDL (as checkOutputs and checkDeadLetters) and stops p.
func (s refusedStage) settle(t *testing.T, g string, p *proc, ends map[int32]int64, timeout time.Duration, want []string, wantDL []dlqSource) {
	t.Helper()
	s.waitCommitted(t, ends, timeout)
	p.alive()
	s.checkOutputs(t, g, want)
	s.checkDeadLetters(t, g, wantDL)
	p.stop()
}

func firstOf(s []string) []string {
	if len(s) > 10 {
		return append(s[:10:10], "...")
	}
	return s
}

// keysOf returns the keys (event IDs) of kcat lines.
func keysOf(lines [][]byte) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		k, _, _ := strings.Cut(string(l), "|")
		out = append(out, k)
	}
	return out
}

// A fresh group, an output topic
// with max.message.bytes=4000, 25 small records, one of 6 KB, 25 small;
// then one more record later. In both guarantees: 50 outputs and one
// `produce` dead letter before the 52nd record comes, and after it every
// small record is output and the group commits 52.
func TestRefusedRecordFreshGroup(t *testing.T) {
	for _, g := range bothGuarantees {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			s := newRefusedStage(t, "fresh", 1, "100ms", 10000)
			small1, big, small2 := eventLines("a", 0, 25, 0), eventLines("big", 0, 1, refusedPad), eventLines("b", 0, 25, 0)
			var lines [][]byte
			lines = append(append(append(lines, small1...), big...), small2...)
			kcatProduce(t, s.in, lines)
			p := s.run(t, g, "i-1")

			// A stalled stage (nothing output, nothing dead-lettered)
			// shows within seconds, so 30 s is a generous bound for the
			// right outcome.
			deadline := time.Now().Add(30 * time.Second)
			var outs, dls int
			for time.Now().Before(deadline) {
				outs, dls = kcatCount(t, s.out), len(kcatRead(t, s.dlq))
				if outs >= 50 && dls >= 1 {
					break
				}
				time.Sleep(200 * time.Millisecond) // polling the output topics
			}
			if outs != 50 || dls != 1 {
				t.Errorf("after 51 records, before the 52nd: %d outputs and %d dead letters, want 50 and 1", outs, dls)
			}

			last := eventLines("c", 0, 1, 0)
			kcatProduce(t, s.in, last)
			s.settle(t, g, p, map[int32]int64{0: 52}, 30*time.Second, keysOf(append(append(append([][]byte{}, small1...), small2...), last...)), []dlqSource{{0, 25, "produce"}})
		})
	}
}

// The refused record is the very first offset of a fresh group.
func TestRefusedRecordAtFirstOffset(t *testing.T) {
	for _, g := range bothGuarantees {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			s := newRefusedStage(t, "first", 1, "100ms", 10000)
			small := eventLines("a", 0, 10, 0)
			kcatProduce(t, s.in, append(eventLines("big", 0, 1, refusedPad), small...))
			p := s.run(t, g, "i-1")
			s.settle(t, g, p, map[int32]int64{0: 11}, 45*time.Second, keysOf(small), []dlqSource{{0, 0, "produce"}})
		})
	}
}

// One refused record in each of three partitions, at different offsets,
// in a fresh group.
func TestRefusedRecordInEachPartition(t *testing.T) {
	for _, g := range bothGuarantees {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			s := newRefusedStage(t, "each", 3, "100ms", 10000)
			var want []string
			var wantDL []dlqSource
			ends := map[int32]int64{}
			for p := range 3 {
				pre := eventLines(fmt.Sprintf("p%d-a", p), 0, 2+3*p, 0)
				post := eventLines(fmt.Sprintf("p%d-b", p), 0, 8, 0)
				big := eventLines(fmt.Sprintf("p%d-big", p), 0, 1, refusedPad)
				kcatProducePartition(t, s.in, p, append(append(append([][]byte{}, pre...), big...), post...))
				want = append(append(want, keysOf(pre)...), keysOf(post)...)
				wantDL = append(wantDL, dlqSource{int64(p), int64(len(pre)), "produce"})
				ends[int32(p)] = int64(len(pre) + 1 + len(post))
			}
			pr := s.run(t, g, "i-1")
			s.settle(t, g, pr, ends, 45*time.Second, want, wantDL)
		})
	}
}

// resetGroupOffset sets group's committed offset of topic/partition with
// Kafka's own ConsumerGroupCommand, as an operator would.
func resetGroupOffset(t *testing.T, group, topic string, partition int, offset int64) {
	t.Helper()
	out, err := kafkaTool(t, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--group", group, "--reset-offsets", "--topic", fmt.Sprintf("%s:%d", topic, partition),
		"--to-offset", strconv.FormatInt(offset, 10), "--execute")
	if err != nil {
		t.Fatalf("ConsumerGroupCommand --reset-offsets: %v\n%s", err, out)
	}
	if got := groupOffsets(t, group, topic); len(got) != 1 || got[int32(partition)] != offset {
		t.Fatalf("group %s: committed %v after the reset, want only partition %d at %d", group, got, partition, offset)
	}
}

// The group has committed offsets for only one of three partitions (set
// with Kafka's ConsumerGroupCommand): the records before that offset are
// not processed again, and every other record, in all partitions, is,
// including refused records in the committed partition and in one with no
// commit.
func TestPartlyCommittedGroup(t *testing.T) {
	for _, g := range bothGuarantees {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			s := newRefusedStage(t, "part", 3, "100ms", 10000)
			done := eventLines("done", 0, 5, 0) // processed already: before the committed offset
			kcatProducePartition(t, s.in, 0, done)
			resetGroupOffset(t, s.group(), s.in, 0, 5)

			p0 := append(eventLines("p0", 0, 4, 0), eventLines("p0big", 0, 1, refusedPad)...)
			p0 = append(p0, eventLines("p0", 4, 4, 0)...)
			p1 := append(eventLines("p1big", 0, 1, refusedPad), eventLines("p1", 0, 6, 0)...)
			p2 := eventLines("p2", 0, 7, 0)
			kcatProducePartition(t, s.in, 0, p0)
			kcatProducePartition(t, s.in, 1, p1)
			kcatProducePartition(t, s.in, 2, p2)
			want := append(append(keysOf(p0[:4]), keysOf(p0[5:])...), keysOf(p1[1:])...)
			want = append(want, keysOf(p2)...)

			pr := s.run(t, g, "i-1")
			s.settle(t, g, pr, map[int32]int64{0: 5 + 9, 1: 7, 2: 7}, 45*time.Second, want, []dlqSource{{0, 5 + 4, "produce"}, {1, 0, "produce"}})
		})
	}
}

// A second instance joins while the first is retrying one input record
// per transaction to find a record the broker refused: the partitions
// are revoked and re-assigned in the middle of the retry. Every small
// record is output, the refused one is dead-lettered, and the group ends
// at the end of every partition.
func TestRevokedMidRetry(t *testing.T) {
	const perPart, bigAt = 400, 300
	for _, g := range bothGuarantees {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			// A long commit interval puts many records in the transaction
			// that fails, so the retry, one record per transaction, lasts.
			s := newRefusedStage(t, "revoke", 3, "2s", 100000)
			var want []string
			ends := map[int32]int64{}
			for p := range 3 {
				lines := eventLines(fmt.Sprintf("p%d", p), 0, perPart, 0)
				if p == 1 {
					lines = append(append(append([][]byte{}, lines[:bigAt]...), eventLines("big", 0, 1, refusedPad)...), lines[bigAt:]...)
				}
				kcatProducePartition(t, s.in, p, lines)
				for _, k := range keysOf(lines) {
					if k != "big-0" {
						want = append(want, k)
					}
				}
				ends[int32(p)] = int64(len(lines))
			}
			a := s.run(t, g, "i-a")
			eventually(t, 45*time.Second, func() bool {
				a.alive()
				return strings.Contains(a.logs.String(), "one input record per transaction")
			}, func() string { return "instance a never started the one-record retry" })
			b := s.run(t, g, "i-b")
			s.waitCommitted(t, ends, 90*time.Second)
			a.alive()
			b.alive()
			s.checkOutputs(t, g, want)
			s.checkDeadLetters(t, g, []dlqSource{{1, bigAt, "produce"}})
			a.stop()
			b.stop()
		})
	}
}

// Partitions are added to a running stage's and sink's input topic (with
// Kafka's TopicCommand), and records written to the new partitions, a
// refused one among them: both stages (one per guarantee) and the sink
// process every one of them, from the new partitions' first offsets.
// franz-go finds new partitions on a metadata refresh
// (metadata.max.age.ms); the file sets metadata_max_age to 2s for each, so
// the bound is 2 minutes: this test checks that nothing is skipped, not how
// fast the new partitions are found.
func TestPartitionsAddedWhileRunning(t *testing.T) {
	in := uniqueName("grow_in")
	eos, alos := refusedStage{name: uniqueName("grow_eos")}, refusedStage{name: uniqueName("grow_alos")}
	var topics []fileTopic
	topics = append(topics, fileTopic{name: in, parts: 1})
	for _, s := range []*refusedStage{&eos, &alos} {
		s.in, s.out, s.dlq = in, s.name+"_out", s.name+"_dlq"
		topics = append(topics, fileTopic{name: s.out, parts: 1, config: map[string]string{"max.message.bytes": "4000"}}, fileTopic{name: s.dlq, parts: 1})
	}
	pool := pgPool(t)
	schema := freshSchema(t, pool, "grow")
	sinkName, sinkDLQ := uniqueName("grow_sink"), uniqueName("grow_sdlq")
	topics = append(topics, fileTopic{name: sinkDLQ, parts: 1})
	const refresh = "    metadata_max_age: 2s\n"
	topo := userTopology(t, topics, "stages:\n"+jsonStageItem(eos.name, in, eos.out, eos.dlq, "100ms", 10000)+refresh+
		jsonStageItem(alos.name, in, alos.out, alos.dlq, "100ms", 10000)+refresh+
		"sinks:\n"+jsonSinkItem(sinkName, in, sinkDLQ, schema+".events", "", "{ event_id: event_id, body: $value }", "")+refresh)
	eos.topo, alos.topo = topo, topo

	first := eventLines("old", 0, 5, 0)
	kcatProducePartition(t, in, 0, first)
	pe := start(t, nil, "run", "--topology", topo, "--stage", eos.name, "--instance-id", "i-1", "--guarantee", "exactly-once", "--log-level", "info")
	pa := start(t, nil, "run", "--topology", topo, "--stage", alos.name, "--instance-id", "i-1", "--guarantee", "at-least-once", "--log-level", "info")
	ps := start(t, nil, "sink", "--topology", topo, "--sink", sinkName, "--instance-id", "i-1", "--log-level", "info")
	eos.waitCommitted(t, map[int32]int64{0: 5}, 45*time.Second)
	alos.waitCommitted(t, map[int32]int64{0: 5}, 45*time.Second)
	eventually(t, 45*time.Second, func() bool { return pgInt(t, pool, "SELECT count(*) FROM "+schema+".events") == 5 },
		func() string { return "the sink did not load the first 5 records" })

	addPartitions(t, in, 3)
	p1 := eventLines("new1", 0, 6, 0)
	p2 := append(eventLines("new2", 0, 2, 0), eventLines("new2big", 0, 1, refusedPad)...)
	p2 = append(p2, eventLines("new2", 2, 3, 0)...)
	kcatProducePartition(t, in, 1, p1)
	kcatProducePartition(t, in, 2, p2)
	ends := map[int32]int64{0: 5, 1: 6, 2: 6}
	want := append(append(keysOf(first), keysOf(p1)...), keysOf(p2[:2])...)
	want = append(want, keysOf(p2[3:])...)

	// One deadline for all three: each finds the new partitions on its
	// own metadata refresh.
	deadline := time.Now().Add(2 * time.Minute)
	eos.waitCommitted(t, ends, time.Until(deadline))
	eventually(t, time.Until(deadline)+10*time.Second, func() bool { return pgInt(t, pool, "SELECT count(*) FROM "+schema+".events") == 17 },
		func() string {
			return fmt.Sprintf("sink table has %d rows, want 17", pgInt(t, pool, "SELECT count(*) FROM "+schema+".events"))
		})
	alos.waitCommitted(t, ends, time.Until(deadline)+10*time.Second)
	for _, p := range []*proc{pe, pa, ps} {
		p.alive()
	}
	for _, c := range []struct {
		s refusedStage
		g string
	}{{eos, "exactly-once"}, {alos, "at-least-once"}} {
		c.s.checkOutputs(t, c.g, want)
		c.s.checkDeadLetters(t, c.g, []dlqSource{{2, 2, "produce"}})
	}
	if n := pgInt(t, pool, "SELECT count(DISTINCT event_id) FROM "+schema+".events"); n != 17 {
		t.Errorf("sink table: %d distinct event IDs, want 17", n)
	}
	pe.stop()
	pa.stop()
	ps.stop()
}

// loadSink is one sink writing to a table the test may create first.
type loadSink struct {
	name, in, dlq, schema, table, topo string
}

// newLoadSink writes the topology of one sink (input with parts
// partitions, the given columns and mode) into a fresh schema; the table
// is <schema>.events, created by the test in setup (which gets the
// schema) or by the sink.
func newLoadSink(t *testing.T, pool *pgxpool.Pool, prefix string, parts int, columns, mode string, setup func(schema string)) loadSink {
	t.Helper()
	c := loadSink{name: uniqueName(prefix), in: uniqueName(prefix + "_in"), dlq: uniqueName(prefix + "_dlq")}
	c.schema = freshSchema(t, pool, prefix)
	c.table = c.schema + ".events"
	if setup != nil {
		setup(c.schema)
	}
	c.topo = userTopology(t, []fileTopic{{name: c.in, parts: parts}, {name: c.dlq, parts: 1}},
		"sinks:\n"+jsonSinkItem(c.name, c.in, c.dlq, c.table, "", columns, mode))
	return c
}

// run starts the sink as instance id, at log level info, with addr as its
// metrics address ("" for none).
func (c loadSink) run(t *testing.T, id, addr string) *proc {
	t.Helper()
	return start(t, nil, "sink", "--topology", c.topo, "--instance-id", id, "--log-level", "info", "--metrics-addr="+addr)
}

// waitLoaded waits until the sink's table holds want rows, each event once
// (waitRows, with procs running), and its stored positions are at every
// partition's read_committed end.
func (c loadSink) waitLoaded(t *testing.T, pool *pgxpool.Pool, want int64, timeout time.Duration, procs ...*proc) {
	t.Helper()
	waitRows(t, pool, c.table, want, timeout, procs...)
	eventually(t, 30*time.Second, func() bool { return c.positionsAtEnd(t, pool) }, func() string {
		return fmt.Sprintf("positions %v, ends %v", storedPositions(t, pool, c.schema+".exactly_positions", c.in), committedEnds(t, c.in))
	})
}

// loadOnce produces lines to the sink's input, runs the sink as instance
// id until it has loaded want rows in all (as waitLoaded), and stops it.
func (c loadSink) loadOnce(t *testing.T, pool *pgxpool.Pool, id string, lines [][]byte, want int64) {
	t.Helper()
	kcatProduce(t, c.in, lines)
	p := c.run(t, id, "")
	c.waitLoaded(t, pool, want, 45*time.Second, p)
	p.stop()
}

// positionsAtEnd reports whether the sink's stored positions (in the
// default positions table) are at every partition's read_committed end.
func (c loadSink) positionsAtEnd(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	return positionsTableAtEnd(t, pool, c.schema+".exactly_positions", c.in)
}

// A sink whose positions table holds positions for only one of three
// partitions (it ran when only that partition had records) loads every
// record of the other two from their first offsets, and nothing twice.
func TestSinkPartlyStoredPositions(t *testing.T) {
	pool := pgPool(t)
	c := newLoadSink(t, pool, "spart", 3, "{ event_id: event_id, body: $value }", "", nil)
	kcatProducePartition(t, c.in, 0, eventLines("first", 0, 5, 0))
	p := c.run(t, "i-1", "")
	eventually(t, 45*time.Second, func() bool {
		return storedPositions(t, pool, c.schema+".exactly_positions", c.in)[0] == 5 && pgInt(t, pool, "SELECT count(*) FROM "+c.table) == 5
	}, func() string { return "the sink did not load the first 5 records" })
	p.stop()
	t.Logf("positions stored after the first run: %v", storedPositions(t, pool, c.schema+".exactly_positions", c.in))

	for part := range 3 {
		kcatProducePartition(t, c.in, part, eventLines(fmt.Sprintf("second%d", part), 0, 5, 0))
	}
	p = c.run(t, "i-1", "")
	eventually(t, 45*time.Second, func() bool { return c.positionsAtEnd(t, pool) && pgInt(t, pool, "SELECT count(*) FROM "+c.table) >= 20 },
		func() string {
			return fmt.Sprintf("%d rows, want 20; positions %v", pgInt(t, pool, "SELECT count(*) FROM "+c.table),
				storedPositions(t, pool, c.schema+".exactly_positions", c.in))
		})
	p.alive()
	if n, d := pgInt(t, pool, "SELECT count(*) FROM "+c.table), pgInt(t, pool, "SELECT count(DISTINCT event_id) FROM "+c.table); n != 20 || d != 20 {
		t.Errorf("%s: %d rows, %d distinct event IDs; want 20", c.table, n, d)
	}
	p.stop()
}

// A second sink instance joins while the first is splitting a batch
// under savepoints to find rows Postgres rejects (one bad integer per
// partition): the partitions move in the middle of the split. Every good
// row is written once, each bad record is dead-lettered, and the stored
// positions reach the end of every partition.
func TestSinkRevokedMidSplit(t *testing.T) {
	const perPart = 2000
	pool := pgPool(t)
	c := newLoadSink(t, pool, "ssplit", 3, "{ event_id: event_id, n: n }", "", func(schema string) {
		pgExec(t, pool, "CREATE TABLE "+schema+".events (event_id text PRIMARY KEY, n integer)")
	})
	want := 0
	for part := range 3 {
		lines := eventLines(fmt.Sprintf("p%d", part), 0, perPart, 0)
		bad := fmt.Appendf(nil, `bad%d|{"event_id":"bad%d","n":"not a number"}`, part, part)
		at := 500 * (part + 1)
		lines = append(append(append([][]byte{}, lines[:at]...), bad), lines[at:]...)
		kcatProducePartition(t, c.in, part, lines)
		want += perPart
	}
	a := c.run(t, "i-a", "")
	eventually(t, 30*time.Second, func() bool { a.alive(); return strings.Contains(a.logs.String(), "assigned") },
		func() string { return "instance a was never assigned partitions" })
	b := c.run(t, "i-b", "")
	eventually(t, 90*time.Second, func() bool {
		return c.positionsAtEnd(t, pool) && pgInt(t, pool, "SELECT count(*) FROM "+c.table) >= int64(want)
	}, func() string {
		return fmt.Sprintf("%d rows of %d; positions %v, ends %v", pgInt(t, pool, "SELECT count(*) FROM "+c.table), want,
			storedPositions(t, pool, c.schema+".exactly_positions", c.in), committedEnds(t, c.in))
	})
	a.alive()
	b.alive()
	if n, d := pgInt(t, pool, "SELECT count(*) FROM "+c.table), pgInt(t, pool, "SELECT count(DISTINCT event_id) FROM "+c.table); n != int64(want) || d != int64(want) {
		t.Errorf("%s: %d rows, %d distinct; want %d", c.table, n, d, want)
	}
	dl := map[string]int{}
	for _, r := range kcatReadJSON(t, c.dlq) {
		dl[r.Key+" "+r.Headers["exactly.dlq.reason"]+" "+r.Headers["exactly.dlq.sqlstate"]]++
	}
	for part := range 3 {
		if k := fmt.Sprintf("bad%d postgres 22P02", part); dl[k] < 1 {
			t.Errorf("no dead letter %q; dead letters %v", k, dl)
		}
	}
	a.stop()
	b.stop()
}

// The dead-letter topic of a running at-least-once stage is deleted; a
// record that must be dead-lettered arrives between good ones, and its
// dead letter fails until the topic is created again, each failure
// rebuilding the session. The good records after it were written before
// the first rewind: no rebuild may write them again (once per rebuild
// would be 7 times here). Every good
// record is output exactly once, and the bad one dead-lettered once.
func TestDeadLetterTopicGoneAtLeastOnce(t *testing.T) {
	t.Parallel()
	const g = "at-least-once"
	s := newRefusedStage(t, "dlqgone", 3, "100ms", 1000)
	var want []string
	ends := map[int32]int64{}
	for p := range 3 {
		lines := eventLines(fmt.Sprintf("p%d", p), 0, 20, 0)
		kcatProducePartition(t, s.in, p, lines)
		want = append(want, keysOf(lines)...)
		ends[int32(p)] = 20
	}
	a := s.run(t, g, "i-a")
	s.waitCommitted(t, ends, time.Minute)

	if out, err := topicTool(t, "--delete", "--topic", s.dlq); err != nil {
		t.Fatalf("delete %s: %v\n%s", s.dlq, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, s.dlq); return id == "" },
		func() string { return s.dlq + " still exists" })
	for p := range 3 {
		lines := eventLines(fmt.Sprintf("q%d", p), 0, 20, 0)
		want = append(want, keysOf(lines)...)
		if p == 1 {
			lines = append(append(append([][]byte{}, lines[:10]...), []byte("bad-1|not json")), lines[10:]...)
		}
		kcatProducePartition(t, s.in, p, lines)
		ends[int32(p)] += int64(len(lines))
	}
	eventually(t, 2*time.Minute, func() bool {
		a.alive()
		return strings.Count(a.logs.String(), "rebuilding") >= 2
	}, func() string {
		return "the stage did not rebuild its session twice while the dead-letter topic was gone"
	})
	eventually(t, time.Minute, func() bool {
		out, err := topicTool(t, "--create", "--topic", s.dlq, "--partitions", "1", "--replication-factor", "1")
		return err == nil || strings.Contains(out, "already exists")
	}, func() string { return "could not create " + s.dlq + " again" })
	s.waitCommitted(t, ends, 2*time.Minute)
	a.alive()
	got := keyCounts(t, s.out)
	var missing, doubled []string
	for _, k := range want {
		switch got[k] {
		case 0:
			missing = append(missing, k)
		case 1:
		default:
			doubled = append(doubled, fmt.Sprintf("%s×%d", k, got[k]))
		}
	}
	if len(missing) > 0 || len(doubled) > 0 || len(got) != len(want) {
		t.Errorf("output %s: %d keys missing %v, %d written more than once %v; %d keys, want %d",
			s.out, len(missing), firstOf(missing), len(doubled), firstOf(doubled), len(got), len(want))
	}
	s.checkDeadLetters(t, "exactly-once", []dlqSource{{1, 30, "decode"}})
	a.stop()
}

// A sink's stored position is above the partition's high watermark with
// the topic's own ID (an operator's edit, or a log truncated by an unclean
// leader election), and records arrive while the sink is stopped. Resuming
// at the high watermark found at start would never load the records that
// arrived while it was stopped, at offsets below that watermark, and keep
// the stored 1000 for the next restart to skip again. No input offset is
// ever skipped (the event IDs keep a re-read safe): all 8 records load.
func TestSinkPositionAboveHighWatermarkSameTopic(t *testing.T) {
	pool := pgPool(t)
	c := newLoadSink(t, pool, "hw", 1, "{ event_id: event_id, body: $value }", "", nil)
	c.loadOnce(t, pool, "i-1", eventLines("a", 0, 5, 0), 5)

	pgExec(t, pool, "UPDATE "+c.schema+".exactly_positions SET next_offset = 1000 WHERE sink = '"+c.name+"'")
	kcatProduce(t, c.in, eventLines("b", 0, 3, 0))
	p := c.run(t, "i-1", "")
	waitRows(t, pool, c.table, 8, 30*time.Second, p)
}
