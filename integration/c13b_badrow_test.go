//go:build integration

package integration

// Outside inputs of issue 13, kinds 1 and 3, on the sink: no input offset
// is ever skipped, and one bad row never stalls a sink.

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A trigger that raises for one row with its own SQLSTATE (RAISE ... USING
// ERRCODE = 'U0001', a common way to tag an application's errors): the
// error is the row's, as the bisection can see (the other halves commit).
// Today the batch counts as "unclassified", is retried 6 times, and the
// sink exits 1 with none of the 4 good rows written; a restart does the
// same, so the stream is stalled for good.
func TestC13bTriggerWithCustomSQLSTATE(t *testing.T) {
	pool := pgPool(t)
	c := newC13Sink(t, pool, "c13bcust", 1, "{ event_id: event_id, n: n }", "", func(s string) {
		pgExec(t, pool, "CREATE TABLE "+s+".events (event_id text PRIMARY KEY, n int)")
		pgExec(t, pool, "CREATE FUNCTION "+s+`.refuse3() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.n = 3 THEN RAISE EXCEPTION 'three is refused' USING ERRCODE = 'U0001'; END IF; RETURN NEW; END $$`)
		pgExec(t, pool, "CREATE TRIGGER refuse3 BEFORE INSERT ON "+s+".events FOR EACH ROW EXECUTE FUNCTION "+s+".refuse3()")
	})
	var lines [][]byte
	for i := 1; i <= 5; i++ {
		lines = append(lines, fmt.Appendf(nil, `c%d|{"event_id":"c%d","n":%d}`, i, i, i))
	}
	kcatProduce(t, c.in, lines)
	addr := freeAddr(t)
	p := c.run(t, "c13b-1", addr)
	waitRows(t, pool, c.table, 4, 45*time.Second, p)
	eventually(t, 30*time.Second, func() bool { return len(kcatRead(t, c.dlq)) == 1 }, func() string {
		return fmt.Sprintf("%d dead letters, want 1", len(kcatRead(t, c.dlq)))
	})
	dl := kcatRead(t, c.dlq)[0]
	if dl.Key != "c3" || dl.Headers["exactly.dlq.sqlstate"] != "U0001" {
		t.Errorf("dead letter key %q headers %v; want c3 with exactly.dlq.sqlstate U0001", dl.Key, dl.Headers)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
}

// A bad row (a check on length refuses a 1.5 MB text) whose dead letter is
// larger than the dead-letter topic accepts (max.message.bytes, 1 MB by
// default; the input topic allows 4 MB). Today the dead letter's
// MESSAGE_TOO_LARGE is retried as transient forever: the two good rows of
// the batch are never written and the sink is stalled (/readyz not ready).
// Accepted: the good rows are written and the bad record leaves a dead
// letter (its value may be cut, its headers say why), or the sink exits
// non-zero naming the dead-letter topic; never a silent endless retry.
func TestC13bDeadLetterLargerThanItsTopicAccepts(t *testing.T) {
	pool := pgPool(t)
	schema := c13Schema(t, pool, "c13bhuge")
	pgExec(t, pool, "CREATE TABLE "+schema+".events (event_id text PRIMARY KEY, v text CHECK (length(v) < 1000))")
	name, in, dlq := uniqueName("c13bhuge"), uniqueName("c13bhuge_in"), uniqueName("c13bhuge_dlq")
	topo := c13Topology(t, []c13Topic{{name: in, parts: 1, config: map[string]string{"max.message.bytes": "4000000"}}, {name: dlq, parts: 1}},
		"sinks:\n"+c13Sink(name, in, dlq, schema+".events", "", "{ event_id: event_id, v: v }", ""))
	rng := rand.New(rand.NewPCG(13, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	big := make([]byte, 1_500_000)
	for i := range big {
		big[i] = alphabet[rng.IntN(len(alphabet))]
	}
	kcatProduceLarge(t, in, [][]byte{
		[]byte(`h1|{"event_id":"h1","v":"small"}`),
		fmt.Appendf(nil, `h2|{"event_id":"h2","v":"%s"}`, big),
		[]byte(`h3|{"event_id":"h3","v":"small3"}`),
	})
	p := start(t, nil, "sink", "--topology", topo, "--instance-id", "c13b-1", "--log-level", "info")
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) && !p.exited() {
		if n, _ := c13Rows(t, pool, schema+".events"); n == 2 && len(kcatRead(t, dlq)) == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond) // polling an external process
	}
	if p.exited() {
		if p.err == nil || !strings.Contains(p.logs.String(), dlq) {
			t.Fatalf("the sink exited (%v) without an error naming the dead-letter topic %s:\n%s", p.err, dlq, tail(p.logs.String(), 20))
		}
		return
	}
	n, _ := c13Rows(t, pool, schema+".events")
	dls := kcatRead(t, dlq)
	if n != 2 || len(dls) != 1 {
		t.Fatalf("after 40 s: %d rows (want h1 and h3), %d dead letters (want h2's); logs:\n%s", n, len(dls), tail(p.logs.String(), 20))
	}
	if dls[0].Key != "h2" || dls[0].Headers["exactly.dlq.sqlstate"] != "23514" {
		t.Errorf("dead letter key %q headers %v; want h2 with exactly.dlq.sqlstate 23514", dls[0].Key, dls[0].Headers)
	}
}

// kcatProduceLarge is kcatProduce for records above librdkafka's default
// 1 MB message.max.bytes.
func kcatProduceLarge(t testing.TB, topic string, lines [][]byte) {
	t.Helper()
	kcatProduceArgs(t, topic, lines, "-X", "message.max.bytes=8000000")
}

// A sink's stored position is above the partition's high watermark with
// the topic's own ID (an operator's edit, or a log truncated by an unclean
// leader election), and records arrive while the sink is stopped. The sink
// resumes at the high watermark it finds at start, so the records that
// arrived while it was stopped, at offsets below that watermark, are never
// loaded; the stored 1000 even stays, so the next restart skips again.
// Records in the log below the high watermark and at or above the last
// position the sink could have read are skipped: issue 13 kind 1 says no
// input offset is ever skipped (the event IDs keep a re-read safe).
func TestC13bSinkPositionAboveHighWatermarkSameTopic(t *testing.T) {
	pool := pgPool(t)
	c := newC13Sink(t, pool, "c13bhw", 1, "{ event_id: event_id, body: $value }", "", nil)
	c.loadOnce(t, pool, "c13b-1", c13Events("a", 0, 5, 0), 5)

	pgExec(t, pool, "UPDATE "+c.schema+".exactly_positions SET next_offset = 1000 WHERE sink = '"+c.name+"'")
	kcatProduce(t, c.in, c13Events("b", 0, 3, 0))
	p := c.run(t, "c13b-1", "")
	waitRows(t, pool, c.table, 8, 30*time.Second, p)
}
