package testrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/provision"
)

// DefaultTimeout bounds one fixture's run.
const DefaultTimeout = 30 * time.Second

// Options tune Run; the zero value is the default.
type Options struct {
	Timeout time.Duration // whole run; default DefaultTimeout
	Logger  *slog.Logger  // the stages' logs; default discarded
}

// Result is what a run found.
type Result struct {
	Stages       int
	In           int // input records produced
	Out          int // output records read back
	DeadLettered int // dead letters read back
	Elapsed      time.Duration
	Topics       []TopicDiff // every compared topic, in fixture order, then by name
}

// OK reports whether every topic matched.
func (r *Result) OK() bool {
	for _, t := range r.Topics {
		if !t.OK() {
			return false
		}
	}
	return true
}

// ParseTopology parses a topology file for a test run: kafka.brokers is replaced
// by the embedded cluster's address later, so EXACTLY_BROKERS is ignored,
// and the rest of the environment is lookup's.
func ParseTopology(path string, data []byte, lookup func(string) (string, bool)) (*topology.File, error) {
	return topology.Parse(path, data, func(k string) (string, bool) {
		if k == topology.BrokersEnv {
			return "", false
		}
		return lookup(k)
	})
}

// Run runs every stage of f, with the Go transforms of transform.Default, on a new
// embedded cluster: it creates the topics f declares, produces the
// fixture's input, waits until every stage has committed all of its input
// and no transaction is open, reads every topic a stage writes
// read_committed, and compares it with the fixture. It returns
// ErrMismatch when something differs, and other errors when the run
// itself failed. Sinks are not run. The TLS and SASL settings of f are not
// used: the embedded cluster takes plaintext.
func Run(ctx context.Context, f *topology.File, fx *Fixture, o Options) (*Result, error) {
	start := time.Now()
	o.setDefaults()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if len(f.Stages) == 0 {
		return nil, cannotRun{fmt.Errorf("%s has no stage to test", f.Path)}
	}
	if err := check(f, fx); err != nil {
		return nil, cannotRun{err}
	}

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, fmt.Errorf("start embedded cluster: %w", err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()
	// The cluster stands in for the file's; its own security settings do
	// not apply to it.
	f.Kafka.Brokers, f.Kafka.TLS, f.Kafka.SASL = seeds, topology.TLS{}, topology.SASL{}

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := provision.CreateTopics(ctx, adm, f); err != nil {
		return nil, err
	}
	res := &Result{Stages: len(f.Stages)}
	ranks, err := produce(ctx, cl, adm, f, fx, res)
	if err != nil {
		return nil, err
	}

	written := writtenTopics(f)
	rd, err := newReader(ctx, seeds, inputsAndWritten(f, written))
	if err != nil {
		return nil, err
	}
	defer rd.close()

	if err := runStages(ctx, adm, f, rd, o.Logger); err != nil {
		return nil, err
	}

	res.Topics = compare(fx, written, rd.snapshot(), ranks)
	res.countRecords()
	res.Elapsed = time.Since(start)
	if !res.OK() {
		return res, ErrMismatch
	}
	return res, nil
}

// setDefaults fills in the defaults of o.
func (o *Options) setDefaults() {
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// runStages runs every stage of f until the run is quiet, then stops them.
func runStages(ctx context.Context, adm *kadm.Client, f *topology.File, rd *reader, log *slog.Logger) error {
	stages, err := startStages(ctx, f, log)
	if err != nil {
		return err
	}
	waitErr := quiesce(ctx, adm, f, rd, stages)
	if err := stages.stop(); err != nil {
		return err
	}
	return waitErr
}

// countRecords adds up the records read from the output and dead-letter topics.
func (res *Result) countRecords() {
	for _, t := range res.Topics {
		if t.DeadLetters {
			res.DeadLettered += len(t.Actual)
		} else {
			res.Out += len(t.Actual)
		}
	}
}

// check reports fixture topics the topology does not know or no stage
// writes.
func check(f *topology.File, fx *Fixture) error {
	declared := map[string]bool{}
	for _, t := range f.Topics {
		declared[t.Name] = true
	}
	written := writtenTopics(f)
	var errs []error
	for _, t := range fx.Input {
		if !declared[t.Topic] {
			errs = append(errs, fmt.Errorf("%s: input.%s: topic %q is not declared in %s", fx.Path, t.Topic, t.Topic, f.Path))
		}
	}
	for _, g := range []struct {
		what string
		trs  []TopicRecords
		dlq  bool
	}{{"output", fx.Output, false}, {"dead_letters", fx.DeadLetters, true}} {
		for _, t := range g.trs {
			isDLQ, ok := written[t.Topic]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s: %s.%s: no stage of %s writes topic %q", fx.Path, g.what, t.Topic, f.Path, t.Topic))
			case isDLQ != g.dlq && g.dlq:
				errs = append(errs, fmt.Errorf("%s: %s.%s: %q is an output topic; list its records under output", fx.Path, g.what, t.Topic, t.Topic))
			case isDLQ != g.dlq:
				errs = append(errs, fmt.Errorf("%s: %s.%s: %q is a dead-letter topic; list its records under dead_letters", fx.Path, g.what, t.Topic, t.Topic))
			}
		}
	}
	for _, st := range f.Stages {
		for _, e := range []topology.Endpoint{st.Input, st.Output} {
			if e.Registry.URL != "" {
				errs = append(errs, fmt.Errorf("stage %s: %s uses a schema registry, which exactly test does not reach (it runs without network)", st.Name, e.Topic))
			}
		}
	}
	return errors.Join(errs...)
}

// writtenTopics maps every topic a stage writes to whether it is a
// dead-letter topic.
func writtenTopics(f *topology.File) map[string]bool {
	m := map[string]bool{}
	for i := range f.Stages {
		st := &f.Stages[i]
		for _, t := range st.OutputTopics() {
			m[t] = false
		}
	}
	for i := range f.Stages {
		m[f.Stages[i].DeadLetter.Topic] = true
	}
	return m
}

func inputsAndWritten(f *topology.File, written map[string]bool) []string {
	var ts []string
	for t := range written {
		ts = append(ts, t)
	}
	for i := range f.Stages {
		ts = append(ts, f.Stages[i].Input.Topic)
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

// produce writes the fixture's input, in file order, and returns the rank
// of each input record: its position in the file.
func produce(ctx context.Context, cl *kgo.Client, adm *kadm.Client, f *topology.File, fx *Fixture, res *Result) (map[position][]int, error) {
	parts := map[string]int32{}
	for _, t := range f.Topics {
		parts[t.Name] = t.Partitions
	}
	ranks := map[position][]int{}
	i := 0
	for _, tr := range fx.Input {
		for _, r := range tr.Records {
			p := r.Partition
			switch {
			case p >= parts[tr.Topic]:
				return nil, cannotRun{fmt.Errorf("%s:%d: partition %d: topic %s has %d partitions", fx.Path, r.Line, p, tr.Topic, parts[tr.Topic])}
			case p < 0 && r.Key != nil:
				p = partitionFor(r.Key, parts[tr.Topic])
			case p < 0:
				// No key: spread over the partitions in turn.
				p = int32(i % int(parts[tr.Topic]))
			}
			rec := &kgo.Record{Topic: tr.Topic, Partition: p, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
			for _, h := range r.Headers {
				rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
			}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				return nil, fmt.Errorf("produce input to %s: %w", tr.Topic, err)
			}
			ranks[position{rec.Topic, rec.Partition, rec.Offset}] = []int{i}
			i++
		}
	}
	res.In = i
	return ranks, nil
}

// partitionFor is the partition that franz-go's default partitioner
// gives a keyed record: murmur2 of the key, as the Java client does.
func partitionFor(key []byte, n int32) int32 {
	return int32(keyPartitioner.ForTopic("").Partition(&kgo.Record{Key: key}, int(n)))
}

var keyPartitioner = kgo.StickyKeyPartitioner(nil)

type position struct {
	topic     string
	partition int32
	offset    int64
}

// reader reads topics read_committed from the start, control records
// included, so that it knows how far it has read even when a partition
// ends in a transaction marker.
type reader struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	records  []*kgo.Record              // data records, in the order read
	next     map[string]map[int32]int64 // offset after the last record read, markers included
	lastData map[string]map[int32]int64 // offset after the last data record
	err      error
}

func newReader(ctx context.Context, seeds []string, topics []string) (*reader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	rd := &reader{cl: cl, cancel: cancel, done: make(chan struct{}),
		next: map[string]map[int32]int64{}, lastData: map[string]map[int32]int64{}}
	go rd.run(ctx)
	return rd, nil
}

func (rd *reader) run(ctx context.Context) {
	defer close(rd.done)
	for ctx.Err() == nil {
		fs := rd.cl.PollFetches(ctx)
		rd.mu.Lock()
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				rd.err = fmt.Errorf("read %s/%d: %w", t, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			set(rd.next, r.Topic, r.Partition, r.Offset+1)
			if !r.Attrs.IsControl() {
				set(rd.lastData, r.Topic, r.Partition, r.Offset+1)
				rd.records = append(rd.records, r)
			}
		})
		rd.mu.Unlock()
	}
}

func set(m map[string]map[int32]int64, t string, p int32, v int64) {
	if m[t] == nil {
		m[t] = map[int32]int64{}
	}
	m[t][p] = v
}

func (rd *reader) snapshot() []*kgo.Record {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	return slices.Clone(rd.records)
}

func (rd *reader) close() {
	rd.cancel()
	<-rd.done
	rd.cl.Close()
}

type runningStages struct {
	cancel   context.CancelFunc
	done     chan error // the engine's Run, once it returned
	stateDir string     // the stages' local state, removed by stop
}

// startStages runs every stage of f in an engine until stop.
func startStages(ctx context.Context, f *topology.File, log *slog.Logger) (*runningStages, error) {
	// Each run has its own state dir: runs in parallel must not share
	// (and empty) each other's.
	stateDir, err := os.MkdirTemp("", "exactly-test-state-")
	if err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	eng, err := processor.New(f, processor.Stages(), processor.InstanceID("test"), processor.StateDir(stateDir), processor.WithLogger(log))
	if err != nil {
		_ = os.RemoveAll(stateDir)
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	rs := &runningStages{cancel: cancel, done: make(chan error, 1), stateDir: stateDir}
	go func() { rs.done <- eng.Run(ctx) }()
	return rs, nil
}

// failed returns the error of a stage that stopped on its own, if any.
func (rs *runningStages) failed() error {
	select {
	case err := <-rs.done:
		rs.done <- err // stop collects it again
		if err == nil {
			return errors.New("a stage stopped before its input was processed")
		}
		return err
	default:
		return nil
	}
}

func (rs *runningStages) stop() error {
	rs.cancel()
	err := <-rs.done
	_ = os.RemoveAll(rs.stateDir)
	if errors.Is(err, context.Canceled) {
		return nil // stopped, not failed
	}
	return err
}

// quiesce waits until nothing more will be written: no transaction is
// open in any topic the reader reads, the reader has read every one to
// its end, and every stage's group has committed offsets past the last
// record of each input partition. A stage writes only in answer to input,
// so after that no record can follow.
func quiesce(ctx context.Context, adm *kadm.Client, f *topology.File, rd *reader, rs *runningStages) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var why string
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("stages did not finish their input in time (%s): %w", why, ctx.Err())
		case <-tick.C:
		}
		if err := rs.failed(); err != nil {
			return err
		}
		var err error
		why, err = notQuiet(ctx, adm, f, rd)
		if err != nil {
			// A group the embedded cluster does not know yet
			// (GROUP_ID_NOT_FOUND before the stage joined), or offsets
			// not yet listable: asked again on the next tick; the
			// last one is named if time runs out.
			why = err.Error()
			continue
		}
		if why == "" {
			return nil
		}
	}
}

