// Package redrive sends a stage's dead letters back to its input topic,
// exactly once: `exactly redrive`. It reads the stage's dead-letter topic
// read_committed in consumer group exactly-redrive-<stage> and re-produces
// each selected dead letter's original record (key, value, the record's
// own headers, its partition; its timestamp as below) to the source topic,
// in one Kafka transaction with the group's offsets (KIP-98, KIP-447), as a
// stage does. A crash at any point and a restart add each record to the source
// topic once.
//
// Each redriven record carries HeaderCount, one more than the count its
// dead letter carried: a record that fails again comes back with it, and
// one that reached the limit is not redriven again but reported.
//
// A redriven record is written with the time of writing, its original
// timestamp in deadletter.HeaderRedriveTimestamp: the source topic's
// retention.ms counts from a record's timestamp, and would delete a dead
// letter older than it before the stage read it. The stage takes the
// header as the record's timestamp.
package redrive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
)

// HeaderCount counts how many times a record was redriven: decimal text,
// 1 on the first redrive.
const HeaderCount = deadletter.HeaderRedriveCount

// DefaultMaxRedrives is how many times a record is redriven at most.
const DefaultMaxRedrives = 3

// idleLimit ends a redrive that has read nothing for this long although
// the end it aimed for was not reached (records of aborted transactions at
// the very end of a partition are never returned).
const idleLimit = 10 * time.Second

// Config is what a redrive needs.
type Config struct {
	Stage       string   // the stage whose dead letters are redriven
	DeadLetter  string   // its dead-letter topic
	Input       string   // its input topic: where the records go back to
	Brokers     []string // seed brokers
	ClientID    string
	Where       string // CEL bool expression selecting dead letters; empty: all
	MaxRedrives int    // a record redriven this many times is not redriven again; default 3
	// TransactionTimeout is the producer's transaction.timeout.ms; default 30s.
	TransactionTimeout time.Duration
	Logger             *slog.Logger
	KafkaOptions       []kgo.Opt            // appended to every client's options (TLS, SASL)
	Failpoints         failpoint.Failpoints // crash-before-commit and crash-after-commit count redrive transactions
	// Progress, when set, hears how far the redrive is: one SetTotal with
	// the dead-letter offsets left to handle (from the group's committed
	// offsets to each partition's last stable offset at start), then Add
	// as transactions commit. Offsets, not records: markers count.
	Progress Progress
}

// Progress is told how far a long run is; *progress.Reporter is one.
type Progress interface {
	SetTotal(total int64)
	Add(n int64)
}

// Group is the redrive's consumer group, exactly-redrive-<stage>; its
// committed offsets say which dead letters were handled already.
func (c Config) Group() string { return "exactly-redrive-" + c.Stage }

// TransactionalID is stable, so that a restarted redrive fences a crashed
// one and aborts its open transaction at once.
func (c Config) TransactionalID() string { return "exactly-redrive-" + c.Stage }

// Ref names a dead letter that was not redriven, and why.
type Ref struct {
	Partition int32  // of the dead-letter topic
	Offset    int64  // of the dead-letter topic
	Why       string // text for the report
}

// Report is what a redrive did. Every dead letter read is counted in
// exactly one of Redriven, NotSelected, OtherStage, Exhausted and
// Unredrivable.
type Report struct {
	Read        int // dead letters read (data records)
	Redriven    int // re-produced to the input topic and committed
	NotSelected int // --where was false
	OtherStage  int // written by another stage or sink sharing the topic
	// Exhausted were redriven MaxRedrives times already.
	Exhausted []Ref
	// Unredrivable cannot be redriven: an envelope without the value (a
	// dead letter too large for its topic), or no source headers.
	Unredrivable []Ref
	// Incomplete is set when the redrive stopped before the end of the
	// dead-letter topic as it was when it started (canceled or idle).
	Incomplete string

	whereErr error // the first --where evaluation error of a transaction
}

