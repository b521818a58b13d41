package cli_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/cmd/exactly/internal/cli"
	"github.com/exactly-io/exactly/integration/opstest"
	"github.com/exactly-io/exactly/integration/syncbuf"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// secret is a password that must never appear in any output.
const secret = "Sup3r-Secr3t-pw"

// TestSecretsNeverShown runs the sink, status and validate with a Postgres
// DSN (a ${PG_DSN} reference) whose password is secret, against a
// Postgres that refuses connections, and checks that no log line, error,
// /readyz or /metrics body, or status report holds the password or the
// DSN.
func TestSecretsNeverShown(t *testing.T) {
	broker := topologytest.Cluster(t, 3)
	dsn := "postgres://exactly:" + secret + "@127.0.0.1:1/shop?sslmode=disable&application_name=" + secret
	t.Setenv("PG_DSN", dsn)
	t.Setenv("EXACTLY_BROKERS", "")
	topo := topologytest.Write(t, topologytest.Stage(broker, "clean", 3, topologytest.PGSink("shop.events")))
	check := func(what, out string) {
		t.Helper()
		for _, s := range []string{secret, dsn, "127.0.0.1:1/shop"} {
			if strings.Contains(out, s) {
				t.Errorf("%s shows %q:\n%s", what, s, out)
			}
		}
	}

	// The sink retries the refused connection; its logs (debug, both
	// formats), /readyz and /metrics must not show the DSN.
	for _, format := range []string{"text", "json"} {
		addr := opstest.FreeAddr(t)
		var logs syncbuf.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int)
		go func() {
			done <- cli.Run(ctx, []string{"sink", "--topology", topo, "--instance-id", "a", "--metrics-addr", addr,
				"--log-level", "debug", "--log-format", format}, io.Discard, &logs)
		}()
		var ready string
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && !strings.Contains(logs.String(), "retrying") {
			time.Sleep(50 * time.Millisecond) // waiting on the sink's own retry log
		}
		code, ready := opstest.Get("http://" + addr + "/readyz")
		if code != http.StatusServiceUnavailable || !strings.Contains(ready, "retrying") {
			t.Errorf("/readyz = %d %q, want 503 naming the failure", code, ready)
		}
		_, metrics := opstest.Get("http://" + addr + "/metrics")
		cancel()
		<-done
		check("sink logs ("+format+")", logs.String())
		check("/readyz", ready)
		check("/metrics", metrics)
		if !strings.Contains(logs.String(), "retrying") {
			t.Errorf("no retry logged:\n%s", logs.String())
		}
	}

	// status reports the Postgres failure for the sink, without the DSN.
	for _, args := range [][]string{{"status", "--topology", topo}, {"status", "--topology", topo, "--json"}} {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), args, &stdout, &stderr)
		if code != 1 || !strings.Contains(stdout.String(), "connect to postgres") {
			t.Errorf("%v: exit %d, want 1 and the sink's error:\n%s%s", args, code, stdout.String(), stderr.String())
		}
		check(strings.Join(args, " "), stdout.String()+stderr.String())
	}

	// validate's summary, and an unparsable DSN's error.
	var out bytes.Buffer
	cli.Run(context.Background(), []string{"validate", topo}, &out, &out)
	check("validate", out.String())
	t.Setenv("PG_DSN", "postgres://exactly:"+secret+"@127.0.0.1:notaport/shop")
	out.Reset()
	if code := cli.Run(context.Background(), []string{"sink", "--topology", topo, "--metrics-addr", ""}, &out, &out); code == 0 {
		t.Errorf("sink with a bad DSN exited 0")
	}
	check("bad DSN error", out.String())
}
