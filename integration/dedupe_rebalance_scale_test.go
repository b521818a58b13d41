//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The events of TestDedupeRebalanceScale: e-n goes to input partition
// n % scaleParts, except the tick and the reused IDs, which go to the
// partition q that the test picks.
const (
	scaleParts   = 6
	scaleBatch1  = 0     // e-0..e-8999: phase 1, it-a alone
	scaleBatch2a = 9000  // e-9000..e-14999: while it-b and it-c join
	scaleBatch2b = 15000 // e-15000..e-17999: three instances, stable
	scaleTick    = 18000 // one record timestamped 30 minutes ahead, to q
	scaleBatch3  = 18001 // e-18001..e-21000: while it-c and it-b stop
	scaleReused  = 21001 // e-21001..e-21100: new events with expired IDs, to q
	scaleEvents  = 21101 // distinct events
	scaleNReused = scaleEvents - scaleReused
)

// TestDedupeRebalanceScale: a dedupe stage scaled 1 -> 3 -> 1 (instances
// it-a, it-b and it-c, each with its own --state-dir), while kcat produces
// events and resent duplicates to 6 partitions. The stores move with their
// partitions through the changelog, and no duplicate passes:
//
//   - Phase 1: it-a alone commits 9,000 events (1,500 per partition).
//   - Phase 2: it-b and it-c join while 6,000 more events arrive. Once the
//     group is stable, with each partition held once, 2,500 events of
//     phase 1 are resent (500 to every partition but q), and 3,000 new
//     events follow. it-b and it-c never saw the phase-1 events: they can
//     drop the resent ones only from the stores they rebuilt from the
//     changelog. Each instance's count of dropped records is exactly the
//     resent events of the partitions it holds, which proves where each
//     duplicate was caught.
//   - q is a partition it-a gave away. It first receives a record
//     timestamped 30 minutes ahead: its stream time jumps past the
//     20-minute retention of the IDs seen so far, and its new owner
//     expires them and writes their tombstones to the changelog. it-a's
//     local store still holds q's phase-1 IDs, under its older checkpoint.
//   - Phase 3: it-c, then it-b, stop (SIGTERM) while 3,000 more events
//     arrive. it-a gets every partition back and resumes each from its
//     own checkpoint, which the changelog has moved past. Then phase-2
//     events that only it-b and it-c saw, and phase-1 events, are resent:
//     it-a must drop them all (no missed ID). And 100 new events reuse IDs
//     that expired in q: they must pass, though it-a's stale store, judged
//     alone, would drop them.
//
// Read back read_committed with kcat, the output holds each event once and
// no dead letter; exactly verify counts every resent event deduplicated
// and none lost.
//
// kcat produces every record but the one timestamped ahead: kcat 1.7
// cannot set a record's timestamp, so franz-go writes that one.
func TestDedupeRebalanceScale(t *testing.T) {
	began := time.Now()
	in, out, dlq, stage, topo := scaleTopology(t)
	group, changelog := "exactly-"+stage, "exactly-"+stage+"-dedupe-changelog"
	exactlyCmd(t, "topics", "create", "--topology", topo)

	type instance struct {
		name, metrics string
		p             *proc
	}
	run := func(name string) *instance {
		addr := freeAddr(t)
		p := start(t, nil, "run", "--topology", topo, "--instance-id", name, "--state-dir", t.TempDir(), "--metrics-addr="+addr)
		return &instance{name: name, metrics: addr, p: p}
	}
	dropped := func(i *instance) int {
		t.Helper()
		n, series := sum(scrape(t, i.metrics), "exactly_stage_deduplicated_records_total", map[string]string{"stage": stage})
		if series != 1 {
			t.Fatalf("%s: %d series of exactly_stage_deduplicated_records_total, want 1", i.name, series)
		}
		return int(n)
	}

	// Phase 1: one instance.
	a := run("it-a")
	kcatProduceParts(t, in, scaleLines(scaleBatch1, scaleBatch2a, nil))
	waitGroupCaughtUp(t, group, in, 3*time.Minute)
	waitOwners(t, group, stage, in, "it-a")
	if n := dropped(a); n != 0 {
		t.Fatalf("phase 1: it-a dropped %d records, want 0", n)
	}

	// Phase 2: two more instances join while events arrive.
	b, c := run("it-b"), run("it-c")
	kcatProduceParts(t, in, scaleLines(scaleBatch2a, scaleBatch2b, nil))
	owners := waitOwners(t, group, stage, in, "it-a", "it-b", "it-c")
	q := owners["it-b"][0] // a partition it-a gave away
	t.Logf("phase 2: partitions per instance %v; q = %d", owners, q)
	produceTick(t, in, q)
	resent2 := map[string]int{} // resent events per instance that holds them
	lines := scaleLines(scaleBatch2b, scaleTick, nil)
	for n := scaleBatch1; n < scaleBatch2a; n++ {
		if p := int32(n % scaleParts); p != q && (n/scaleParts)%3 == 0 {
			lines[p] = append(lines[p], scaleLine(n, n))
			resent2[ownerOf(owners, p)]++
		}
	}
	kcatProduceParts(t, in, lines)
	waitGroupCaughtUp(t, group, in, 3*time.Minute)
	if now := waitOwners(t, group, stage, in, "it-a", "it-b", "it-c"); !ownersEqual(now, owners) {
		t.Fatalf("the group rebalanced during phase 2 (%v, then %v): the counts per instance cannot say which store dropped what", owners, now)
	}
	for _, i := range []*instance{a, b, c} {
		if got := dropped(i); got != resent2[i.name] {
			t.Errorf("phase 2: %s dropped %d records, want %d (the resent events of its partitions %v)", i.name, got, resent2[i.name], owners[i.name])
		}
	}
	// it-b and it-c rebuilt the stores of their partitions from the
	// changelog (their state dirs were new): 1,500 phase-1 IDs each at
	// least.
	for _, i := range []*instance{b, c} {
		resumed, rebuilt, records := restoredParts(i.p.logs.String())
		if min := int64(1500 * len(owners[i.name])); !isSubset(owners[i.name], rebuilt) || records < min {
			t.Errorf("%s: restores resumed %v, rebuilt %v, read %d records; want its partitions %v rebuilt from at least %d records",
				i.name, resumed, rebuilt, records, owners[i.name], min)
		}
	}
	droppedA2 := dropped(a)

	// The changelog moved on past it-a's checkpoint of q: q's owner
	// expired the IDs seen before the tick and tombstoned them.
	var tombstones int
	var expired []int // phase-1 IDs of q, tombstoned
	for _, r := range kcatRead(t, changelog) {
		if r.Partition != strconv.Itoa(int(q)) || r.Key == "" || r.Value != "" {
			continue
		}
		tombstones++
		n, err := strconv.Atoi(strings.TrimPrefix(r.Key, "e-"))
		if err != nil || n >= scaleBatch2b {
			t.Fatalf("changelog %s partition %d: a tombstone of %q, which was seen after the tick", changelog, q, r.Key)
		}
		if n < scaleBatch2a {
			expired = append(expired, n)
		}
	}
	if len(expired) < scaleNReused {
		t.Fatalf("changelog %s partition %d holds %d tombstones of phase-1 IDs, want at least %d: the tick expired nothing", changelog, q, len(expired), scaleNReused)
	}
	slices.Sort(expired)

	// Phase 3: it-c, then it-b, stop while events arrive.
	mark, markB := len(a.p.logs.String()), len(b.p.logs.String())
	third := scaleLines(scaleBatch3, scaleReused, nil)
	stopWhile(t, c.p, func() { kcatProduceParts(t, in, alternate(third, 0)) })
	two := waitOwners(t, group, stage, in, "it-a", "it-b")
	if gained := minus(two["it-b"], owners["it-b"]); len(gained) > 0 {
		// it-b took some of it-c's partitions: let their restore end
		// before it stops.
		eventually(t, 2*time.Minute, func() bool {
			resumed, rebuilt, _ := restoredParts(b.p.logs.String()[markB:])
			return isSubset(gained, append(resumed, rebuilt...))
		}, func() string { return fmt.Sprintf("it-b did not restore partitions %v", gained) })
	}
	stopWhile(t, b.p, func() { kcatProduceParts(t, in, alternate(third, 1)) })
	waitOwners(t, group, stage, in, "it-a")

	// Only it-a runs. Resent: every third phase-2 event (those of the
	// partitions it got back only it-b and it-c saw; in q only those
	// after the tick, the others expired), and every tenth phase-1 event
	// but q's. New: events reusing IDs that expired in q.
	resent3 := 0
	lines = map[int32][][]byte{}
	for n := scaleBatch2a; n < scaleTick; n++ {
		if p := int32(n % scaleParts); (p != q || n >= scaleBatch2b) && (n/scaleParts)%3 == 1 {
			lines[p] = append(lines[p], scaleLine(n, n))
			resent3++
		}
	}
	for n := scaleBatch1; n < scaleBatch2a; n++ {
		if p := int32(n % scaleParts); p != q && (n/scaleParts)%10 == 5 {
			lines[p] = append(lines[p], scaleLine(n, n))
			resent3++
		}
	}
	for i := range scaleNReused {
		lines[q] = append(lines[q], scaleLine(scaleReused+i, expired[i]))
	}
	kcatProduceParts(t, in, lines)
	waitGroupCaughtUp(t, group, in, 3*time.Minute)
	returned := append(slices.Clone(owners["it-b"]), owners["it-c"]...)
	resumed, rebuilt, records := restoredParts(a.p.logs.String()[mark:])
	if !isSubset(returned, resumed) || len(rebuilt) > 0 {
		t.Errorf("phase 3: it-a resumed %v and rebuilt %v; want the partitions it got back, %v, resumed from its checkpoints", resumed, rebuilt, returned)
	}
	// Past it-a's checkpoint, q alone gained the tick, 500 IDs seen
	// after it, and the tombstones.
	if min := int64(1 + 500 + tombstones); records < min {
		t.Errorf("phase 3: it-a's restores read %d changelog records, want at least %d", records, min)
	}
	droppedA3 := dropped(a) - droppedA2
	if droppedA3 != resent3 {
		t.Errorf("phase 3: it-a dropped %d records, want %d (every event resent in phase 3; none of the %d reused expired IDs)", droppedA3, resent3, scaleNReused)
	}
	a.p.stop()

	resent := resent2["it-a"] + resent2["it-b"] + resent2["it-c"] + resent3
	checkDeduplicatedOnce(t, topo, out, dlq, scaleEvents, resent)
	t.Logf("%d distinct events, %d resent: %d dropped by it-b and it-c from rebuilt stores, %d by it-a before the scale-down and %d after it resumed its stale checkpoints; %d reused expired IDs passed; %s",
		scaleEvents, resent, resent2["it-b"]+resent2["it-c"], resent2["it-a"], droppedA3, scaleNReused, time.Since(began).Round(time.Second))
}

