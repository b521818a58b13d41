package stage_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/netcut"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

const (
	inTopic  = "in"
	outTopic = "out"
	dlqTopic = "dlq"
)

// guarantees are the stage's delivery guarantees, for the tests that run
// under each.
var guarantees = []string{stage.ExactlyOnce, stage.AtLeastOnce}

// newCluster starts a one-broker kfake cluster holding the stage's topics
// and returns its address.
func newCluster(t *testing.T) []string {
	t.Helper()
	return newKfake(t).ListenAddrs()
}

// newKfake is newCluster's cluster, for a test that controls its answers
// (ControlKey).
func newKfake(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, inTopic, outTopic), kfake.SeedTopics(1, dlqTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// adminFor returns a kadm client on seeds, closed with the test.
func adminFor(t *testing.T, seeds []string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t, seeds))
}

// failTransiently returns a check that fails with serde.ErrTransient (a
// backing service that is down) for the first n records that match, any
// record with match nil, and passes all others.
func failTransiently(n int64, match func(transform.Record) bool) func(transform.Record) error {
	var failed atomic.Int64
	return func(r transform.Record) error {
		if (match == nil || match(r)) && failed.Add(1) <= n {
			return fmt.Errorf("lookup down: %w", serde.ErrTransient)
		}
		return nil
	}
}

// header returns the value of r's header key, "" without one.
func header(r *kgo.Record, key string) string {
	v, _ := audit.Header(r, key)
	return v
}

// drain reads topic read_committed to its end (audit.Drain, 30 s at most);
// an error ends the test.
func drain(t *testing.T, seeds []string, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := audit.Drain(ctx, seeds, topic)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// keyCounts counts the records of each key.
func keyCounts(recs []*kgo.Record) map[string]int {
	n := map[string]int{}
	for _, r := range recs {
		n[string(r.Key)]++
	}
	return n
}

// funcPipeline compiles a one-stage file whose stage "clean" (in -> out,
// dead letters to dlq) runs fn, registered as name.
func funcPipeline(t *testing.T, name string, fn transform.Func) *transform.Pipeline {
	t.Helper()
	reg := transform.NewRegistry()
	if err := reg.Register(name, fn); err != nil {
		t.Fatal(err)
	}
	return cleanPipeline(t, reg, "      - func: "+name+"\n")
}

// cleanPipeline compiles the stage "clean" (in -> out, dead letters to
// dlq) of a one-stage file, with steps (its transform list, as YAML
// lines) and the functions of reg.
func cleanPipeline(t *testing.T, reg *transform.Registry, steps string) *transform.Pipeline {
	t.Helper()
	f, err := topology.Parse("t.yaml", []byte(topologytest.Stage("127.0.0.1:1", "clean", 3, "    transform:\n"+steps)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := transform.Compile(f, reg)
	if err != nil {
		t.Fatal(err)
	}
	return ps["clean"]
}

// runUntilStats runs s until done(stats) or 30 s, then stops it.
func runUntilStats(t *testing.T, s *stage.Stage, done func(stage.Stats) bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-deadline:
			t.Fatalf("timed out: stats %+v", s.Stats())
		case <-tick.C:
			if done(s.Stats()) {
				cancel()
				return <-errc
			}
		}
	}
}

// crashStage runs the stage that newStage builds on seeds with failpoint
// fp armed at its nth hit, its connections cut at the crash (so that
// nothing more reaches the cluster), and returns its stats once Run
// returned ErrCrashed.
func crashStage(t *testing.T, newStage func(*testing.T, []string, ...stage.Option) *stage.Stage, seeds []string, fp string, n int) stage.Stats {
	t.Helper()
	var d netcut.Dialer
	crashing := newStage(t, seeds,
		stage.WithKafkaOptions(kgo.Dialer(d.Dial)),
		stage.WithFailpoints(failpoint.Failpoint{Name: fp, N: n}),
		stage.WithCrashAction(d.Cut),
	)
	if err := crashing.Run(context.Background()); !errors.Is(err, failpoint.ErrCrashed) {
		t.Fatalf("Run = %v, want ErrCrashed", err)
	}
	return crashing.Stats()
}

// checkOutputsOnce drains the output topic and checks that it holds the
// events e-0 to e-<n-1>, each once, and nothing else.
func checkOutputsOnce(t *testing.T, seeds []string, n int) {
	t.Helper()
	outs := drain(t, seeds, outTopic)
	seen := keyCounts(outs)
	for i := range n {
		if k := "e-" + strconv.Itoa(i); seen[k] != 1 {
			t.Errorf("event %s is in the output %d times, want 1", k, seen[k])
		}
	}
	if len(outs) != n {
		t.Errorf("output has %d records, want %d", len(outs), n)
	}
}

// runInBackground runs s until the returned stop is called; stop cancels
// the run, waits for Run's error on done and fails the test when there is
// one. A reader of done must put what it read back.
func runInBackground(t *testing.T, s *stage.Stage) (stop func(), done chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}, done
}

// newClient returns a Kafka client on seeds with opts, closed with the test.
func newClient(t *testing.T, seeds []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// stageOf builds stage "clean" on seeds: in -> out, dead letters to dlq,
// keyed by event_id, with guarantee ("" for the default), the commit
// interval and the max records of a transaction.
func stageOf(t *testing.T, seeds []string, guarantee string, interval time.Duration, maxRecords int, opts ...stage.Option) *stage.Stage {
	t.Helper()
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds, Guarantee: guarantee,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
		KeyField: "event_id", CommitInterval: interval, MaxRecords: maxRecords,
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