// Run redrives the dead letters that the group has not handled yet, up to
// the end of the dead-letter topic when Run started, and returns what it
// did. Canceling ctx stops it after the current transaction.
func Run(ctx context.Context, cfg Config) (Report, error) {
	var rep Report
	cfg.setDefaults()
	sel, err := Compile(cfg.Where)
	if err != nil {
		return rep, err
	}
	base := append(kafkaconn.ClientOpts(cfg.Brokers, cfg.ClientID), cfg.KafkaOptions...)
	admCl, err := kgo.NewClient(base...)
	if err != nil {
		return rep, fmt.Errorf("kafka client: %w", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	ends, parts, err := targets(ctx, adm, cfg)
	if err != nil {
		return rep, err
	}
	done := committedOffsets(ctx, adm, cfg, ends)
	if reached(done, ends) {
		return rep, nil
	}
	if cfg.Progress != nil {
		var left int64
		for p, end := range ends {
			left += max(end-done[p], 0)
		}
		cfg.Progress.SetTotal(left)
	}
	sess, err := newSession(cfg)
	if err != nil {
		return rep, fmt.Errorf("kafka client: %w", err)
	}
	crashed := false
	defer func() {
		if crashed {
			go sess.Close()
			return
		}
		sess.Close()
		group.LeaveStaticGroup(context.WithoutCancel(ctx), cfg.Logger, cfg.Group(), cfg.TransactionalID(), base...)
	}()
	r := &run{cfg: cfg, sel: sel, parts: parts, rep: &rep}
	err = r.untilEnd(ctx, sess, done, ends)
	crashed = errors.Is(err, failpoint.ErrCrashed)
	return rep, err
}

// setDefaults fills in what cfg leaves out.
func (cfg *Config) setDefaults() {
	if cfg.MaxRedrives <= 0 {
		cfg.MaxRedrives = DefaultMaxRedrives
	}
	reader.OrDefault(&cfg.ClientID, "exactly")
	reader.OrDefault(&cfg.TransactionTimeout, 30*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// committedOffsets returns the group's committed next offset of each
// dead-letter partition of ends that has one.
func committedOffsets(ctx context.Context, adm *kadm.Client, cfg Config, ends map[int32]int64) map[int32]int64 {
	done := map[int32]int64{}
	fetched, err := adm.FetchOffsetsForTopics(ctx, cfg.Group(), cfg.DeadLetter)
	if err != nil {
		return done
	}
	for p := range ends {
		if o, ok := fetched.Lookup(cfg.DeadLetter, p); ok && o.Err == nil && o.At >= 0 {
			done[p] = o.At
		}
	}
	return done
}

// newSession is the redrive's transactional session over the dead-letter
// topic, a static member of its group.
func newSession(cfg Config) (*kgo.GroupTransactSession, error) {
	return kgo.NewGroupTransactSession(append(append(kafkaconn.ClientOpts(cfg.Brokers, cfg.ClientID),
		kgo.ConsumerGroup(cfg.Group()),
		kgo.InstanceID(cfg.TransactionalID()), // static: a restart takes over at once
		kgo.ConsumeTopics(cfg.DeadLetter),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.KeepControlRecords(), // the position passes the last marker, so the end is reached
		kgo.TransactionalID(cfg.TransactionalID()),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), // back to the partition it came from
		kgo.WithLogger(kafkaconn.KafkaLogger(cfg.Logger)),
	), cfg.KafkaOptions...)...)
}

// untilEnd redrives in transactions until done reaches ends, ctx ends
// (the report says so) or nothing more comes for idleLimit.
func (r *run) untilEnd(ctx context.Context, sess *kgo.GroupTransactSession, done, ends map[int32]int64) error {
	cfg, rep := r.cfg, r.rep
	idleSince := time.Now()
	for !reached(done, ends) {
		if ctx.Err() != nil {
			rep.Incomplete = "canceled"
			return nil
		}
		fetches, err := pollDeadLetters(ctx, sess, cfg.DeadLetter)
		if err != nil {
			return err
		}
		if fetches.NumRecords() == 0 {
			if time.Since(idleSince) > idleLimit {
				rep.Incomplete = fmt.Sprintf("nothing more to read for %s before the end of %s seen at start", idleLimit, cfg.DeadLetter)
				return nil
			}
			continue
		}
		idleSince = time.Now()
		committed, err := r.transaction(ctx, sess, fetches)
		if err != nil {
			return err
		}
		for p, next := range committed {
			if cfg.Progress != nil && next > done[p] {
				cfg.Progress.Add(min(next, ends[p]) - min(done[p], ends[p]))
			}
			done[p] = max(done[p], next)
		}
	}
	return nil
}

// pollDeadLetters polls for up to a second; a fetch error that polling
// again cannot mend is returned.
func pollDeadLetters(ctx context.Context, sess *kgo.GroupTransactSession, topic string) (kgo.Fetches, error) {
	pollCtx, cancel := context.WithTimeout(ctx, time.Second)
	fetches := sess.PollFetches(pollCtx)
	cancel()
	var fatal error
	fetches.EachError(func(_ string, _ int32, err error) {
		if errors.Is(err, kgo.ErrClientClosed) || kafkaconn.IsFatal(err) {
			fatal = err
		}
	})
	if fatal != nil {
		return nil, fmt.Errorf("read %s: %w", topic, fatal)
	}
	return fetches, nil
}

// targets returns the end of each dead-letter partition (its last stable
// offset now: what read_committed can reach) and the partition count of
// the input topic.
func targets(ctx context.Context, adm *kadm.Client, cfg Config) (map[int32]int64, int32, error) {
	lso, err := adm.ListCommittedOffsets(ctx, cfg.DeadLetter)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		return nil, 0, fmt.Errorf("list offsets of %s: %w", cfg.DeadLetter, err)
	}
	ends := map[int32]int64{}
	lso.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	tds, err := adm.ListTopics(ctx, cfg.Input)
	if err != nil {
		return nil, 0, fmt.Errorf("describe topic %s: %w", cfg.Input, err)
	}
	td, ok := tds[cfg.Input]
	if !ok || td.Err != nil {
		return nil, 0, fmt.Errorf("describe topic %s: %w", cfg.Input, errors.Join(td.Err, errors.New("not found")))
	}
	return ends, int32(len(td.Partitions)), nil
}

func reached(done, ends map[int32]int64) bool {
	for p, end := range ends {
		if done[p] < end {
			return false
		}
	}
	return true
}

// run is the state of one redrive.
type run struct {
	cfg   Config
	sel   *Selector
	parts int32
	rep   *Report
	txns  int
}

// transaction redrives the dead letters of fetches in one transaction and
// returns, if it committed, the next offset of each partition it read.
// An abort (a rebalance) returns none: the session rewound, and the same
// records come again.
func (r *run) transaction(ctx context.Context, sess *kgo.GroupTransactSession, fetches kgo.Fetches) (map[int32]int64, error) {
	if err := sess.Begin(); err != nil {
		return nil, fmt.Errorf("begin transaction: %w", err)
	}
	next := map[int32]int64{}
	var pending Report
	var (
		mu         sync.Mutex
		produceErr error
		promises   kafkaconn.Promises
	)
	fetches.EachRecord(func(rec *kgo.Record) {
		next[rec.Partition] = rec.Offset + 1
		if rec.Attrs.IsControl() {
			return
		}
		pending.Read++
		out, skip := r.redrive(rec, &pending)
		if skip {
			return
		}
		sess.Produce(ctx, out, promises.Track(func(_ *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && produceErr == nil {
				produceErr = err
			}
		}))
	})
	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.TransactionTimeout)
	defer cancel()
	if pending.whereErr != nil {
		_, _ = sess.End(endCtx, kgo.TryAbort)
		return nil, fmt.Errorf("%w: %w", ErrUsage, pending.whereErr)
	}
	// A record refused before it was buffered answers after the client's
	// Flush: produceErr is final only once every promise answered.
	if err := promises.Flush(endCtx, sess.Client()); err != nil {
		return nil, err
	}
	mu.Lock()
	failed := produceErr
	mu.Unlock()
	r.txns++
	if r.cfg.Failpoints.Armed(failpoint.CrashBeforeCommit, r.txns) {
		return nil, r.cfg.Failpoints.Fire(r.cfg.Logger, failpoint.CrashBeforeCommit, r.txns)
	}
	if failed != nil {
		_, _ = sess.End(endCtx, kgo.TryAbort)
		return nil, fmt.Errorf("produce to %s: %w", r.cfg.Input, failed)
	}
	committed, err := sess.End(endCtx, kgo.TryCommit)
	if err != nil {
		return nil, fmt.Errorf("end transaction: %w", err)
	}
	if !committed {
		r.cfg.Logger.Warn("redrive transaction aborted by a rebalance; reading again")
		return nil, nil
	}
	if r.cfg.Failpoints.Armed(failpoint.CrashAfterCommit, r.txns) {
		return nil, r.cfg.Failpoints.Fire(r.cfg.Logger, failpoint.CrashAfterCommit, r.txns)
	}
	r.rep.add(pending)
	return next, nil
}

func (rep *Report) add(o Report) {
	rep.Read += o.Read
	rep.Redriven += o.Redriven
	rep.NotSelected += o.NotSelected
	rep.OtherStage += o.OtherStage
	rep.Exhausted = append(rep.Exhausted, o.Exhausted...)
	rep.Unredrivable = append(rep.Unredrivable, o.Unredrivable...)
}

// DeadLetter is a dead letter as redrive reads it.
type DeadLetter struct {
	Stage           string
	Reason, Error   string
	Step            string
	SourceTopic     string
	SourcePartition int32
	SourceOffset    int64
	SourceTime      time.Time
	Count           int // times redriven before
	Envelope        bool
	// WindowResult is a dead letter holding an aggregate window's result
	// the broker refused (deadletter.HeaderWindowResult): no input record.
	WindowResult bool
	Key, Value   []byte
	Headers      []kgo.RecordHeader // the original record's own headers, without HeaderCount
}

// Parse splits dead letter rec into the exactly.dlq.* headers and the
// original record. ok is false when the source headers are missing or bad.
func Parse(rec *kgo.Record) (dl DeadLetter, ok bool) {
	var partOK, topicOK bool
	dl.SourceTime = rec.Timestamp
	for _, h := range rec.Headers {
		v := string(h.Value)
		switch h.Key {
		case deadletter.HeaderSourceTopic:
			dl.SourceTopic, topicOK = v, v != ""
		case deadletter.HeaderSourcePartition:
			p, err := strconv.ParseInt(v, 10, 32)
			dl.SourcePartition, partOK = int32(p), err == nil && p >= 0
		default:
			dl.setHeader(h)
		}
	}
	dl.Key, dl.Value = rec.Key, rec.Value
	return dl, partOK && topicOK
}

// setHeader reads header h of a dead letter into dl: an exactly.dlq.*
// header other than the source topic and partition, or one of the
// original record's own headers.
func (dl *DeadLetter) setHeader(h kgo.RecordHeader) {
	v := string(h.Value)
	switch h.Key {
	case deadletter.HeaderStage:
		dl.Stage = v
	case deadletter.HeaderReason:
		dl.Reason = v
	case deadletter.HeaderError:
		dl.Error = v
	case deadletter.HeaderStep:
		dl.Step = v
	case deadletter.HeaderSourceOffset:
		dl.SourceOffset, _ = strconv.ParseInt(v, 10, 64)
	case deadletter.HeaderSourceTimestamp:
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			dl.SourceTime = time.UnixMilli(ms)
		}
	case deadletter.HeaderValueOmitted, deadletter.HeaderKeyOmitted:
		dl.Envelope = true
	case deadletter.HeaderWindowResult:
		dl.WindowResult = true
	case HeaderCount:
		dl.Count, _ = strconv.Atoi(v)
	case deadletter.HeaderRedriveTimestamp:
		// A redriven record's: the stage took it as its timestamp,
		// which the dead letter names (HeaderSourceTimestamp).
	default:
		if !strings.HasPrefix(h.Key, "exactly.dlq.") {
			dl.Headers = append(dl.Headers, h)
		}
	}
}

