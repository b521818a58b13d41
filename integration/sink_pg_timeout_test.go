//go:build integration

package integration

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/integration/internal/tcpproxy"
	"github.com/exactly-io/exactly/integration/opstest"
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
