package reader_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// fakeAdmin returns an admin client of a kfake cluster with topics "in" and
// "dlq" and the given broker configs.
func fakeAdmin(t *testing.T, configs map[string]string) *kadm.Client {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(1, "in", "dlq"), kfake.BrokerConfigs(configs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return topologytest.Admin(t, c.ListenAddrs()[0])
}

func TestCheckTopicsExist(t *testing.T) {
	adm := fakeAdmin(t, nil)
	f, err := topology.Parse("t.yaml", []byte(topologytest.Stage("k:9092", "s", 1, "")), nil)
	if err != nil {
		t.Fatal(err)
	}
	o := reader.OriginOf(f, "stages[0]")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name string
		need []reader.NeededTopic
		want string // "" for none missing
	}{
		{"all there", []reader.NeededTopic{{"input", "in", o.Field("input.topic")}, {"dead-letter", "dlq", o.Field("dead_letter.topic")}}, ""},
		{"output missing", []reader.NeededTopic{{"input", "in", o.Field("input.topic")}, {"output", "out", o.Field("output.topic")}},
			`t.yaml:10:22: stages[0].output.topic: output topic "out" does not exist on the broker (create it: exactly topics create --topology t.yaml)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := reader.CheckTopicsExist(ctx, adm, o, tc.need...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckTopicsExist = %v, want nil", err)
			case tc.want == "":
			case err == nil || err.Error() != tc.want:
				t.Fatalf("CheckTopicsExist = %v, want %s", err, tc.want)
			case !kafkaconn.IsFatal(err):
				t.Fatalf("a missing topic must be a fatal configuration error: %v", err)
			}
		})
	}
}

func TestReadBrokerLimits(t *testing.T) {
	adm := fakeAdmin(t, map[string]string{
		"transaction.max.timeout.ms":   "60000",
		"group.min.session.timeout.ms": "6000",
		"group.max.session.timeout.ms": "1800000",
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lim, err := reader.ReadBrokerLimits(ctx, adm)
	if err != nil {
		t.Fatal(err)
	}
	want := reader.BrokerLimits{TransactionMax: time.Minute, SessionMin: 6 * time.Second, SessionMax: 30 * time.Minute}
	if lim != want {
		t.Fatalf("ReadBrokerLimits = %+v, want %+v", lim, want)
	}
}

func TestBrokerLimitsCheck(t *testing.T) {
	lim := reader.BrokerLimits{TransactionMax: 15 * time.Minute, SessionMin: 6 * time.Second, SessionMax: 30 * time.Minute}
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for none
	}{
		{"txn at the max", lim.CheckTransactionTimeout(15*time.Minute, "f"), ""},
		{"txn above the max", lim.CheckTransactionTimeout(20*time.Minute, "kafka.transaction_timeout"),
			"kafka.transaction_timeout: 20m0s is above the broker's transaction.max.timeout.ms 15m0s"},
		{"session at the bounds", lim.CheckSessionTimeout(6*time.Second, "f"), ""},
		{"session at the upper bound", lim.CheckSessionTimeout(30*time.Minute, "f"), ""},
		{"session below the min", lim.CheckSessionTimeout(5*time.Second, "s"), "s: 5s is below the broker's group.min.session.timeout.ms 6s"},
		{"session above the max", lim.CheckSessionTimeout(2*time.Hour, "s"), "s: 2h0m0s is above the broker's group.max.session.timeout.ms 30m0s"},
		{"limits unknown", reader.BrokerLimits{}.CheckSessionTimeout(2*time.Hour, "s"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Fatalf("got %v, want nil", tc.err)
			case tc.want == "":
			case tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want):
				t.Fatalf("got %v, want %s...", tc.err, tc.want)
			case !kafkaconn.IsFatal(tc.err):
				t.Fatalf("must be fatal: %v", tc.err)
			}
		})
	}
}