// Record returns the record to produce: the original key, value and
// headers, to its source partition, with HeaderCount one higher, and the
// original timestamp in deadletter.HeaderRedriveTimestamp; the record's
// own timestamp is left for the producer to set to the time of writing.
// The lineage headers of the stage upstream (stage.HeaderLineage*)
// are left out: redrive, not that stage, writes the record, and with them
// exactly verify would count it as that stage's second output of one
// input. In that topic verify counts it under no_lineage.
func (dl DeadLetter) Record() *kgo.Record {
	h := make([]kgo.RecordHeader, 0, len(dl.Headers)+2)
	for _, hd := range dl.Headers {
		switch hd.Key {
		case stage.HeaderLineageStage, stage.HeaderLineageTopic, stage.HeaderLineagePartition,
			stage.HeaderLineageOffset, stage.HeaderLineageIndex, stage.HeaderLineageTimestamp:
		default:
			h = append(h, hd)
		}
	}
	h = append(h, kgo.RecordHeader{Key: HeaderCount, Value: strconv.AppendInt(nil, int64(dl.Count+1), 10)},
		kgo.RecordHeader{Key: deadletter.HeaderRedriveTimestamp, Value: strconv.AppendInt(nil, dl.SourceTime.UnixMilli(), 10)})
	return &kgo.Record{Topic: dl.SourceTopic, Partition: dl.SourcePartition, Key: dl.Key, Value: dl.Value, Headers: h}
}

