//go:build integration

package integration

// A fence (FENCED_INSTANCE_ID) of a static member can be spurious: on a
// three-broker cluster a restarted stage was fenced in SyncGroup after its
// group coordinator moved, with no other process alive, and stopped. A
// stage or sink fenced once rejoins; fenced again within a minute (two
// live processes under one --instance-id) it stops. Real broker, real
// Postgres; the rows are counted in SQL.

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fenceSink writes the topology of one sink named like prefix, reading
// in, loading schema.events, and returns its path, name and input topic.
func fenceSink(t *testing.T, schema, prefix string) (topo, name, in string) {
	t.Helper()
	name, in = uniqueName(prefix), uniqueName(prefix+"_in")
	dlq := uniqueName(prefix + "_dlq")
	topo = userTopology(t, []fileTopic{{name: in, parts: 3}, {name: dlq, parts: 1}},
		"sinks:\n"+jsonSinkItem(name, in, dlq, schema+".events", "", "{ event_id: event_id, body: $value }", ""))
	return topo, name, in
}

// A client that joins the sink's group under the sink's group.instance.id
// fences it once and goes away when fenced in turn: the sink rejoins,
// takes its partitions back and loads every event once, never exiting.
func TestSinkRejoinsAfterOneFence(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "fence1")
	topo, name, in := fenceSink(t, schema, "fence1")
	addr := freeAddr(t)
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "h1", "--metrics-addr="+addr)
	awaitReadyAll(t, []*proc{p}, []string{addr})
	kcatProduce(t, in, eventLines("a", 0, 100, 0))
	waitRows(t, pool, schema+".events", 100, 60*time.Second, p)

	group := "exactly-sink-" + name
	intruder := &fenceWatch{}
	cl := kafkaClient(t, kgo.ConsumerGroup(group), kgo.InstanceID(group+"-h1"), kgo.ConsumeTopics(in),
		kgo.DisableAutoCommit(), kgo.WithHooks(intruder))
	defer cl.Close()
	intruder.attach(cl)
	go func() {
		for cl.Context().Err() == nil {
			cl.PollFetches(cl.Context())
		}
	}()
	eventually(t, 60*time.Second, func() bool { p.alive(); return intruder.fenced() != nil },
		func() string { return "the sink never took its group.instance.id back" })

	kcatProduce(t, in, eventLines("b", 0, 100, 0))
	waitRows(t, pool, schema+".events", 200, 60*time.Second, p)
	if rows, distinct := tableCounts(t, pool, schema+".events"); rows != 200 || distinct != 200 {
		t.Errorf("%d rows, %d distinct event IDs, want 200 and 200", rows, distinct)
	}
	if !strings.Contains(p.logs.String(), "rejoining") {
		t.Errorf("the sink's log does not say it rejoined after the fence")
	}
	p.alive()
}

// Two sink processes under one --instance-id fence each other in turn:
// one stops, naming the fence, at its second fence within the window; the
// other loads every event once.
func TestSinkTwoProcessesOneInstanceID(t *testing.T) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "fence2")
	topo, _, in := fenceSink(t, schema, "fence2")
	a := start(t, nil, "sink", "--topology", topo, "--instance-id", "h1")
	kcatProduce(t, in, eventLines("a", 0, 50, 0))
	waitRows(t, pool, schema+".events", 50, 60*time.Second, a)
	b := start(t, nil, "sink", "--topology", topo, "--instance-id", "h1")
	var stopped, survivor *proc
	eventually(t, 60*time.Second, func() bool {
		switch {
		case a.exited():
			stopped, survivor = a, b
		case b.exited():
			stopped, survivor = b, a
		}
		return stopped != nil
	}, func() string { return "neither process stopped" })
	if stopped.err == nil || !strings.Contains(stopped.logs.String(), "fenced out of consumer group") {
		t.Errorf("the stopped process exited with %v, without naming the fence", stopped.err)
	}
	kcatProduce(t, in, eventLines("b", 0, 150, 0))
	waitRows(t, pool, schema+".events", 200, 60*time.Second, survivor)
	if rows, distinct := tableCounts(t, pool, schema+".events"); rows != 200 || distinct != 200 {
		t.Errorf("%d rows, %d distinct event IDs, want 200 and 200", rows, distinct)
	}
}