// scaleTopology writes a topology whose stage dedupes on value.id (20
// minutes), with a 6-partition input and output, keyed by event_id, and
// returns its names.
func scaleTopology(t *testing.T) (in, out, dlq, stage, topo string) {
	t.Helper()
	in, out, dlq, stage = uniqueName("in"), uniqueName("out"), uniqueName("dlq"), uniqueName("scale")
	topo = stagesTopology{txnTimeout: "20s", partitions: scaleParts, stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, key: "event_id", interval: "100ms", maxRecords: 1000,
		transform: "- dedupe: { id: value.id, retention: 20m }",
	}}}.write(t)
	return in, out, dlq, stage, topo
}

// scaleLine is event e-n with dedupe ID e-id as a kcat "key|value" line,
// keyed by its event ID.
func scaleLine(n, id int) []byte {
	return fmt.Appendf(nil, `e-%d|{"event_id":"e-%d","id":"e-%d","n":%d}`, n, n, id, n)
}

// scaleLines adds events e-from..e-(to-1), each its own ID, to lines (nil:
// a new map) under their partitions, and returns it.
func scaleLines(from, to int, lines map[int32][][]byte) map[int32][][]byte {
	if lines == nil {
		lines = map[int32][][]byte{}
	}
	for n := from; n < to; n++ {
		p := int32(n % scaleParts)
		lines[p] = append(lines[p], scaleLine(n, n))
	}
	return lines
}