// redrive classifies dead letter rec into pending and returns the record
// to produce, or skip.
func (r *run) redrive(rec *kgo.Record, pending *Report) (out *kgo.Record, skip bool) {
	dl, ok := Parse(rec)
	ref := func(why string) Ref { return Ref{Partition: rec.Partition, Offset: rec.Offset, Why: why} }
	tsErr := kafkaconn.CheckWritableTimestamp(dl.SourceTime)
	switch {
	case dl.Stage != r.cfg.Stage:
		pending.OtherStage++
	case !ok:
		pending.Unredrivable = append(pending.Unredrivable, ref("no exactly.dlq.source.topic/partition headers"))
	case dl.WindowResult:
		pending.Unredrivable = append(pending.Unredrivable, ref("an aggregate window's result the broker refused, not an input record: there is nothing to send back"))
	case dl.Envelope:
		pending.Unredrivable = append(pending.Unredrivable, ref("envelope without the value (the dead letter was too large); read the record at its source "+
			dl.SourceTopic+"/"+strconv.Itoa(int(dl.SourcePartition))+"@"+strconv.FormatInt(dl.SourceOffset, 10)))
	case dl.SourceTopic != r.cfg.Input:
		pending.Unredrivable = append(pending.Unredrivable, ref("source topic "+dl.SourceTopic+" is not the stage's input "+r.cfg.Input))
	case dl.SourcePartition >= r.parts:
		pending.Unredrivable = append(pending.Unredrivable, ref(fmt.Sprintf("source partition %d does not exist (%s has %d)", dl.SourcePartition, r.cfg.Input, r.parts)))
	case tsErr != nil:
		// Sent back with another timestamp, it would not be the record
		// that failed.
		pending.Unredrivable = append(pending.Unredrivable, ref(tsErr.Error()))
	case dl.Count >= r.cfg.MaxRedrives:
		pending.Exhausted = append(pending.Exhausted, ref(fmt.Sprintf("redriven %d times already (limit %d): %s", dl.Count, r.cfg.MaxRedrives, dl.Error)))
	default:
		selected, err := r.sel.Match(dl)
		if err != nil {
			// Not the dead letter's fault but the expression's: stop
			// before the transaction commits, so that nothing is marked
			// done that the operator did not select.
			if pending.whereErr == nil { // the first, as the field's doc says
				pending.whereErr = fmt.Errorf("--where on dead letter %s/%d@%d: %w", r.cfg.DeadLetter, rec.Partition, rec.Offset, err)
			}
			return nil, true
		}
		if !selected {
			pending.NotSelected++
			return nil, true
		}
		pending.Redriven++
		return dl.Record(), false
	}
	return nil, true
}

