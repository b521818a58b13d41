//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// The crash check: 10,000 events on 3 partitions, the sink killed by
// SIGKILL at a failpoint around its third database commit, then restarted.
// Afterwards the table holds each event once and every stored position is
// its partition's read_committed end.
func TestSinkCrash(t *testing.T) {
	for _, fp := range []string{crashBeforeDBCommit, crashAfterDBCommit} {
		t.Run(fp, func(t *testing.T) {
			t.Parallel()
			const n = 10000
			s := newSinkSpec("crash")
			topo := sinkTopology(t, s)
			kcatProduce(t, s.in, events("e", 0, n))
			pool := pgPool(t)

			p := startSink(t, topo, "c1", failpointEnv+"="+fp+"@3")
			_ = p.wait(2 * time.Minute)
			if !p.killedBySIGKILL() {
				t.Fatalf("sink did not die by SIGKILL at %s@3: %v\n%s", fp, p.err, tail(p.logs.String(), 40))
			}
			rows, _ := rowStats(t, pool, s.table())
			if rows == 0 || rows >= n {
				t.Fatalf("%d rows at the crash; want some but not all", rows)
			}
			t.Logf("crashed at %s@3 with %d rows stored", fp, rows)

			p = startSink(t, topo, "c1")
			waitSinkDone(t, pool, s, n, 2*time.Minute)
			p.stop()
			if d := kcatCount(t, s.dlq); d != 0 {
				t.Fatalf("%d dead letters; the input held only valid events", d)
			}
		})
	}
}

// A zombie: two instances share the partitions; one is stopped with
// SIGSTOP for longer than the session timeout, so that its partitions move
// to the other, and then resumed. Positions sampled all along never
// decrease, and no row is doubled.
func TestSinkZombie(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("zombie")
	s.sessionTimeout, s.maxRecords, s.interval = "6s", 200, "50ms"
	topo := sinkTopology(t, s)
	pool := pgPool(t)
	rec := recordPositions(t, pool, s)
	prod := startProducer(t, s.in, "z", 50)

	a := startSink(t, topo, "a")
	b := startSink(t, topo, "b")
	assigned := func(p *proc) int { return strings.Count(p.logs.String(), "partitions assigned") }
	eventually(t, time.Minute, func() bool {
		n, _ := rowStats(t, pool, s.table())
		return n > 500 && assigned(a) > 0 && assigned(b) > 0 && len(storedPositions(t, pool, s.positions(), s.in)) == 3
	}, func() string { return "both instances assigned and writing" })

	// Pause whichever instance ended up with partitions last; it is likely
	// in the middle of a batch, often inside its database transaction.
	zombie, other := a, b
	if !strings.Contains(tail(a.logs.String(), 400), "batch committed") {
		zombie, other = b, a
	}
	before := assigned(other)
	if err := zombie.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The group moves the zombie's partitions once its session times out.
	eventually(t, time.Minute, func() bool { return assigned(other) > before },
		func() string { return "the partitions of the stopped instance were never reassigned" })
	t.Logf("partitions reassigned %s after SIGSTOP", time.Since(stopped).Round(time.Millisecond))
	if err := zombie.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Keep producing while the zombie wakes up and rejoins.
	eventually(t, time.Minute, func() bool {
		return assigned(zombie) > 1 || strings.Contains(zombie.logs.String(), "position guard failed")
	},
		func() string { return "the resumed instance never rejoined" })
	n := prod.halt(t)
	waitSinkDone(t, pool, s, n, 2*time.Minute)
	a.stop()
	b.stop()
	rec.check(t)
	fenced := strings.Count(zombie.logs.String(), "position guard failed")
	t.Logf("%d events; the resumed instance's batches fenced by the position guard: %d", n, fenced)
}

// Gaps: the input is written transactionally, with aborted transactions
// among committed ones. Aborted records never become rows, and the stored
// positions are exactly each partition's read_committed end, past the last
// commit marker.
func TestSinkGaps(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("gaps")
	topo := sinkTopology(t, s)
	pool := pgPool(t)

	cl := kafkaClient(t, kgo.TransactionalID(uniqueName("it-sink-producer")), kgo.DefaultProduceTopic(s.in))
	defer cl.Close()
	ctx := context.Background()
	next, aborted := writeAbortedGaps(t, cl)

	p := startSink(t, topo, "g1")
	waitSinkDone(t, pool, s, next, time.Minute)
	p.stop()
	var leaked int
	if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE event_id LIKE 'aborted-%%'", s.table())).Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	if leaked != 0 {
		t.Fatalf("%d aborted records became rows", leaked)
	}
	t.Logf("%d committed and %d aborted records; positions %v = read_committed ends", next, aborted, storedPositions(t, pool, s.positions(), s.in))
}

