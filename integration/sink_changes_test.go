//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// A Debezium change stream, one record per database transaction:
// c(id=1,a), u(id=1,b), d(id=1), the tombstone after the delete,
// c(id=2,c), u(id=2,d) (inside a {schema, payload} wrapper), then an
// event of an unknown op. The sink is killed at a failpoint around its
// third commit and restarted: the table ends as the one row id=2 with d,
// whichever the failpoint, and the bad event is one dead letter.
func TestSinkDebeziumChanges(t *testing.T) {
	events := [][]byte{
		[]byte(`{"id":1}|{"before":null,"after":{"id":1,"a":"a"},"op":"c"}`),
		[]byte(`{"id":1}|{"before":{"id":1,"a":"a"},"after":{"id":1,"a":"b"},"op":"u"}`),
		[]byte(`{"id":1}|{"before":{"id":1,"a":"b"},"after":null,"op":"d"}`),
		[]byte(`{"id":1}|`),
		[]byte(`{"id":2}|{"before":null,"after":{"id":2,"a":"c"},"op":"c"}`),
		[]byte(`{"id":2}|{"schema":{"type":"struct","name":"x.Envelope"},"payload":{"before":{"id":2,"a":"c"},"after":{"id":2,"a":"d"},"op":"u"}}`),
		[]byte(`{"id":3}|{"before":null,"after":{"id":3,"a":"e"},"op":"t"}`),
	}
	for _, fp := range []string{crashBeforeDBCommit, crashAfterDBCommit} {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			s := newSinkSpec("s17a_cdc")
			s.maxRecords = 1 // one record per commit: the crash falls in the middle
			const extra = "      mode: upsert\n      envelope: debezium\n"
			topo := changeSinkTopology(t, s, s.name, "positions", 1, "{ event_id: id, a: a }", extra)
			kcatProduce(t, s.in, events)
			checkChangesCrash(t, s, topo, fp)
		})
	}
}

// checkChangesCrash runs the sink of topo, one record per commit, on the
// change events of TestSinkDebeziumChanges (JSON or Avro) with failpoint
// fp armed at its third commit; it must die by SIGKILL there, then,
// restarted, reach the input's ends with the table the one row 2|d and
// the event of op t one dead letter of reason envelope.
func checkChangesCrash(t *testing.T, s sinkSpec, topo, fp string) {
	t.Helper()
	// What the table holds after the commits before the crash (records
	// 1-2 at crash-before-db-commit@3, 1-3 after).
	atCrash := map[string]string{crashBeforeDBCommit: "1|b", crashAfterDBCommit: ""}
	pool := pgPool(t)
	read := func() string {
		return strings.Join(versionRows(t, pool, s.table(), "event_id, a"), ",")
	}

	p := startSink(t, topo, "c1", failpointEnv+"="+fp+"@3")
	_ = p.wait(2 * time.Minute)
	if !p.killedBySIGKILL() {
		t.Fatalf("sink did not die by SIGKILL at %s@3: %v\n%s", fp, p.err, tail(p.logs.String(), 40))
	}
	if got := read(); got != atCrash[fp] {
		t.Fatalf("table at the crash %q, want %q", got, atCrash[fp])
	}

	p = startSink(t, topo, "c1")
	eventually(t, time.Minute, func() bool { return positionsAt(t, pool, s.positions(), s.in) },
		func() string {
			return fmt.Sprintf("positions %v, ends %v; rows %s", storedPositions(t, pool, s.positions(), s.in), committedEnds(t, s.in), read())
		})
	p.stop()
	if got := read(); got != "2|d" {
		t.Fatalf("table %q, want the one row 2|d", got)
	}
	dl := kcatReadJSON(t, s.dlq)
	if len(dl) != 1 || dl[0].Headers[deadletter.HeaderReason] != deadletter.ReasonEnvelope || !strings.Contains(dl[0].Headers[deadletter.HeaderError], `unknown op "t"`) {
		t.Fatalf("dead letters %+v, want the one event of op t, reason envelope", dl)
	}
}
