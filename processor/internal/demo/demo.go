// Package demo runs the real stage engine on an embedded Kafka cluster
// (kfake), crashes it mid-transaction, restarts it, and checks that every
// event came out exactly once; then it does the same with a dedupe stage
// fed resent duplicates, and checks that each distinct event came out
// once. It backs `exactly demo`.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/deploy/examples"
	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/netcut"
	"github.com/exactly-io/exactly/processor/internal/plural"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/provision"
)

// Options tune the demo; the zero value is the default run.
type Options struct {
	Events     int // valid events to produce; default 5000
	CrashAtTxn int // the transaction to crash in, before its commit; default 3
	// DedupeEvents are the distinct events of the dedupe phase; every
	// fifth is also resent. Default 1000.
	DedupeEvents int
	Logger       *slog.Logger
}

// Summary is what the demo read back, read_committed, after the run.
type Summary struct {
	In           int // records produced to the input topic
	Malformed    int // of which malformed on purpose
	Out          int // records in the output topic
	DeadLettered int // records in the dead-letter topic
	Duplicates   int // output records whose event ID was already seen
	Missing      int // valid events in no output record
	MissingDLQ   int // malformed records in no dead letter

	// The dedupe phase.
	Distinct         int // distinct events produced
	Resent           int // of which resent, with the same event ID
	DedupeOut        int // records in the dedupe stage's output
	Deduplicated     int // records the dedupe stage dropped as duplicates
	DedupeDuplicates int // output records whose event ID was already seen
	DedupeMissing    int // distinct events in no output record
}

// ExactlyOnce reports whether the run kept every record exactly once.
func (s Summary) ExactlyOnce() bool {
	return s.Duplicates == 0 && s.Missing == 0 && s.MissingDLQ == 0 &&
		s.Out == s.In-s.Malformed && s.DeadLettered == s.Malformed &&
		s.DedupeDuplicates == 0 && s.DedupeMissing == 0 && s.DedupeOut == s.Distinct && s.Deduplicated == s.Resent
}

// ErrNotExactlyOnce is returned by Run when the summary shows a loss or a
// duplicate.
var ErrNotExactlyOnce = errors.New("result is not exactly once")