// alternate returns every other line of each partition, from the first
// (odd 0) or the second (odd 1).
func alternate(lines map[int32][][]byte, odd int) map[int32][][]byte {
	m := map[int32][][]byte{}
	for p, ls := range lines {
		for i, l := range ls {
			if i%2 == odd {
				m[p] = append(m[p], l)
			}
		}
	}
	return m
}

// produceTick writes event e-scaleTick to partition p of topic, timestamped
// 30 minutes ahead (within the broker's default
// message.timestamp.after.max.ms of 1 hour).
func produceTick(t *testing.T, topic string, p int32) {
	t.Helper()
	cl := kafkaClient(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, value, _ := bytes.Cut(scaleLine(scaleTick, scaleTick), []byte("|"))
	r := &kgo.Record{Topic: topic, Partition: p, Key: key, Value: value, Timestamp: time.Now().Add(30 * time.Minute)}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatalf("produce the tick to %s/%d: %v", topic, p, err)
	}
}

// waitOwners waits until the group of stage is stable with exactly the
// instances named, holding every partition of topic once and at least one
// each, and returns each instance's partitions, sorted.
func waitOwners(t *testing.T, group, stage, topic string, instances ...string) map[string][]int32 {
	t.Helper()
	cl := kafkaClient(t)
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var owners map[string][]int32
	var state string
	eventually(t, 2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dgs, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return false
		}
		g := dgs[group]
		state, owners = g.State, map[string][]int32{}
		held := map[int32]int{}
		for _, m := range g.Members {
			if m.InstanceID == nil {
				return false
			}
			name := strings.TrimPrefix(*m.InstanceID, "exactly-"+stage+"-")
			ca, ok := m.Assigned.AsConsumer()
			if !ok {
				return false
			}
			owners[name] = []int32{}
			for _, at := range ca.Topics {
				if at.Topic == topic {
					owners[name] = append(owners[name], at.Partitions...)
					for _, p := range at.Partitions {
						held[p]++
					}
				}
			}
			slices.Sort(owners[name])
		}
		if g.State != "Stable" || len(owners) != len(instances) || len(held) != scaleParts {
			return false
		}
		for _, n := range held {
			if n != 1 {
				return false
			}
		}
		for _, name := range instances {
			if len(owners[name]) == 0 {
				return false
			}
		}
		return true
	}, func() string {
		return fmt.Sprintf("group %s: state %s, partitions %v; want %v holding all %d partitions", group, state, owners, instances, scaleParts)
	})
	return owners
}