// notQuiet says why the run may not be over yet, or "" when it is.
func notQuiet(ctx context.Context, adm *kadm.Client, f *topology.File, rd *reader) (string, error) {
	// Committed offsets first: a record read later is then either
	// covered by them or shows that a stage has more to do.
	committed, err := committedOffsets(ctx, adm, f)
	if err != nil {
		return "", err
	}
	topics := inputsAndWritten(f, writtenTopics(f))
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return "", err
	}
	stable, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return "", err
	}
	rd.mu.Lock()
	defer rd.mu.Unlock()
	if rd.err != nil {
		return "", rd.err
	}
	if why := rd.notAtEnd(ends, stable); why != "" {
		return why, nil
	}
	return rd.notCommitted(f, committed), nil
}

// committedOffsets are the offsets each stage of f committed, by stage.
func committedOffsets(ctx context.Context, adm *kadm.Client, f *topology.File) (map[string]kadm.OffsetResponses, error) {
	committed := map[string]kadm.OffsetResponses{}
	for i := range f.Stages {
		st := &f.Stages[i]
		// A stage consumes in consumer group exactly-<stage>.
		offs, err := adm.FetchOffsets(ctx, "exactly-"+st.Name)
		if err != nil {
			return nil, fmt.Errorf("fetch offsets of stage %s: %w", st.Name, err)
		}
		committed[st.Name] = offs
	}
	return committed, nil
}

