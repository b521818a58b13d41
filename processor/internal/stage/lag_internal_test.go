package stage

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
)

// lagSeries returns the lag and lag age of each partition reg holds.
func lagSeries(t *testing.T, reg *prometheus.Registry) (lag, age map[string]float64) {
	t.Helper()
	lag, age = map[string]float64{}, map[string]float64{}
	for name, into := range map[string]map[string]float64{"exactly_stage_consumer_lag_records": lag, "exactly_stage_consumer_lag_age_seconds": age} {
		for _, m := range promtest.Family(t, reg, name) {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" {
					into[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return lag, age
}

// The lag of a stage that polls nothing follows the input, read apart
// from the consumer; a closing session keeps its partitions' series until
// an assignment leaves them out; end offsets that cannot be read keep the
// last lag, and only its age grows.
func TestLagTrackerWhileTheConsumerIsStuck(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("in"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequestRetries(0), kgo.RetryTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(n int) {
		t.Helper()
		for range n {
			if err := cl.ProduceSync(context.Background(), &kgo.Record{Partition: 0, Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	adm := kadm.NewClient(cl)
	ctx := context.Background()

	reg, m := promtest.Registered(t, NewMetrics)
	sm := stageMetrics{m: m}
	sm.bind("s")
	l := newLagTracker(sm, "in")

	produce(10)
	l.assigned([]int32{0, 1})
	l.refresh(ctx, adm, "exactly-s")
	if lag, _ := lagSeries(t, reg); lag["0"] != 10 || lag["1"] != 0 || len(lag) != 2 {
		t.Fatalf("after the assignment: lag %v, want 10 on 0 and 0 on 1", lag)
	}
	// Polled up to 4, then stuck while 5 more arrive.
	l.polled(0, 4, 10, 0)
	produce(5)
	l.refresh(ctx, adm, "exactly-s")
	if lag, _ := lagSeries(t, reg); lag["0"] != 11 {
		t.Fatalf("stuck at offset 4 of 15: lag %v, want 11", lag["0"])
	}

	// The session closes: its revocations keep the series.
	l.closeSession()
	l.gone([]int32{0, 1}, false)
	if lag, _ := lagSeries(t, reg); len(lag) != 2 {
		t.Fatalf("after the session closed: %d lag series, want 2", len(lag))
	}
	// The next session is assigned partition 0 alone, and resumes from
	// the group's offsets: none committed, so from the log start.
	l.assigned([]int32{0})
	lag, age := lagSeries(t, reg)
	if len(lag) != 1 || len(age) != 1 || lag["0"] != 15 {
		t.Fatalf("after the next assignment: lag %v, age %v; want partition 0 alone, at 15", lag, age)
	}
	// A revocation by a rebalance drops the series.
	l.gone([]int32{0}, false)
	if lag, age := lagSeries(t, reg); len(lag) != 0 || len(age) != 0 {
		t.Fatalf("after a revocation: lag %v, age %v; want none", lag, age)
	}

	// A lost membership holds the series; with the broker gone, the lag
	// stays and the time its ends were read does not move.
	l.assigned([]int32{0})
	l.refresh(ctx, adm, "exactly-s")
	l.gone([]int32{0}, true)
	read := l.parts[0].endsAt
	c.Close()
	l.refresh(ctx, adm, "exactly-s")
	lag, age = lagSeries(t, reg)
	if lag["0"] != 15 || len(age) != 1 {
		t.Fatalf("broker gone: lag %v, age %v; want 15 (from the log start, nothing committed) and an age", lag, age)
	}
	if got := l.parts[0].endsAt; !got.Equal(read) {
		t.Errorf("broker gone: ends read at %v, want %v still", got, read)
	}

	l.stop()
	if lag, age := lagSeries(t, reg); len(lag) != 0 || len(age) != 0 {
		t.Fatalf("after stop: lag %v, age %v; want none", lag, age)
	}
}