// Run runs the demo, writing its progress and summary to w.
func Run(ctx context.Context, w io.Writer, o Options) (Summary, error) {
	if err := o.setDefaults(); err != nil {
		return Summary{}, err
	}
	var sum Summary
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return sum, fmt.Errorf("start embedded cluster: %w", err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	if err := crashPhase(ctx, w, seeds, o, &sum); err != nil {
		return sum, err
	}
	stateDir, err := os.MkdirTemp("", "exactly-demo-state-")
	if err != nil {
		// The container image is FROM scratch: no /tmp unless one is
		// mounted. The dedupe stage needs a state dir.
		fmt.Fprintf(w, "\nskipping the dedupe demo: it needs a writable temporary directory for its state (%v; set TMPDIR)\n", err)
	} else {
		defer os.RemoveAll(stateDir)
		if err := dedupePhase(ctx, w, seeds, stateDir, o, &sum); err != nil {
			return sum, err
		}
	}
	if !sum.ExactlyOnce() {
		fmt.Fprintf(w, "NOT exactly once\n")
		return sum, ErrNotExactlyOnce
	}
	fmt.Fprintf(w, "exactly once: every event is in the output once, every malformed record in the dead letters once, every resent event dropped once\n")
	return sum, nil
}

// setDefaults fills in the defaults of o, and checks its sizes.
func (o *Options) setDefaults() error {
	if o.Events == 0 {
		o.Events = 5000
	}
	if o.Events < 100 {
		return fmt.Errorf("events must be at least 100, so that the crash lands mid-stream (got %d)", o.Events)
	}
	if o.CrashAtTxn == 0 {
		o.CrashAtTxn = 3
	}
	if o.DedupeEvents == 0 {
		o.DedupeEvents = 1000
	}
	if o.DedupeEvents < 100 {
		return fmt.Errorf("dedupe events must be at least 100 (got %d)", o.DedupeEvents)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// parseExample parses the example topology data (named path), with the
// embedded cluster's first seed as its brokers.
func parseExample(path string, data []byte, seeds []string) (*topology.File, error) {
	return topology.Parse(path, data, func(k string) (string, bool) {
		if k == topology.BrokersEnv {
			return seeds[0], true
		}
		return "", false
	})
}

// crashPhase runs the stage of deploy/examples/orders.yaml on events with
// malformed records mixed in, crashes it mid-transaction, restarts it,
// and reads back its output and dead letters.
func crashPhase(ctx context.Context, w io.Writer, seeds []string, o Options, sum *Summary) error {
	f, err := parseExample("deploy/examples/orders.yaml", examples.Orders, seeds)
	if err != nil {
		return err
	}
	st := &f.Stages[0]
	fmt.Fprintf(w, "embedded Kafka cluster on %s; topology deploy/examples/orders.yaml, stage %q: %s -> %s (dead letters: %s)\n",
		seeds[0], st.Name, st.Input.Topic, st.Output.Topic, st.DeadLetter.Topic)

	admCl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer admCl.Close()
	if _, err := provision.CreateTopics(ctx, kadm.NewClient(admCl), f); err != nil {
		return err
	}

	if sum.In, sum.Malformed, err = produce(ctx, admCl, st.Input.Topic, o.Events); err != nil {
		return err
	}
	fmt.Fprintf(w, "produced %s to %s: %s and %d malformed (bad JSON, invalid UTF-8, null value, no event_id)\n",
		plural.Count(sum.In, "record"), st.Input.Topic, plural.Count(sum.In-sum.Malformed, "event"), sum.Malformed)

	if err := crashAndRestart(ctx, w, f, st, o, sum.In); err != nil {
		return err
	}
	if err := check(ctx, seeds, st, sum); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nread back with isolation.level=read_committed:\n")
	fmt.Fprintf(w, "  in            %d\n  out           %d\n  dead-lettered %d\n  duplicates    %d\n  missing       %d\n",
		sum.In, sum.Out, sum.DeadLettered, sum.Duplicates, sum.Missing+sum.MissingDLQ)
	return nil
}

// crashAndRestart runs stage st of f until it crashes before the commit
// of transaction o.CrashAtTxn, then a new instance of it until every one
// of the in input records is committed.
func crashAndRestart(ctx context.Context, w io.Writer, f *topology.File, st *topology.Stage, o Options, in int) error {
	cfg := stage.StageConfig(f, st, "demo-1")
	// Several transactions, so that the crash lands mid-stream.
	cfg.MaxRecords = max(10, in/(3*o.CrashAtTxn))
	var d netcut.Dialer
	crashing, err := stage.New(cfg,
		stage.WithLogger(o.Logger),
		stage.WithKafkaOptions(kgo.Dialer(d.Dial)),
		stage.WithFailpoints(failpoint.Failpoint{Name: failpoint.CrashBeforeCommit, N: o.CrashAtTxn}),
		stage.WithCrashAction(d.Cut))
	if err != nil {
		return err
	}
	if err := crashing.Run(ctx); !errors.Is(err, failpoint.ErrCrashed) {
		return fmt.Errorf("first run: want a crash at transaction %d, got %v", o.CrashAtTxn, err)
	}
	cs := crashing.Stats()
	fmt.Fprintf(w, "instance demo-1 crashed at %s@%d: %s committed, the next one flushed to the broker and left open\n",
		failpoint.CrashBeforeCommit, o.CrashAtTxn, plural.Count(cs.Committed, "transaction"))

	restarted, err := stage.New(cfg, stage.WithLogger(o.Logger))
	if err != nil {
		return err
	}
	start := time.Now()
	if err := runUntil(ctx, restarted, int64(in)-cs.Produced-cs.DeadLettered); err != nil {
		return err
	}
	rs := restarted.Stats()
	fmt.Fprintf(w, "instance demo-1 restarted: fenced the open transaction, committed %d more %s in %s\n",
		rs.Committed, plural.Noun(rs.Committed, "transaction"), time.Since(start).Round(time.Millisecond))
	return nil
}

// dedupePhase runs the stage dedupe of deploy/examples/orders-per-minute.yaml
// on events of which every fifth is resent (same event ID and key): half
// the resent ones before a crash, half after it, so that only the store
// restored from the changelog knows them.
func dedupePhase(ctx context.Context, w io.Writer, seeds []string, stateDir string, o Options, sum *Summary) error {
	f, err := parseExample("deploy/examples/orders-per-minute.yaml", examples.OrdersPerMinute, seeds)
	if err != nil {
		return err
	}
	st, ok := f.Stage("dedupe")
	if !ok {
		return errors.New("orders-per-minute.yaml has no stage dedupe")
	}
	pipelines, err := transform.Compile(f, nil)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := provision.CreateTopics(ctx, kadm.NewClient(cl), f); err != nil {
		return err
	}
	fmt.Fprintf(w, "\ntopology deploy/examples/orders-per-minute.yaml, stage %q: %s -> %s, dedupe by value.event_id\n", st.Name, st.Input.Topic, st.Output.Topic)

	first, later := resentEvents(st.Input.Topic, o.DedupeEvents)
	sum.Distinct, sum.Resent = o.DedupeEvents, len(first)-o.DedupeEvents+len(later)
	if err := cl.ProduceSync(ctx, first...).FirstErr(); err != nil {
		return fmt.Errorf("produce input: %w", err)
	}
	fmt.Fprintf(w, "produced %d distinct events and %d of them again\n", o.DedupeEvents, len(first)-o.DedupeEvents)

	cfg := stage.StageConfig(f, st, "demo-1")
	cfg.StateDir = stateDir
	cfg.MaxRecords = max(10, len(first)/6)
	if err := dedupeCrashAndRestart(ctx, w, cl, cfg, pipelines[st.Name], later, o.Logger, sum); err != nil {
		return err
	}
	if err := countDedupeOutputs(ctx, seeds, st.Output.Topic, sum); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nread back with isolation.level=read_committed:\n")
	fmt.Fprintf(w, "  in            %d (%d distinct, %d resent)\n  out           %d\n  deduplicated  %d\n  duplicates    %d\n  missing       %d\n",
		sum.Distinct+sum.Resent, sum.Distinct, sum.Resent, sum.DedupeOut, sum.Deduplicated, sum.DedupeDuplicates, sum.DedupeMissing)
	return nil
}

// resentEvents are n distinct events to topic, with every tenth resent
// among them (first), and every other fifth resent after them (later).
func resentEvents(topic string, n int) (first, later []*kgo.Record) {
	event := func(i int) *kgo.Record {
		id := "o-" + strconv.Itoa(i)
		v := fmt.Sprintf(`{"event_id":%q,"customer":"c-%d","amount":%d,"ts":%d}`, id, i%13, i%50, 1_767_225_600_000+int64(i)*100)
		return &kgo.Record{Topic: topic, Key: []byte(id), Value: []byte(v)}
	}
	for i := range n {
		first = append(first, event(i))
	}
	for i := 0; i < n; i += 5 {
		if i%10 == 0 {
			first = append(first, event(i))
		} else {
			later = append(later, event(i))
		}
	}
	return first, later
}

// dedupeCrashAndRestart runs the dedupe stage (cfg, pipeline) until it
// crashes before the commit of its third transaction, produces later,
// then runs a new instance until it has counted every input.
func dedupeCrashAndRestart(ctx context.Context, w io.Writer, cl *kgo.Client, cfg stage.Config, pipeline *transform.Pipeline, later []*kgo.Record, log *slog.Logger, sum *Summary) error {
	var d netcut.Dialer
	crashing, err := stage.New(cfg, stage.WithLogger(log), stage.WithTransform(pipeline),
		stage.WithKafkaOptions(kgo.Dialer(d.Dial)),
		stage.WithFailpoints(failpoint.Failpoint{Name: failpoint.CrashBeforeCommit, N: 3}),
		stage.WithCrashAction(d.Cut))
	if err != nil {
		return err
	}
	if err := crashing.Run(ctx); !errors.Is(err, failpoint.ErrCrashed) {
		return fmt.Errorf("dedupe first run: want a crash at transaction 3, got %v", err)
	}
	cs := crashing.Stats()
	fmt.Fprintf(w, "instance demo-1 crashed at %s@3 after %s\n", failpoint.CrashBeforeCommit, plural.Count(cs.Committed, "committed transaction"))

	if err := cl.ProduceSync(ctx, later...).FirstErr(); err != nil {
		return fmt.Errorf("produce input: %w", err)
	}
	fmt.Fprintf(w, "produced %d more resent events, seen before the crash\n", len(later))
	restarted, err := stage.New(cfg, stage.WithLogger(log), stage.WithTransform(pipeline))
	if err != nil {
		return err
	}
	want := int64(sum.Distinct+sum.Resent) - cs.Produced - cs.Deduplicated - cs.DeadLettered
	if err := runUntilCounted(ctx, restarted, want); err != nil {
		return err
	}
	rs := restarted.Stats()
	sum.Deduplicated = int(cs.Deduplicated + rs.Deduplicated)
	fmt.Fprintf(w, "instance demo-1 restarted: restored its store from the changelog, committed %s\n", plural.Count(rs.Committed, "more transaction"))
	return nil
}

// countDedupeOutputs reads the dedupe stage's output topic, read
// committed, and counts its records, duplicates and missing events.
func countDedupeOutputs(ctx context.Context, seeds []string, topic string, sum *Summary) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	outs, err := audit.Drain(ctx, seeds, topic)
	if err != nil {
		return err
	}
	sum.DedupeOut = len(outs)
	seen := map[string]bool{}
	for _, r := range outs {
		var v struct {
			EventID string `json:"event_id"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			return fmt.Errorf("output %s: %w", r.Value, err)
		}
		if seen[v.EventID] {
			sum.DedupeDuplicates++
		}
		seen[v.EventID] = true
	}
	for i := range sum.Distinct {
		if !seen["o-"+strconv.Itoa(i)] {
			sum.DedupeMissing++
		}
	}
	return nil
}

// malformed are the bad records the demo mixes in, by kind.
var malformed = [][]byte{
	[]byte(`{"event_id": "broken`),
	[]byte("{\"event_id\":\"e-\xff\"}"),
	nil,
	[]byte(`{"amount": 5}`),
}

func produce(ctx context.Context, cl *kgo.Client, topic string, events int) (in, bad int, err error) {
	var recs []*kgo.Record
	for i := range events {
		v := fmt.Sprintf(`{"event_id":"e-%d","customer":"c-%d","amount":%d.%02d}`, i, i%97, i%500, i%100)
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
		if i%(events/10+1) == 0 {
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("bad-" + strconv.Itoa(bad)), Value: malformed[bad%len(malformed)]})
			bad++
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, 0, fmt.Errorf("produce input: %w", err)
	}
	return len(recs), bad, nil
}

// runUntil runs s until it has committed want outputs and dead letters,
// then stops it cleanly.
func runUntil(ctx context.Context, s *stage.Stage, want int64) error {
	return runUntilStats(ctx, s, func(st stage.Stats) bool { return st.Produced+st.DeadLettered >= want })
}

// runUntilCounted runs s until it has committed want outputs, dead letters
// and deduplicated records, then stops it cleanly.
func runUntilCounted(ctx context.Context, s *stage.Stage, want int64) error {
	return runUntilStats(ctx, s, func(st stage.Stats) bool { return st.Produced+st.DeadLettered+st.Deduplicated >= want })
}

// runUntilStats runs s until done(its stats), then stops it cleanly.
func runUntilStats(ctx context.Context, s *stage.Stage, finished func(stage.Stats) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case err := <-done:
			return fmt.Errorf("stage stopped early: %v", err)
		case <-timeout:
			return fmt.Errorf("stage did not finish in time: %+v", s.Stats())
		case <-tick.C:
			if finished(s.Stats()) {
				cancel()
				return <-done
			}
		}
	}
}

func check(ctx context.Context, seeds []string, st *topology.Stage, sum *Summary) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	outs, err := audit.Drain(ctx, seeds, st.Output.Topic)
	if err != nil {
		return err
	}
	dlq, err := audit.Drain(ctx, seeds, st.DeadLetter.Topic)
	if err != nil {
		return err
	}
	sum.Out, sum.DeadLettered = len(outs), len(dlq)
	seen := map[string]bool{}
	for _, r := range outs {
		if seen[string(r.Key)] {
			sum.Duplicates++
		}
		seen[string(r.Key)] = true
	}
	for i := range sum.In - sum.Malformed {
		if !seen["e-"+strconv.Itoa(i)] {
			sum.Missing++
		}
	}
	sources := map[string]bool{}
	for _, r := range dlq {
		sources[string(r.Key)] = true
	}
	for i := range sum.Malformed {
		if !sources["bad-"+strconv.Itoa(i)] {
			sum.MissingDLQ++
		}
	}
	return nil
}