// notAtEnd names the first partition whose end offset is not known, whose
// transaction is open (its last stable offset below its end), or which rd
// has not read to its end; "" when there is none. rd.mu is held.
func (rd *reader) notAtEnd(ends, stable kadm.ListedOffsets) string {
	var why string
	ends.Each(func(e kadm.ListedOffset) {
		if why != "" {
			return
		}
		s, _ := stable.Lookup(e.Topic, e.Partition)
		switch {
		case e.Err != nil || s.Err != nil:
			why = fmt.Sprintf("%s/%d: end offsets not known", e.Topic, e.Partition)
		case s.Offset != e.Offset:
			why = fmt.Sprintf("%s/%d: a transaction is open", e.Topic, e.Partition)
		case rd.next[e.Topic][e.Partition] < e.Offset:
			why = fmt.Sprintf("%s/%d: not read to its end %d", e.Topic, e.Partition, e.Offset)
		}
	})
	return why
}

// notCommitted names the first stage of f whose committed offsets are
// below the last data record rd read from its input; "" when there is
// none. rd.mu is held.
func (rd *reader) notCommitted(f *topology.File, committed map[string]kadm.OffsetResponses) string {
	for i := range f.Stages {
		st := &f.Stages[i]
		for p, last := range rd.lastData[st.Input.Topic] {
			c, ok := committed[st.Name].Lookup(st.Input.Topic, p)
			if !ok || c.Err != nil || c.At < last {
				return "stage " + st.Name + " has not committed " + st.Input.Topic + "/" + strconv.Itoa(int(p))
			}
		}
	}
	return ""
}

// source returns the record an output or dead letter came from, by its
// lineage or dead-letter headers.
func source(r *kgo.Record) (position, int, bool) {
	var pos position
	var have int
	index := 0
	for _, h := range r.Headers {
		switch h.Key {
		case processor.HeaderLineageTopic, deadletter.HeaderSourceTopic:
			pos.topic = string(h.Value)
			have++
		case processor.HeaderLineagePartition, deadletter.HeaderSourcePartition:
			p, err := strconv.ParseInt(string(h.Value), 10, 32)
			if err == nil {
				pos.partition = int32(p)
				have++
			}
		case processor.HeaderLineageOffset, deadletter.HeaderSourceOffset:
			o, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err == nil {
				pos.offset = o
				have++
			}
		case processor.HeaderLineageIndex:
			index, _ = strconv.Atoi(string(h.Value))
		}
	}
	return pos, index, have == 3
}
