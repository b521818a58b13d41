package cli_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/cmd/exactly/internal/cli"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// validate checks a file offline: a sink's ${PG_DSN} that is unset, or set
// to something that is not a connection string, is run's problem, not
// validate's. The sink command still refuses both at start.
func TestValidateNeedsNoSecrets(t *testing.T) {
	topo := topologytest.Write(t, topologytest.Stage("127.0.0.1:1", "clean", 1, topologytest.PGSink("shop.events")))
	for _, tc := range []struct {
		name  string
		dsn   string
		unset bool
	}{
		{name: "unset", unset: true},
		{name: "not a connection string", dsn: "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.unset {
				t.Setenv("PG_DSN", "")
				unsetenv(t, "PG_DSN")
			} else {
				t.Setenv("PG_DSN", tc.dsn)
			}
			t.Setenv("EXACTLY_BROKERS", "")
			var stdout, stderr bytes.Buffer
			if code := cli.Run(context.Background(), []string{"validate", topo}, &stdout, &stderr); code != 0 {
				t.Fatalf("validate = %d, want 0; stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), "1 sink") {
				t.Errorf("validate's summary does not name the sink:\n%s", stdout.String())
			}

			stdout.Reset()
			stderr.Reset()
			code := cli.Run(context.Background(), []string{"sink", "--topology", topo, "--instance-id", "a", "--metrics-addr", ""}, &stdout, &stderr)
			if code != 2 {
				t.Fatalf("sink = %d, want 2 (a usage error at start); stderr:\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), "dsn") {
				t.Errorf("sink's error does not name the dsn:\n%s", stderr.String())
			}
		})
	}
}

// unsetenv removes name from the environment for the rest of t (after a
// t.Setenv that restores its old value at the end).
func unsetenv(t *testing.T, name string) {
	t.Helper()
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
