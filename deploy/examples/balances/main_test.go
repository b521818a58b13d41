package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/cmd/exactly/cli"
	"github.com/exactly-io/exactly/processor/transform"
)

func TestMain(m *testing.M) {
	register()
	os.Exit(m.Run())
}

// TestFixture runs balances.test.yaml with `exactly test` on an embedded
// cluster: the running balances, the changes and the dead letters are the
// fixture's, with the state kept and changelogged as a real run does.
func TestFixture(t *testing.T) {
	t.Setenv("EXACTLY_BROKERS", "not a broker list") // ignored: the run is embedded
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), []string{"test", "--topology", "balances.yaml"}, &stdout, &stderr)
	if code != 0 || !strings.HasPrefix(stdout.String(), "ok ") {
		t.Fatalf("exactly test: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}

// TestValidate: the topology validates with the transforms registered.
func TestValidate(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := cli.Run(context.Background(), []string{"validate", "balances.yaml"}, &stdout, &stderr); code != 0 {
		t.Fatalf("validate: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "ok: 6 topics, 2 stages") {
		t.Fatalf("validate: %s", stdout.String())
	}
}

func TestRunningBalance(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stored  string // "" for none
		amount  any
		want    string // the balance stored after; the record's balance_cents
		wantErr string
	}{
		{name: "first payment", amount: int64(500), want: "500"},
		{name: "a debit", stored: "500", amount: int64(-700), want: "-200"},
		{name: "not an integer", stored: "500", amount: 1.5, want: "500", wantErr: "amount_cents is float64, want an integer"},
		{name: "overflow", stored: strconv.FormatInt(math.MaxInt64-1, 10), amount: int64(2), want: strconv.FormatInt(math.MaxInt64-1, 10),
			wantErr: "overflows a 64-bit integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := transform.MemStore{} // a store in memory, for tests of a function on its own
			if tc.stored != "" {
				st["acct-1"] = []byte(tc.stored)
			}
			r := transform.Record{Key: []byte("acct-1"), Value: map[string]any{"amount_cents": tc.amount}}
			out, err := RunningBalance(context.Background(), r, st)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil || len(out) != 1 || strconv.FormatInt(out[0].Value.(map[string]any)["balance_cents"].(int64), 10) != tc.want {
				t.Fatalf("out = %+v, %v; want balance_cents %s", out, err, tc.want)
			}
			if got := string(st["acct-1"]); got != tc.want {
				t.Fatalf("stored %q, want %q", got, tc.want)
			}
		})
	}
}
