package stage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
)

// The commit interval bounds how long a record waits; it is no fixed wait.
// With a long interval, a lone record on an idle input commits as soon as
// the stage has read all there is, and a backlog read in many small fetches
// still commits in few transactions, not one per fetch.
func TestStageCommitsWhenCaughtUp(t *testing.T) {
	// Long enough that a loaded CI machine never blurs "at once" with "at
	// the interval": a fixed wait would take the whole 30 s.
	const interval = 30 * time.Second
	const atOnce = 10 * time.Second
	tests := []struct {
		name      string
		guarantee string
		backlog   int // records produced before the stage starts
		// opts make fetches small, so that a backlog takes many polls.
		opts []stage.Option
		// wantMaxTxns bounds the transactions that carry the backlog.
		wantMaxTxns int64
	}{
		{name: "lone record, exactly-once", guarantee: stage.ExactlyOnce},
		{name: "lone record, at-least-once", guarantee: stage.AtLeastOnce},
		{
			name: "backlog in small fetches, exactly-once", guarantee: stage.ExactlyOnce, backlog: 3000,
			opts:        []stage.Option{stage.WithKafkaOptions(kgo.FetchMaxPartitionBytes(2048), kgo.FetchMaxBytes(4096))},
			wantMaxTxns: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seeds := newCluster(t)
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(inTopic))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var recs []*kgo.Record
			for i := range tt.backlog {
				recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, `{"event_id":"b-%d"}`, i)})
			}
			if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			reg, metrics := promtest.Registered(t, stage.NewMetrics)
			s, err := stage.New(stage.Config{
				Stage: "clean", InstanceID: "i1", Brokers: seeds, Guarantee: tt.guarantee,
				Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
				KeyField: "event_id", CommitInterval: interval, MaxRecords: 100_000,
				TransactionTimeout: 2 * interval,
			}, append(tt.opts, stage.WithMetrics(metrics))...)
			if err != nil {
				t.Fatal(err)
			}
			stop, done := runInBackground(t, s)
			defer stop()
			started := time.Now()
			waitStats(t, s, done, func(st stage.Stats) bool { return s.Ready() == nil && st.Produced == int64(tt.backlog) })
			if tt.backlog > 0 {
				if took := time.Since(started); took >= atOnce {
					t.Errorf("the backlog committed after %s, not well before the %s interval", took, interval)
				}
				if got := s.Stats().Committed; got > tt.wantMaxTxns {
					t.Errorf("the backlog took %d transactions, want at most %d", got, tt.wantMaxTxns)
				}
			}

			before := s.Stats().Committed
			sent := time.Now()
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Value: []byte(`{"event_id":"lone"}`)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			waitStats(t, s, done, func(st stage.Stats) bool { return st.Produced == int64(tt.backlog)+1 })
			if took := time.Since(sent); took >= atOnce {
				t.Errorf("the lone record committed %s after it was produced, want under %s (commit interval %s)", took, atOnce, interval)
			}
			if got := s.Stats().Committed - before; got != 1 {
				t.Errorf("the lone record took %d transactions, want 1", got)
			}
			if n, sum := txnRecords(t, reg); n != uint64(s.Stats().Committed) || sum != float64(tt.backlog+1) {
				t.Errorf("exactly_stage_transaction_records: %d transactions, %.0f records; want %d, %d", n, sum, s.Stats().Committed, tt.backlog+1)
			}
			if tt.guarantee == stage.ExactlyOnce {
				// Every transaction here ended because it had read all there
				// was, none at the 30 s interval.
				if got, want := counterValue(t, reg, "exactly_stage_transaction_triggers_total", "caught_up"), float64(s.Stats().Committed); got != want {
					t.Errorf("transactions ended caught up: %.0f, want %.0f (all of them)", got, want)
				}
				if got, _ := histogram(t, reg, "exactly_stage_transaction_commit_duration_seconds"); got != uint64(s.Stats().Committed) {
					t.Errorf("exactly_stage_transaction_commit_duration_seconds: %d samples, want %d", got, s.Stats().Committed)
				}
			}
			// A read_committed reader sees every record once.
			outs := drain(t, seeds, outTopic)
			keys := keyCounts(outs)
			if len(outs) != tt.backlog+1 || len(keys) != tt.backlog+1 || keys["lone"] != 1 {
				t.Errorf("output: %d records, %d keys, lone %d times; want %d records, each once", len(outs), len(keys), keys["lone"], tt.backlog+1)
			}
		})
	}
}