// Selector is a compiled --where expression.
type Selector struct{ prg cel.Program }

// Compile compiles a --where expression: CEL, of type bool, seeing reason,
// error, step (strings), source_partition, source_offset, count (ints), key
// (string), value (the value's JSON, decoded; its text if it is not JSON)
// and headers (map of string to string). Empty selects every dead letter.
func Compile(src string) (*Selector, error) {
	if strings.TrimSpace(src) == "" {
		return &Selector{}, nil
	}
	env, err := cel.NewEnv(
		cel.Variable("reason", cel.StringType),
		cel.Variable("error", cel.StringType),
		cel.Variable("step", cel.StringType),
		cel.Variable("source_partition", cel.IntType),
		cel.Variable("source_offset", cel.IntType),
		cel.Variable("count", cel.IntType),
		cel.Variable("key", cel.StringType),
		cel.Variable("value", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		ext.Strings(),
	)
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%w: --where: %w", ErrUsage, iss.Err())
	}
	if ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("%w: --where: want a bool expression, got %s", ErrUsage, ast.OutputType())
	}
	// Comparisons of an int with a double are exact, as in a stage's steps.
	prg, err := env.Program(ast, cel.CostLimit(1_000_000), transform.ExactComparisons())
	if err != nil {
		return nil, fmt.Errorf("%w: --where: %w", ErrUsage, err)
	}
	return &Selector{prg: prg}, nil
}

