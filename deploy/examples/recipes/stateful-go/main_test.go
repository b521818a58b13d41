package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/cmd/exactly/cli"
	"github.com/exactly-io/exactly/processor/transform"
)

func TestMain(m *testing.M) {
	register()
	os.Exit(m.Run())
}

// TestFixture runs stateful-go.test.yaml as `exactly test` does, on an
// embedded cluster, with order-seq registered.
func TestFixture(t *testing.T) {
	t.Setenv("EXACTLY_BROKERS", "not a broker list") // ignored: the run is embedded
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), []string{"test", "--topology", "stateful-go.yaml"}, &stdout, &stderr)
	if code != 0 || !strings.HasPrefix(stdout.String(), "ok ") {
		t.Fatalf("exactly test: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}

// TestOrderSeq calls the function on its own, with a store in memory.
func TestOrderSeq(t *testing.T) {
	for _, tc := range []struct {
		name      string
		key       string
		stored    string // "" for none
		wantSeq   int64
		wantFirst bool
		wantErr   string
	}{
		{name: "first order", key: "c-1", wantSeq: 1, wantFirst: true},
		{name: "third order", key: "c-1", stored: "2", wantSeq: 3},
		{name: "no key", wantErr: "order has no key"},
		{name: "bad stored count", key: "c-1", stored: "x", wantErr: `stored count of "c-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := transform.MemStore{}
			if tc.stored != "" {
				st[tc.key] = []byte(tc.stored)
			}
			r := transform.Record{Key: []byte(tc.key), Value: map[string]any{"id": "o-1"}}
			out, err := OrderSeq(context.Background(), r, st)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(out) != 1 {
				t.Fatalf("out = %+v, err = %v", out, err)
			}
			v := out[0].Value.(map[string]any)
			if v["seq"] != tc.wantSeq || v["first"] != tc.wantFirst {
				t.Fatalf("seq %v first %v, want %d %v", v["seq"], v["first"], tc.wantSeq, tc.wantFirst)
			}
		})
	}
}
