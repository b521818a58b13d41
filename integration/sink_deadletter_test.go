//go:build integration

package integration

// A sink's dead letter too large for its dead-letter topic (the broker
// refuses it, MESSAGE_TOO_LARGE) becomes a size-bounded envelope in the
// same batch: the batch commits, nothing is retried forever, and the
// sink goes on.

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSinkDeadLetterEnvelope(t *testing.T) {
	pool := pgPool(t)
	c := loadSink{name: uniqueName("sinkenv"), in: uniqueName("sinkenv_in"), dlq: uniqueName("sinkenv_dlq")}
	c.schema = freshSchema(t, pool, "sinkenv")
	c.table = c.schema + ".events"
	// The dead-letter topic takes records of at most 4000 bytes.
	c.topo = userTopology(t, []fileTopic{{name: c.in, parts: 1}, {name: c.dlq, parts: 1, config: map[string]string{"max.message.bytes": "4000"}}},
		"sinks:\n"+jsonSinkItem(c.name, c.in, c.dlq, c.table, "", "{ event_id: event_id, body: $value }", ""))
	in, dlq, table := c.in, c.dlq, c.table

	// Incompressible: a producer's compression cannot bring it under
	// max.message.bytes.
	noise := make([]byte, 4500)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	bad := fmt.Sprintf(`{"n":3,"pad":"%s"}`, base64.StdEncoding.EncodeToString(noise)) // no event_id: a dead letter
	if len(bad) < 6000 {
		t.Fatalf("bad record of %d bytes, want about 6 KB", len(bad))
	}
	lines := append(eventLines("env", 0, 3, 0), []byte("bad|"+bad))
	lines = append(lines, eventLines("env", 3, 2, 0)...)
	kcatProducePartition(t, in, 0, lines)

	p := c.run(t, "sinkenv-1", "")
	eventually(t, 60*time.Second, func() bool {
		rows, _ := rowStats(t, pool, table)
		return rows == 5 && kcatCount(t, dlq) == 1
	}, func() string {
		rows, _ := rowStats(t, pool, table)
		return fmt.Sprintf("%d rows (want 5), %d dead letters (want 1)", rows, kcatCount(t, dlq))
	})

	recs := kcatRead(t, dlq) // read_committed
	if len(recs) != 1 {
		t.Fatalf("%d dead letters, want 1", len(recs))
	}
	env := recs[0]
	want := map[string]string{
		"exactly.dlq.value.omitted": strconv.Itoa(len(bad)), "exactly.dlq.reason": "event_id",
		"exactly.dlq.source.topic": in, "exactly.dlq.source.partition": "0", "exactly.dlq.source.offset": "3",
		"exactly.dlq.stage": c.name,
	}
	for k, v := range want {
		if env.Headers[k] != v {
			t.Errorf("envelope header %s = %q, want %q (headers %v)", k, env.Headers[k], v, env.Headers)
		}
	}
	if env.Value != "" || env.Key != "bad" {
		t.Errorf("envelope key %q, %d value bytes; want key bad and no value", env.Key, len(env.Value))
	}
	if !strings.Contains(p.logs.String(), "sending a size-bounded envelope instead") {
		t.Errorf("no warning of the envelope in the logs")
	}

	// The sink goes on: later records arrive, and every row is written once.
	kcatProducePartition(t, in, 0, eventLines("env", 5, 3, 0))
	eventually(t, 60*time.Second, func() bool {
		rows, _ := rowStats(t, pool, table)
		return rows == 8 && c.positionsAtEnd(t, pool)
	}, func() string {
		rows, _ := rowStats(t, pool, table)
		return fmt.Sprintf("%d rows, want 8; positions %v", rows, storedPositions(t, pool, c.schema+".exactly_positions", in))
	})
	if rows, distinct := rowStats(t, pool, table); rows != 8 || distinct != 8 {
		t.Fatalf("%d rows, %d distinct event IDs; want 8 and 8", rows, distinct)
	}
	if n := kcatCount(t, dlq); n != 1 {
		t.Fatalf("%d dead letters after the later records, want 1", n)
	}
	if got := storedPositions(t, pool, c.schema+".exactly_positions", in)[0]; got != 9 {
		t.Fatalf("stored position %d, want 9", got)
	}
	if p.exited() {
		t.Fatal("the sink exited")
	}
	p.stop()
}