func ownersEqual(a, b map[string][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// ownerOf returns the instance that holds partition p.
func ownerOf(owners map[string][]int32, p int32) string {
	for name, ps := range owners {
		if slices.Contains(ps, p) {
			return name
		}
	}
	return ""
}

// restoredParts sums the restores a process logged: the partitions resumed
// from a checkpoint, those rebuilt, and the changelog records read.
func restoredParts(logs string) (resumed, rebuilt []int32, records int64) {
	parse := func(s string) (ps []int32) {
		for _, f := range strings.Fields(s) {
			p, _ := strconv.Atoi(f)
			ps = append(ps, int32(p))
		}
		return ps
	}
	for _, r := range restores(logs) {
		resumed = append(resumed, parse(r[0])...)
		rebuilt = append(rebuilt, parse(r[1])...)
		n, _ := strconv.ParseInt(r[2], 10, 64)
		records += n
	}
	return resumed, rebuilt, records
}

// isSubset reports whether every element of a is in b.
func isSubset(a, b []int32) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// minus returns the elements of a not in b.
func minus(a, b []int32) []int32 {
	var out []int32
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// stopWhile sends p SIGTERM, runs during (while p commits and leaves the
// group), then requires p to exit 0.
func stopWhile(t *testing.T, p *proc, during func()) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	during()
	if err := p.wait(time.Minute); err != nil {
		t.Fatalf("exactly exited with %v after SIGTERM; logs:\n%s", err, tail(p.logs.String(), 60))
	}
}

// kcatProduceParts writes each partition's "key|value" lines to that
// partition of topic with kcat, in order.
func kcatProduceParts(t *testing.T, topic string, lines map[int32][][]byte) {
	t.Helper()
	for p := range int32(scaleParts) {
		if len(lines[p]) > 0 {
			kcatPut(t, kcatBrokers(t), topic, kcatLines(lines[p]), "-p", strconv.Itoa(int(p)))
		}
	}
}
