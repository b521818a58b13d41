//go:build integration

package stage

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The coordinator, asked after a stale epoch, tells the two causes apart
// on a real broker: a transaction the coordinator aborted at its
// transaction timeout is a timeout; the same ID initialized by another
// producer since is a fence, also once that producer aborted a
// transaction of its own, which leaves the abort state a timeout leaves.
func TestBrokerTimedOutAsksTheCoordinator(t *testing.T) {
	brokers := os.Getenv("EXACTLY_BROKERS")
	if brokers == "" {
		t.Fatal("EXACTLY_BROKERS is not set: source /tmp/exactly-local/env (deploy/local/up.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seeds := strings.Split(brokers, ",")
	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	topic := fmt.Sprintf("fencecause_%d", time.Now().UnixNano())
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	defer adm.DeleteTopics(context.Background(), topic)

	s := &Stage{cfg: Config{Stage: topic, InstanceID: "i1"}}
	id := s.cfg.TransactionalID()
	producer := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(id),
			kgo.TransactionTimeout(time.Second), kgo.DefaultProduceTopic(topic))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	state := func() string {
		txns, err := adm.DescribeTransactions(ctx, id)
		if err != nil {
			return err.Error()
		}
		return txns[id].State
	}

	// A transaction left open past its timeout of 1 s: the coordinator
	// aborts it (PrepareAbort, then CompleteAbort).
	p1 := producer()
	defer p1.Close()
	if err := p1.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p1.ProduceSync(ctx, kgo.StringRecord("open")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// As after a commit: the stage knows the epoch it runs under.
	s.noteProducer(ctx, p1)
	if s.producer.Load() == nil {
		t.Fatal("noteProducer kept no producer ID")
	}
	for st := state(); st != "PrepareAbort" && st != "CompleteAbort"; st = state() {
		if ctx.Err() != nil {
			t.Fatalf("the coordinator never aborted the open transaction: state %s", st)
		}
		time.Sleep(200 * time.Millisecond) // polling the coordinator; nothing to await
	}
	if timedOut, detail := s.timedOut(ctx, adm); !timedOut || !strings.Contains(detail, "Abort") {
		t.Errorf("after the coordinator's own abort: timedOut %v (%s), want true", timedOut, detail)
	}

	// Another producer initializes the ID: that is a fence.
	p2 := producer()
	defer p2.Close()
	if err := p2.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p2.ProduceSync(ctx, kgo.StringRecord("other")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if timedOut, detail := s.timedOut(ctx, adm); timedOut {
		t.Errorf("after another producer's InitProducerId: timedOut true (%s), want false", detail)
	}
	if err := p2.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if timedOut, detail := s.timedOut(ctx, adm); timedOut {
		t.Errorf("after the other producer aborted its own transaction: timedOut true (%s), want false", detail)
	}
}
