//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/exactly-io/exactly/integration/internal/tcpproxy"
	"github.com/exactly-io/exactly/integration/opstest"
	"github.com/exactly-io/exactly/processor/deadletter"
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
// expression slow, with postgres.timeout timeout and batches of
// maxRecords; it returns the spec, a direct pool and the topology file.
func slowRecordSink(t *testing.T, prefix, slow, timeout string, maxRecords int) (sinkSpec, *pgxpool.Pool, string) {
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
	fmt.Fprintf(b, "      timeout: %s\n", timeout)
	fmt.Fprintf(b, "    commit: { interval: 50ms, max_records: %d }\n", maxRecords)
	return s, pool, writeSinkTopology(t, s, "topology.yaml", b.String())
}

// One record whose row always takes longer than the timeout (a trigger
// that sleeps on it) is a fault that recurs for ever, not a transient
// one: after three attempts that time out writing the rows, while
// Postgres answers a probe, the sink bisects the batch under a statement
// timeout, dead-letters that record with Postgres's error, and writes the
// rest, rather than retry the whole batch for ever and write nothing.
func TestSinkSlowRecordIsFoundAndDeadLettered(t *testing.T) {
	t.Parallel()
	const n = 40
	s, pool, topo := slowRecordSink(t, "slowrec", "^slowrec-17$", "1s", 100)
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
	if h := dead[0].Headers; h[deadletter.HeaderReason] != "postgres" || !strings.Contains(h[deadletter.HeaderError], "statement timeout (SQLSTATE 57014)") {
		t.Errorf("dead letter headers %v, want reason postgres and the statement timeout", h)
	}
	if id, _ := topicInfo(t, s.in); dead[0].Headers[deadletter.HeaderSourceTopicID] != id {
		t.Errorf("dead letter's %s is %q, want the input topic's ID %q", deadletter.HeaderSourceTopicID, dead[0].Headers[deadletter.HeaderSourceTopicID], id)
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
	s, pool, topo := slowRecordSink(t, "slowall", ".", "1s", 4)
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

// An idle_in_transaction_session_timeout that the DSN gives in
// options=-c is the session's, as one given as a parameter is: the sink
// sets its own (twice the session timeout, at least 30 s) only where
// nothing set one. A sink process stopped (SIGSTOP) inside a batch's
// transaction has its backend ended after the DSN's 3 s, not the sink's
// own 30 s.
func TestSinkKeepsTheDSNsIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	s, pool, topo := slowRecordSink(t, "idletx", "^idletx-1$", "30s", 100)
	sep := "?"
	if strings.Contains(pgDSN(t), "?") {
		sep = "&"
	}
	dsn := pgDSN(t) + sep + "options=-c%20idle_in_transaction_session_timeout%3D3000"
	kcatProduce(t, s.in, events("idletx", 0, 3))
	p := start(t, []string{"PG_DSN=" + dsn}, "sink", "--topology", topo, "--instance-id", "a1", "--metrics-addr=")
	// The sink's backend sleeps in the trigger of idletx-1, inside the
	// batch's transaction: stop the process there.
	var sleeping int
	eventually(t, time.Minute, func() bool {
		err := pool.QueryRow(t.Context(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE wait_event = 'PgSleep' AND query ILIKE '%' || $1 || '%' AND pid <> pg_backend_pid()`, s.schema).Scan(&sleeping)
		if err != nil {
			t.Fatal(err)
		}
		return sleeping != 0
	}, func() string { return "the sink's backend never slept in the trigger" })
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	// The trigger ends after 3 s; the backend is then idle in its
	// transaction, its client stopped, until the timeout ends it.
	var idleSince time.Time
	eventually(t, time.Minute, func() bool {
		var state string
		err := pool.QueryRow(t.Context(), `SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone')`, sleeping).Scan(&state)
		if err != nil {
			t.Fatal(err)
		}
		if state == "idle in transaction" && idleSince.IsZero() {
			idleSince = time.Now()
		}
		return state == "gone"
	}, func() string { return "the stopped sink's backend was never ended" })
	if idleSince.IsZero() {
		t.Fatal("the backend was never seen idle in its transaction")
	}
	if idle := time.Since(idleSince); idle > 15*time.Second {
		t.Errorf("the backend was ended %s after it went idle in its transaction, want about the DSN's 3 s (the sink's own is 30 s)", idle.Round(time.Second))
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	eventually(t, 2*time.Minute, func() bool {
		rows, _ := rowStats(t, pool, s.table())
		return rows == 3 && positionsAtEnd(t, pool, s)
	}, func() string { rows, _ := rowStats(t, pool, s.table()); return fmt.Sprintf("%d of 3 rows", rows) })
	p.stop()
}