// waitStats polls s's stats until ok holds, Run returns, or 30 s pass.
func waitStats(t *testing.T, s *stage.Stage, done chan error, ok func(stage.Stats) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !ok(s.Stats()) {
		select {
		case err := <-done:
			done <- err // for the caller's deferred receive
			t.Fatalf("Run returned early: %v", err)
		case <-deadline:
			t.Fatalf("timed out: stats %+v", s.Stats())
		case <-tick.C:
		}
	}
}

// txnRecords reads the count and sum of exactly_stage_transaction_records.
func txnRecords(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	return histogram(t, reg, "exactly_stage_transaction_records")
}

// histogram reads the count and sum of the one series of histogram name.
func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	ms := promtest.Family(t, reg, name)
	if len(ms) == 0 {
		return 0, 0
	}
	h := ms[0].GetHistogram()
	return h.GetSampleCount(), h.GetSampleSum()
}

// counterValue reads the series of counter name whose last label has
// value label.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	for _, m := range promtest.Family(t, reg, name) {
		if ls := m.GetLabel(); len(ls) > 0 && ls[len(ls)-1].GetValue() == label {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// Under a steady load that the stage keeps up with, a transaction ends
// once its fetch has read all there was, even though the next fetch is
// already buffered by then: records do not wait for the feed to pause or
// for the commit interval. The transform takes 1 ms a record and a record
// comes every 2 ms, so the stage is busy about half the time and a new
// record has nearly always arrived by the time it finishes a fetch.
func TestStageCommitsUnderSteadyLoad(t *testing.T) {
	const (
		interval = 30 * time.Second
		every    = 2 * time.Millisecond
		feed     = 1500 // records, about 3 s
	)
	seeds := newCluster(t)
	p := funcPipeline(t, "slow", func(_ context.Context, r transform.Record) ([]transform.Record, error) {
		// A transform that calls a service: the time is spent waiting.
		time.Sleep(time.Millisecond)
		return []transform.Record{r}, nil
	})
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
		KeyField: "event_id", CommitInterval: interval, MaxRecords: 100_000,
		TransactionTimeout: 2 * interval,
	}, stage.WithTransform(p))
	if err != nil {
		t.Fatal(err)
	}
	stop, done := runInBackground(t, s)
	defer stop()
	waitStats(t, s, done, func(stage.Stats) bool { return s.Ready() == nil })

	cl := newClient(t, seeds, kgo.DefaultProduceTopic(inTopic), kgo.ProducerLinger(0))
	tick := time.NewTicker(every)
	defer tick.Stop()
	var sent int
	var half stage.Stats
	for sent < feed {
		<-tick.C
		cl.Produce(context.Background(), &kgo.Record{Value: fmt.Appendf(nil, `{"event_id":"s-%d"}`, sent)}, nil)
		sent++
		if sent == feed/2 {
			half = s.Stats()
		}
	}
	// Halfway through the feed, most of what was sent by then had
	// committed: with transactions that grew while a fetch was buffered,
	// nothing would have until the feed paused.
	t.Logf("halfway through the feed: %d of %d records sent had committed, in %d transactions", half.Produced, feed/2, half.Committed)
	if half.Produced < feed/4 {
		t.Errorf("halfway through a steady feed (%d records sent), %d had committed; want at least %d", feed/2, half.Produced, feed/4)
	}
	if err := cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitStats(t, s, done, func(st stage.Stats) bool { return st.Produced == feed })
	if outs := drain(t, seeds, outTopic); len(outs) != feed || len(keyCounts(outs)) != feed {
		t.Errorf("output: %d records, %d keys; want %d, each once", len(outs), len(keyCounts(outs)), feed)
	}
}