// Match evaluates the expression on dl.
func (s *Selector) Match(dl DeadLetter) (bool, error) {
	if s == nil || s.prg == nil {
		return true, nil
	}
	// JSON is read as a stage's steps read it (values.md): 204 is
	// an int, 2.0 a double, and a field is decoded when the expression
	// reads it, so that a field with no exact value (1e400, the reason of
	// the dead letter, say) fails only an expression that reads it. A
	// value that is no JSON is its text.
	var value any = string(dl.Value)
	if v, err := transform.CELJSON(dl.Value); err == nil {
		value = v
	}
	headers := make(map[string]string, len(dl.Headers))
	for _, h := range dl.Headers {
		headers[h.Key] = string(h.Value)
	}
	out, _, err := s.prg.Eval(map[string]any{
		"reason": dl.Reason, "error": dl.Error, "step": dl.Step,
		"source_partition": int64(dl.SourcePartition), "source_offset": dl.SourceOffset, "count": int64(dl.Count),
		"key": string(dl.Key), "value": value, "headers": headers,
	})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("result is %s, not bool", out.Type())
	}
	return b, nil
}

// Print writes the report: the counts, then one line per dead letter that
// was skipped for a reason the operator should see.
func (rep Report) Print(w io.Writer, deadLetter, input string) {
	fmt.Fprintf(w, "redrive %s -> %s: %d read, %d redriven, %d not selected, %d of other stages, %d at the redrive limit, %d not redrivable\n",
		deadLetter, input, rep.Read, rep.Redriven, rep.NotSelected, rep.OtherStage, len(rep.Exhausted), len(rep.Unredrivable))
	for _, r := range rep.Exhausted {
		fmt.Fprintf(w, "  at limit %s/%d@%d: %s\n", deadLetter, r.Partition, r.Offset, r.Why)
	}
	for _, r := range rep.Unredrivable {
		fmt.Fprintf(w, "  not redrivable %s/%d@%d: %s\n", deadLetter, r.Partition, r.Offset, r.Why)
	}
	if rep.Incomplete != "" {
		fmt.Fprintf(w, "stopped early: %s; run again to continue\n", rep.Incomplete)
	}
}