// Poison rows: in one batch, records Postgres rejects (a NUL in text, a NUL
// escape in jsonb, a value too long, a bad type), one without an event ID
// and one that is not JSON. Every other row loads, the six go to the dead
// letter topic, and the sink keeps going.
func TestSinkPoison(t *testing.T) {
	t.Parallel()
	s := newSinkSpec("poison")
	s.columns = "{ event_id: event_id, body: $value, note: note, n: n }"
	s.interval, s.maxRecords = "2s", 5000 // all of the first wave in one batch
	// A table made beforehand, with types stricter than the sink's own.
	pool, topo := typedSink(t, s, "event_id text PRIMARY KEY, body jsonb NOT NULL, note varchar(10), n integer")

	good := func(from, n int) [][]byte {
		var lines [][]byte
		for i := from; i < from+n; i++ {
			lines = append(lines, fmt.Appendf(nil, `g-%d|{"event_id":"g-%d","note":"ok","n":%d}`, i, i, i))
		}
		return lines
	}
	bad := map[string]string{ // key -> expected exactly.dlq.reason
		"nul-text":  "postgres",
		"nul-jsonb": "postgres",
		"too-long":  "postgres",
		"bad-type":  "postgres",
		"no-id":     "event_id",
		"not-json":  "decode",
	}
	wave := good(0, 300)
	wave = append(wave[:100], append([][]byte{
		[]byte(`nul-text|{"event_id":"p-1","note":"a\u0000b"}`),
		[]byte(`nul-jsonb|{"event_id":"p-2","x":"\u0000"}`),
		[]byte(`too-long|{"event_id":"p-3","note":"much too long for ten"}`),
		[]byte(`bad-type|{"event_id":"p-4","n":"seven"}`),
		[]byte(`no-id|{"note":"who am i"}`),
		[]byte(`not-json|{"event_id": "p-6"`),
	}, wave[100:]...)...)
	kcatProduce(t, s.in, wave)

	p := startSink(t, topo, "p1")
	waitSinkDone(t, pool, s, 300, time.Minute)
	kcatProduce(t, s.in, good(300, 100)) // still running
	waitSinkDone(t, pool, s, 400, time.Minute)
	p.stop()

	dl := kcatRead(t, s.dlq)
	got := map[string]string{}
	for _, r := range dl {
		got[r.Key] = r.Headers[deadletter.HeaderReason]
		if r.Headers[deadletter.HeaderStage] != s.name || r.Headers[deadletter.HeaderSourceTopic] != s.in || r.Headers[deadletter.HeaderSourceOffset] == "" {
			t.Errorf("dead letter %s: headers %v", r.Key, r.Headers)
		}
		if got[r.Key] == deadletter.ReasonPostgres && r.Headers[deadletter.HeaderSQLState][:2] != "22" {
			t.Errorf("dead letter %s: sqlstate %q", r.Key, r.Headers[deadletter.HeaderSQLState])
		}
	}
	if len(dl) != len(bad) || fmt.Sprint(got) != fmt.Sprint(bad) {
		t.Fatalf("dead letters %v (%d records), want %v", got, len(dl), bad)
	}
	var n int
	if err := pool.QueryRow(t.Context(), fmt.Sprintf("SELECT count(*) FROM %s WHERE event_id LIKE 'p-%%'", s.table())).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d poison rows stored (%v)", n, err)
	}
}

// Postgres stopped for 20 s mid-stream and started again: the sink retries
// and loses nothing, dead-letters nothing. Not parallel: it takes Postgres
// away from every other test.
func TestSinkPostgresRestart(t *testing.T) {
	s := newSinkSpec("pgrestart")
	topo := sinkTopology(t, s)
	pool := pgPool(t)
	prod := startProducer(t, s.in, "r", 20)
	p := startSink(t, topo, "r1")
	eventually(t, time.Minute, func() bool { n, _ := rowStats(t, pool, s.table()); return n > 500 },
		func() string { return "sink never started writing" })

	pgStop(t)
	stopped := time.Now()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			pgStart(t)
		}
	})
	eventually(t, time.Minute, func() bool { return strings.Contains(p.logs.String(), "retrying") },
		func() string { return "sink never noticed Postgres was down" })
	<-time.After(20*time.Second - time.Since(stopped)) // the outage itself, not a wait for a condition
	pgStart(t)
	restarted = true
	t.Logf("postgres down for %s", time.Since(stopped).Round(time.Millisecond))

	eventually(t, time.Minute, func() bool { n, _ := rowStats(t, pool, s.table()); return n > 0 && prod.n.Load() > 0 },
		func() string { return "no rows after restart" })
	n := prod.halt(t)
	waitSinkDone(t, pool, s, n, 2*time.Minute)
	p.stop()
	if d := kcatCount(t, s.dlq); d != 0 {
		t.Fatalf("%d dead letters after a Postgres restart", d)
	}
	t.Logf("%d events loaded across the restart; batches retried: %d log lines", n, strings.Count(p.logs.String(), "retrying"))
}
