//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/exactly-io/exactly/integration/internal/tcpproxy"
	"github.com/exactly-io/exactly/integration/opstest"
	"github.com/exactly-io/exactly/processor/kit"
)

// proxiedDSN returns PG_DSN with its host and port replaced by a TCP proxy
// in front of them; the proxy is closed when the test ends.
func proxiedDSN(t *testing.T) (string, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(pgDSN(t))
	if err != nil || u.Host == "" {
		t.Fatalf("PG_DSN: want a postgres:// URL with a host, got an error %v", err)
	}
	p, err := tcpproxy.Listen("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	return u.String(), p
}

// A Postgres that stops answering on open connections, with no reset and
// no error (a network partition, a frozen server), in the middle of the
// sink's work: each attempt is cancelled at postgres.timeout, logged and
// retried, /readyz fails naming the timeout, and once Postgres answers
// again every record is a row exactly once. Before postgres.timeout the
// sink waited for ever, silent (pgx, like libpq, has no deadline of its
// own on an open connection). The stall can catch an attempt at COMMIT,
// whose outcome the sink cannot know; the retry's position guard finds it.
func TestSinkPostgresThatStopsAnsweringIsTimedOut(t *testing.T) {
	const first, second = 300, 600
	s := newSinkSpec("pgto")
	b := sinkYAMLHead(t, s, 3, "{ event_id: event_id, body: $value }")
	b.WriteString("      timeout: 15s\n")
	b.WriteString("    commit: { interval: 50ms, max_records: 100 }\n")
	topo := writeSinkTopology(t, s, "topology.yaml", b.String())
	dsn, proxy := proxiedDSN(t)
	pool := pgPool(t) // not through the proxy

	kcatProduce(t, s.in, events("pgto", 0, first))
	addr := opstest.FreeAddr(t)
	p := start(t, []string{"PG_DSN=" + dsn}, "sink", "--topology", topo, "--instance-id", "a1", "--log-level", "debug", "--metrics-addr", addr)
	waitSinkDone(t, pool, s, first, time.Minute)

	proxy.Stall()
	kcatProduce(t, s.in, events("pgto", first, second-first))
	// The stall limit of /readyz (10 s) ends before the timeout (15 s):
	// first it names the step the batch waits at, then the timeout.
	readyzSays(t, addr, "its write has been at PostgreSQL: ")
	waitLogged(t, p, "no answer within postgres.timeout 15s, at PostgreSQL: ", 1, time.Minute,
		"an attempt cancelled at postgres.timeout and logged while Postgres does not answer")
	readyzSays(t, addr, "retrying: no answer within postgres.timeout 15s")
	if n, _ := rowStats(t, pool, s.table()); n > second {
		t.Fatalf("%d rows while stalled, want at most %d", n, second)
	}

	proxy.Restore()
	waitSinkDone(t, pool, s, second, 2*time.Minute)
	eventually(t, 30*time.Second, func() bool {
		code, _ := get(t, "http://"+addr+"/readyz")
		return code == http.StatusOK
	}, func() string {
		_, body := get(t, "http://"+addr+"/readyz")
		return "/readyz after Postgres answers again: " + body
	})
	if n := kcatCount(t, s.dlq); n != 0 {
		t.Errorf("%d dead letters: a Postgres that does not answer is a transient fault, never a record's", n)
	}
	p.stop()
}

// readyzSays waits until /readyz at addr is not ready and says want.
func readyzSays(t *testing.T, addr, want string) {
	t.Helper()
	eventually(t, time.Minute, func() bool {
		code, body := get(t, "http://"+addr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, want)
	}, func() string {
		code, body := get(t, "http://"+addr+"/readyz")
		return fmt.Sprintf("/readyz %d %q, want it not ready, saying %q", code, body, want)
	})
}

// slowRecordSink creates a sink of 1 partition whose table's trigger
// sleeps 3 s on each record whose event ID matches the SQL regular
// expression slow, with postgres.timeout 1s and batches of maxRecords; it
// returns the spec, a direct pool and the topology file.
func slowRecordSink(t *testing.T, prefix, slow string, maxRecords int) (sinkSpec, *pgxpool.Pool, string) {
	t.Helper()
	s := newSinkSpec(prefix)
	pool := pgPool(t)
	for _, q := range []string{
		"CREATE SCHEMA " + s.schema,
		"CREATE TABLE " + s.table() + " (event_id text PRIMARY KEY, body jsonb)",
		"CREATE FUNCTION " + s.schema + ".slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.event_id ~ '" + slow + "' THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$",
		"CREATE TRIGGER slow BEFORE INSERT ON " + s.table() + " FOR EACH ROW EXECUTE FUNCTION " + s.schema + ".slow()",
	} {
		if _, err := pool.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	b := sinkYAMLHead(t, s, 1, "{ event_id: event_id, body: $value }")
	b.WriteString("      timeout: 1s\n")
	fmt.Fprintf(b, "    commit: { interval: 50ms, max_records: %d }\n", maxRecords)
	return s, pool, writeSinkTopology(t, s, "topology.yaml", b.String())
}

// One record whose row always takes longer than the timeout (a trigger
// that sleeps on it) is a fault that recurs for ever, not a transient
// one: after three attempts that time out writing the rows, while
// Postgres answers a probe, the sink bisects the batch under a statement
// timeout, dead-letters that record with Postgres's error, and writes the
// rest. Before, it retried the whole batch for ever and wrote nothing.
func TestSinkSlowRecordIsFoundAndDeadLettered(t *testing.T) {
	t.Parallel()
	const n = 40
	s, pool, topo := slowRecordSink(t, "slowrec", "^slowrec-17$", 100)
	kcatProduce(t, s.in, events("slowrec", 0, n))
	p := startSink(t, topo, "a1")
	eventually(t, 3*time.Minute, func() bool {
		rows, _ := rowStats(t, pool, s.table())
		return rows == n-1 && kcatCount(t, s.dlq) == 1 && positionsAtEnd(t, pool, s)
	}, func() string {
		rows, _ := rowStats(t, pool, s.table())
		return fmt.Sprintf("%d rows, %d dead letters; logs:\n%s", rows, kcatCount(t, s.dlq), tail(p.logs.String(), 15))
	})
	p.stop()
	dead := kcatReadJSON(t, s.dlq)
	if len(dead) != 1 || dead[0].Key != "slowrec-17" {
		t.Fatalf("dead letters %+v, want the one record slowrec-17", dead)
	}
	if h := dead[0].Headers; h[kit.HeaderReason] != "postgres" || !strings.Contains(h[kit.HeaderError], "statement timeout (SQLSTATE 57014)") {
		t.Errorf("dead letter headers %v, want reason postgres and the statement timeout", h)
	}
	if rows := tableRows(t, pool, s.table(), "event_id"); rows["slowrec-17"] != "" || len(rows) != n-1 {
		t.Errorf("table holds %d rows (slowrec-17 %q), want the %d others", len(rows), rows["slowrec-17"], n-1)
	}
	if !strings.Contains(p.logs.String(), "keep timing out while PostgreSQL answers other work") {
		t.Errorf("no WARN that the batch is being isolated:\n%s", tail(p.logs.String(), 20))
	}
}

// When every record's row times out, the timeouts follow no record: the
// sink stops (exit 1) naming the batch's offsets, writing nothing, instead
// of dead-lettering records for a fault of the database's.
func TestSinkTimeoutsThatFollowNoRecordStopTheSink(t *testing.T) {
	t.Parallel()
	s, pool, topo := slowRecordSink(t, "slowall", ".", 4)
	kcatProduce(t, s.in, events("slowall", 0, 4))
	p := startSink(t, topo, "a1")
	if err := p.wait(5 * time.Minute); err == nil {
		t.Fatalf("the sink exited 0; logs:\n%s", tail(p.logs.String(), 20))
	}
	logs := p.logs.String()
	for _, want := range []string{"offsets p0 [0, 4)", "the timeouts follow no record"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the sink's error does not say %q:\n%s", want, tail(logs, 20))
		}
	}
	if rows, _ := rowStats(t, pool, s.table()); rows != 0 || kcatCount(t, s.dlq) != 0 {
		t.Errorf("%d rows and %d dead letters, want none of either", rows, kcatCount(t, s.dlq))
	}
}
