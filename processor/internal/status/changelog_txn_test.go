package status_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/status"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// TestStatusNamesChangelogTransaction: a transaction that another
// producer left open on a stateful stage's changelog holds the stage's
// restores, so status lists it with the transactions open on the stage's
// other topics, by transactional ID, partition and first offset.
func TestStatusNamesChangelogTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := topologytest.Cluster(t, 2)
	f := topologytest.Load(t, topologytest.Stage(addr, "clean", 2, `    key: event_id
    transform:
      - dedupe: { id: value.event_id, retention: 1h }
`))
	const changelog = "exactly-clean-dedupe-changelog"
	adm := topologytest.Admin(t, addr)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, changelog); err != nil {
		t.Fatal(err)
	}
	foreign, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("foreign"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer foreign.Close()
	if err := foreign.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := foreign.ProduceSync(ctx, &kgo.Record{Topic: changelog, Partition: 1, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := status.TxnTopics(f, ""); !slices.Contains(got, changelog) {
		t.Fatalf("TxnTopics = %v, want the changelog %s", got, changelog)
	}
	// Open for longer than a millisecond: the report lists it once the
	// broker's clock has moved that far.
	var last *status.Report
	for ctx.Err() == nil {
		rep, err := status.Collect(ctx, topologytest.Admin(t, addr), f, status.HangingAfter(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		last = rep
		for _, tx := range rep.HangingTransactions {
			if tx.Topic == changelog && tx.Partition == 1 && tx.TransactionalID == "foreign" && tx.StartOffset == 0 {
				return
			}
		}
	}
	t.Fatalf("hanging transactions %+v (errors %v), want foreign's on %s/1 at offset 0", last.HangingTransactions, last.Errors, changelog)
}
