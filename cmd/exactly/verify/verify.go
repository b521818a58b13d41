// Package verify audits a running or stopped topology for exactly-once: it
// reads every input, output and dead-letter topic with
// isolation.level=read_committed, and every sink table, and accounts for
// each input record.
//
// # Accounting
//
// Every output of a stage carries lineage headers (processor.HeaderLineage*):
// the stage, and the input topic, partition and offset it came from, with
// an index among that input's outputs. Every dead letter carries the same
// source triple (kit.HeaderSource*). For each stage, each committed
// input record is then exactly one of:
//
//   - processed: it has outputs, each (source, index) once, and no dead
//     letter;
//   - dead-lettered: it has one dead letter and no output;
//   - filtered: no output and no dead letter, in a stage with a filter,
//     explode or func step (the steps that may yield nothing);
//   - pending: no output and no dead letter, at or after the offset the
//     stage's consumer group has committed (not processed yet);
//   - lost: none of the above.
//
// A duplicate is a (source, index) written twice, or a second dead letter of
// one source, or, in stages without explode or func steps, an event ID that
// appears in the stage's outputs more often than in its input (and more than
// once). An orphan is an output or dead letter whose source is no committed
// input record: an aborted read.
//
// For a sink, every committed input record without a dead letter (and not a
// skipped tombstone) must be a row whose event ID is the record's, and every
// row must come from such a record. Input at or after the stored position is
// pending: a row for it may or may not exist yet. Sinks write dead letters
// at least once (see pgsink), so repeated sink dead letters are reported but
// are not failures.
//
// # Memory
//
// Nothing is held per record in memory while topics are read. Each check
// appends fixed-size records (34 bytes per input, output or dead letter; 17
// bytes per event ID) to temporary files hashed into 64 buckets, and then
// sorts and walks one bucket at a time. Memory is about 1/64 of the spilled
// bytes plus the Kafka client's fetch buffers; disk is about 100 bytes per
// event per stage.
package verify

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/processor/audit"
	"github.com/exactly-io/exactly/processor/kit"
	"github.com/exactly-io/exactly/processor/pgsink"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// Config is what Run needs.
type Config struct {
	Topology *topology.File
	// EventID is the field of stage input and output values that holds
	// the event ID; a dotted path reaches into nested objects. Sinks use
	// the source of their event_id column instead.
	EventID string
	// KafkaOptions are added to the Kafka client (TLS, SASL, a dialer).
	KafkaOptions []kgo.Opt
	// TempDir holds the spill files; default os.TempDir().
	TempDir string
	// OpenTxnWait is how long a partition's last stable offset may stay
	// below the end it had when verify started before the partition is
	// reported as blocked by an open transaction; default 10s.
	OpenTxnWait time.Duration
	// IdleTimeout ends the read of a partition that returns nothing for
	// this long before reaching its read_committed end; default 10s.
	IdleTimeout time.Duration
	Logger      *slog.Logger
}

// Report is what Run found. OK is false when anything was lost,
// duplicated, read from an aborted transaction, or a partition stayed
// blocked.
type Report struct {
	OK         bool          `json:"ok"`
	Problems   []string      `json:"problems,omitempty"`
	Stages     []*StageCheck `json:"stages"`
	Sinks      []*SinkCheck  `json:"sinks,omitempty"`
	Partitions []Partition   `json:"partitions"`
	Records    int64         `json:"records_read"`
	Elapsed    Duration      `json:"elapsed"`
}

// Duration marshals as a string such as "1.5s".
type Duration time.Duration

// MarshalJSON writes d as text.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).Round(time.Millisecond).String())
}

// UnmarshalJSON reads the text MarshalJSON writes.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	*d = Duration(v)
	return err
}

// StageCheck is the accounting of one stage.
type StageCheck struct {
	Name         string   `json:"name"`
	Input        string   `json:"input"`
	Outputs      []string `json:"outputs"`
	DeadLetter   string   `json:"dead_letter"`
	In           int64    `json:"in"`            // committed input records
	Processed    int64    `json:"processed"`     // inputs with outputs
	Out          int64    `json:"out"`           // output records
	DeadLettered int64    `json:"dead_lettered"` // inputs with a dead letter
	Filtered     int64    `json:"filtered"`
	Pending      int64    `json:"pending"`
	// Failures.
	Lost                int64 `json:"lost"`
	Duplicates          int64 `json:"duplicates"`          // repeated (source, index) or dead letters
	EventIDDuplicates   int64 `json:"event_id_duplicates"` // IDs more often out than in
	Orphans             int64 `json:"orphans"`             // outputs of no committed input
	OutputAndDeadLetter int64 `json:"output_and_dead_letter"`
	// Information.
	NoLineage           int64            `json:"no_lineage"` // outputs without lineage headers, not accounted
	NoEventID           int64            `json:"inputs_without_event_id"`
	DeadLettersByReason map[string]int64 `json:"dead_letters_by_reason"`
	Examples            []string         `json:"examples,omitempty"`

	mayFilter, explodes bool
	in, out             serde.Codec
	group               map[int32]int64 // committed group offsets of the input
	lineage, ids        *spill
}

// Failures returns the number of records that break exactly-once.
func (c *StageCheck) Failures() int64 {
	return c.Lost + c.Duplicates + c.EventIDDuplicates + c.Orphans + c.OutputAndDeadLetter
}

// SinkCheck is the accounting of one Postgres sink.
type SinkCheck struct {
	Name         string `json:"name"`
	Input        string `json:"input"`
	Table        string `json:"table"`
	DeadLetter   string `json:"dead_letter"`
	In           int64  `json:"in"`
	Expected     int64  `json:"expected_rows"` // distinct event IDs that must be rows
	Rows         int64  `json:"rows"`
	DeadLettered int64  `json:"dead_lettered"`
	Skipped      int64  `json:"skipped_tombstones"`
	Pending      int64  `json:"pending"`
	// Failures.
	Missing       int64 `json:"missing_rows"`
	Extra         int64 `json:"extra_rows"`
	DuplicateRows int64 `json:"duplicate_rows"`
	Lost          int64 `json:"lost"` // no row possible and no dead letter
	Orphans       int64 `json:"orphans"`
	// Information.
	DeadLetterRepeats   int64            `json:"dead_letter_repeats"` // at least once by design
	RowsChecked         bool             `json:"rows_checked"`
	Note                string           `json:"note,omitempty"`
	DeadLettersByReason map[string]int64 `json:"dead_letters_by_reason"`
	Examples            []string         `json:"examples,omitempty"`

	cfg          topology.Sink
	codec        serde.Codec
	idSource     string
	positions    map[int32]int64
	lineage, ids *spill
}

// Failures returns the number of records or rows that break exactly-once.
func (c *SinkCheck) Failures() int64 {
	return c.Missing + c.Extra + c.DuplicateRows + c.Lost + c.Orphans
}

// Partition is the state of one partition that verify read.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Start     int64  `json:"start"`
	LSO       int64  `json:"last_stable_offset"` // read_committed end when verify started
	HWM       int64  `json:"high_watermark"`     // read_uncommitted end when verify started
	// Blocked: an open transaction kept the last stable offset below the
	// starting high watermark for longer than Config.OpenTxnWait.
	Blocked bool `json:"blocked"`
	// Incomplete: the read stopped before the read_committed end.
	Incomplete bool `json:"incomplete,omitempty"`
}

// Lineage record layout (34 bytes): partition, offset, kind, index, flags,
// event ID digest. Sorted on the first 12 bytes: one group per source.
const (
	linSize, linKey = 34, 12
	idSize, idKey   = 17, 16
)

const (
	kIn byte = iota + 1
	kOut
	kDLQ
)

const (
	fPending byte = 1 << iota
	fDigest
	fTombstone
)

// Event ID record kinds.
const (
	idIn byte = iota + 1
	idOut
	idExpected
	idMaybe
	idRow
)

const maxExamples = 10

// role is what a topic is to a check.
type role struct {
	stage *StageCheck
	sink  *SinkCheck
	kind  byte
}

// Run reads the topology's topics and tables and returns the report. The
// error is for a failure to verify (unreachable broker, context done), not
// for what was found.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	started := time.Now()
	cfg.applyDefaults()
	if cfg.EventID == "" {
		return nil, errors.New("verify: an event ID field is required")
	}
	f := cfg.Topology
	dir, err := os.MkdirTemp(cfg.TempDir, "exactly-verify-")
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	defer os.RemoveAll(dir)
	p := &plan{dir: dir, rep: &Report{}, roles: map[string][]role{}}
	defer p.close()
	if err := p.addChecks(f); err != nil {
		return nil, err
	}

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(f.Kafka.Brokers...), kgo.ClientID(f.Kafka.ClientID)}, cfg.KafkaOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("verify: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// Positions first, ends second: anything a stage or sink committed
	// after its position was read is then still within the ends read, and
	// is pending, not lost or extra.
	if err := p.readPositions(ctx, adm, f); err != nil {
		return nil, err
	}
	parts, err := listEnds(ctx, adm, p.topics())
	if err != nil {
		return nil, err
	}
	if err := read(ctx, cfg, parts, p.roles, p.rep); err != nil {
		return nil, err
	}
	if err := openTransactions(ctx, adm, cfg, parts); err != nil {
		return nil, err
	}
	if err := p.rep.account(parts); err != nil {
		return nil, err
	}
	p.rep.Elapsed = Duration(time.Since(started))
	return p.rep, nil
}

func (cfg *Config) applyDefaults() {
	if cfg.OpenTxnWait == 0 {
		cfg.OpenTxnWait = 10 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
}

// plan is what Run reads and for which check: each topic's roles, and the
// spill files of every check.
type plan struct {
	dir    string
	rep    *Report
	roles  map[string][]role // by topic
	spills []*spill
}

func (p *plan) close() {
	for _, s := range p.spills {
		s.close()
	}
}

// newSpills returns the lineage and event ID spills of one check.
func (p *plan) newSpills(name string) (*spill, *spill, error) {
	l, err := newSpill(p.dir, name+".lin", linSize, linKey)
	if err != nil {
		return nil, nil, err
	}
	p.spills = append(p.spills, l)
	i, err := newSpill(p.dir, name+".ids", idSize, idKey)
	if err != nil {
		return nil, nil, err
	}
	p.spills = append(p.spills, i)
	return l, i, nil
}

// addChecks adds a check for every stage and sink of f.
func (p *plan) addChecks(f *topology.File) error {
	for i, st := range f.StagesInOrder() {
		c, err := newStageCheck(f, st)
		if err != nil {
			return err
		}
		if c.lineage, c.ids, err = p.newSpills("stage" + strconv.Itoa(i)); err != nil {
			return err
		}
		p.rep.Stages = append(p.rep.Stages, c)
		p.roles[c.Input] = append(p.roles[c.Input], role{stage: c, kind: kIn})
		for _, o := range c.Outputs {
			p.roles[o] = append(p.roles[o], role{stage: c, kind: kOut})
		}
		p.roles[c.DeadLetter] = append(p.roles[c.DeadLetter], role{stage: c, kind: kDLQ})
	}
	for i := range f.Sinks {
		c, err := newSinkCheck(f, f.Sinks[i])
		if err != nil {
			return err
		}
		if c.lineage, c.ids, err = p.newSpills("sink" + strconv.Itoa(i)); err != nil {
			return err
		}
		p.rep.Sinks = append(p.rep.Sinks, c)
		p.roles[c.Input] = append(p.roles[c.Input], role{sink: c, kind: kIn})
		p.roles[c.DeadLetter] = append(p.roles[c.DeadLetter], role{sink: c, kind: kDLQ})
	}
	return nil
}

// topics returns the topics to read, sorted.
func (p *plan) topics() []string {
	topics := keys(p.roles)
	sort.Strings(topics)
	return topics
}

// readPositions reads where each stage's group and each sink stand, and
// the sinks' tables: a sink's positions, then its table, then (after
// this) the topics' ends, so that every row read comes from a record below
// the ends, which verify reads, and every record below a position is in
// the table read.
func (p *plan) readPositions(ctx context.Context, adm *kadm.Client, f *topology.File) error {
	for _, c := range p.rep.Stages {
		offs, err := adm.FetchOffsets(ctx, "exactly-"+c.Name)
		if err != nil {
			return fmt.Errorf("verify: stage %s: fetch group offsets: %w", c.Name, err)
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == c.Input && o.Err == nil {
				c.group[o.Partition] = o.At
			}
		})
	}
	for _, c := range p.rep.Sinks {
		if err := c.readPositions(ctx, f); err != nil {
			return err
		}
		if c.RowsChecked {
			if err := c.readRows(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func newStageCheck(f *topology.File, st *topology.Stage) (*StageCheck, error) {
	c := &StageCheck{Name: st.Name, Input: st.Input.Topic, Outputs: st.OutputTopics(), DeadLetter: st.DeadLetter.Topic,
		DeadLettersByReason: map[string]int64{}, group: map[int32]int64{}}
	for _, s := range st.Transform {
		c.mayFilter = c.mayFilter || s.Filter != "" || s.Explode != "" || s.Func != ""
		c.explodes = c.explodes || s.Explode != "" || s.Func != ""
	}
	var err error
	if c.in, err = serde.NewCodec(processor.CodecConfig(f, st.Input)); err != nil {
		return nil, fmt.Errorf("verify: stage %s input: %w", st.Name, err)
	}
	if c.out, err = serde.NewCodec(processor.CodecConfig(f, st.Output)); err != nil {
		return nil, fmt.Errorf("verify: stage %s output: %w", st.Name, err)
	}
	return c, nil
}

func newSinkCheck(f *topology.File, sk topology.Sink) (*SinkCheck, error) {
	c := &SinkCheck{Name: sk.Name, Input: sk.Input.Topic, Table: sk.Postgres.Table, DeadLetter: sk.DeadLetter.Topic,
		DeadLettersByReason: map[string]int64{}, cfg: sk, positions: map[int32]int64{}}
	c.idSource = sk.Postgres.Columns[sk.Postgres.EventID]
	c.RowsChecked = true
	switch {
	case sk.Postgres.Tombstones == topology.TombstonesDelete:
		c.RowsChecked, c.Note = false, "rows not compared: tombstones: delete makes the rows depend on order"
	case strings.HasPrefix(c.idSource, "$") && c.idSource != topology.SourceKey:
		c.RowsChecked, c.Note = false, "rows not compared: the event_id column is "+c.idSource
	}
	var err error
	if c.codec, err = serde.NewCodec(processor.CodecConfig(f, sk.Input)); err != nil {
		return nil, fmt.Errorf("verify: sink %s input: %w", sk.Name, err)
	}
	return c, nil
}

// account does every check's accounting once the topics are read, and
// judges the report.
func (r *Report) account(parts []*Partition) error {
	starts := map[string]map[int32]int64{}
	for _, p := range parts {
		if starts[p.Topic] == nil {
			starts[p.Topic] = map[int32]int64{}
		}
		starts[p.Topic][p.Partition] = p.Start
		r.Partitions = append(r.Partitions, *p)
	}
	for _, c := range r.Stages {
		if err := c.account(starts[c.Input]); err != nil {
			return err
		}
	}
	for _, c := range r.Sinks {
		if err := c.account(starts[c.Input]); err != nil {
			return err
		}
	}
	r.judge()
	return nil
}

func listEnds(ctx context.Context, adm *kadm.Client, topics []string) ([]*Partition, error) {
	hwm, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = hwm.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("verify: list end offsets: %w", err)
	}
	lso, err := adm.ListCommittedOffsets(ctx, topics...)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("verify: list last stable offsets: %w", err)
	}
	start, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = start.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("verify: list start offsets: %w", err)
	}
	var out []*Partition
	hwm.Each(func(o kadm.ListedOffset) {
		p := &Partition{Topic: o.Topic, Partition: o.Partition, HWM: o.Offset}
		if l, ok := lso.Lookup(o.Topic, o.Partition); ok {
			p.LSO = l.Offset
		}
		if s, ok := start.Lookup(o.Topic, o.Partition); ok {
			p.Start = s.Offset
		}
		out = append(out, p)
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

// read consumes every partition from its start to the last stable offset
// listed before, read_committed, and spills what each check needs.
func read(ctx context.Context, cfg Config, parts []*Partition, roles map[string][]role, rep *Report) error {
	type tp struct {
		t string
		p int32
	}
	want := map[string]map[int32]kgo.Offset{}
	byTP := map[tp]*Partition{}
	pending := 0
	for _, p := range parts {
		if p.LSO <= p.Start {
			continue
		}
		if want[p.Topic] == nil {
			want[p.Topic] = map[int32]kgo.Offset{}
		}
		want[p.Topic][p.Partition] = kgo.NewOffset().At(p.Start)
		byTP[tp{p.Topic, p.Partition}] = p
		pending++
	}
	if pending == 0 {
		return nil
	}
	cons, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Topology.Kafka.Brokers...), kgo.ClientID(cfg.Topology.Kafka.ClientID),
		kgo.ConsumePartitions(want),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// Small fetches, one at a time: records are spilled as they come,
		// so memory is what the client buffers, not what the topics hold.
		kgo.FetchMaxBytes(1 << 20),
		kgo.FetchMaxPartitionBytes(256 << 10),
		kgo.MaxConcurrentFetches(1),
	}, cfg.KafkaOptions...)...)
	if err != nil {
		return fmt.Errorf("verify: kafka consumer: %w", err)
	}
	defer cons.Close()

	done := map[tp]bool{}
	lastProgress := time.Now()
	var rec [linSize]byte
	var idRec [idSize]byte
	for len(done) < pending {
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cons.PollFetches(pollCtx)
		cancel()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("verify: read %d of %d partitions to their end: %w", len(done), pending, err)
		}
		progressed := false
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				cfg.Logger.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		var ferr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			key := tp{fp.Topic, fp.Partition}
			part := byTP[key]
			if part == nil || done[key] {
				return
			}
			for _, r := range fp.Records {
				if r.Offset >= part.LSO {
					break
				}
				progressed = true
				if r.Offset >= part.LSO-1 {
					done[key] = true
				}
				if r.Attrs.IsControl() || audit.IsMarker(r) {
					continue
				}
				rep.Records++
				for _, ro := range roles[r.Topic] {
					if err := ro.handle(r, rec[:], idRec[:], cfg.EventID); err != nil && ferr == nil {
						ferr = err
					}
				}
			}
		})
		if ferr != nil {
			return ferr
		}
		if progressed {
			lastProgress = time.Now()
		} else if time.Since(lastProgress) > cfg.IdleTimeout {
			// An aborted record right before an open transaction's start
			// is below the LSO and never returned: stop and say so.
			for k, p := range byTP {
				if !done[k] {
					p.Incomplete = true
				}
			}
			return nil
		}
	}
	return nil
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (ro role) handle(r *kgo.Record, rec, idRec []byte, field string) error {
	switch {
	case ro.stage != nil:
		return ro.stage.handle(ro.kind, r, rec, idRec, field)
	default:
		return ro.sink.handle(ro.kind, r, rec)
	}
}

func (c *StageCheck) handle(kind byte, r *kgo.Record, rec, idRec []byte, field string) error {
	switch kind {
	case kIn:
		var flags byte
		if o, ok := c.group[r.Partition]; !ok || r.Offset >= o {
			flags |= fPending
		}
		digest, ok := eventID(c.in, r, field)
		switch {
		case ok && !c.explodes:
			if err := c.ids.add(int(digest[0]), idRecord(idRec, digest, idIn)); err != nil {
				return err
			}
		case !ok:
			c.NoEventID++
		}
		return c.lineage.add(linBucket(r.Partition, r.Offset), linRecord(rec, r.Partition, r.Offset, kIn, 0, flags, digest))
	case kOut:
		if st, ok := audit.Header(r, processor.HeaderLineageStage); ok && st != c.Name {
			return nil // another stage writing the same topic
		}
		src, _ := audit.Header(r, processor.HeaderLineageTopic)
		p, errP := strconv.ParseInt(hdr(r, processor.HeaderLineagePartition), 10, 32)
		o, errO := strconv.ParseInt(hdr(r, processor.HeaderLineageOffset), 10, 64)
		idx, errI := strconv.ParseUint(hdr(r, processor.HeaderLineageIndex), 10, 32)
		if src != c.Input || errP != nil || errO != nil || errI != nil {
			if src == "" {
				c.NoLineage++
			}
			return nil
		}
		if !c.explodes {
			if digest, ok := eventID(c.out, r, field); ok {
				if err := c.ids.add(int(digest[0]), idRecord(idRec, digest, idOut)); err != nil {
					return err
				}
			}
		}
		return c.lineage.add(linBucket(int32(p), o), linRecord(rec, int32(p), o, kOut, uint32(idx), 0, [16]byte{}))
	case kDLQ:
		return addDLQ(c.Name, c.Input, c.lineage, c.DeadLettersByReason, r, rec)
	}
	return nil
}

func (c *SinkCheck) handle(kind byte, r *kgo.Record, rec []byte) error {
	switch kind {
	case kIn:
		var flags byte
		if o, ok := c.positions[r.Partition]; !ok || r.Offset >= o {
			flags |= fPending
		}
		var digest [16]byte
		if r.Value == nil && c.cfg.Postgres.Tombstones != topology.TombstonesDelete {
			flags |= fTombstone
		} else if id, ok := c.eventID(r); ok {
			digest, flags = sha(id), flags|fDigest
		}
		return c.lineage.add(linBucket(r.Partition, r.Offset), linRecord(rec, r.Partition, r.Offset, kIn, 0, flags, digest))
	case kDLQ:
		return addDLQ(c.Name, c.Input, c.lineage, c.DeadLettersByReason, r, rec)
	}
	return nil
}

func addDLQ(name, input string, lin *spill, reasons map[string]int64, r *kgo.Record, rec []byte) error {
	if st, _ := audit.Header(r, kit.HeaderStage); st != name {
		return nil
	}
	if src, _ := audit.Header(r, kit.HeaderSourceTopic); src != input {
		return nil
	}
	p, errP := strconv.ParseInt(hdr(r, kit.HeaderSourcePartition), 10, 32)
	o, errO := strconv.ParseInt(hdr(r, kit.HeaderSourceOffset), 10, 64)
	if errP != nil || errO != nil {
		return nil
	}
	reasons[hdr(r, kit.HeaderReason)]++
	return lin.add(linBucket(int32(p), o), linRecord(rec, int32(p), o, kDLQ, 0, 0, [16]byte{}))
}

func hdr(r *kgo.Record, key string) string { v, _ := audit.Header(r, key); return v }

// eventID returns the digest of the event ID field of r's value.
func eventID(codec serde.Codec, r *kgo.Record, field string) ([16]byte, bool) {
	if r.Value == nil {
		return [16]byte{}, false
	}
	v, err := codec.Decode(r.Value)
	if err != nil {
		return [16]byte{}, false
	}
	for _, name := range strings.Split(field, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return [16]byte{}, false
		}
		if v, ok = m[name]; !ok {
			return [16]byte{}, false
		}
	}
	id, ok := idText(v)
	if !ok {
		return [16]byte{}, false
	}
	return sha(id), true
}

// idText renders an event ID as the sink stores it: a string as itself, a
// number as its digits, anything else as JSON.
func idText(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "", false
	case string:
		return v, v != ""
	case json.Number:
		return string(v), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case bool:
		return strconv.FormatBool(v), true
	}
	b, err := json.Marshal(v)
	return string(b), err == nil
}

func (c *SinkCheck) eventID(r *kgo.Record) (string, bool) {
	if c.idSource == topology.SourceKey {
		return string(r.Key), len(r.Key) > 0
	}
	if strings.HasPrefix(c.idSource, "$") {
		return "", false
	}
	v, err := c.codec.Decode(r.Value)
	if err != nil {
		return "", false
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", false
	}
	return idText(m[c.idSource])
}

func sha(id string) [16]byte {
	s := sha256.Sum256([]byte(id))
	return [16]byte(s[:16])
}

func linBucket(p int32, o int64) int {
	return int((uint64(o)*0x9E3779B97F4A7C15 ^ uint64(p)*0xBF58476D1CE4E5B9) >> 58)
}

func linRecord(b []byte, p int32, o int64, kind byte, idx uint32, flags byte, digest [16]byte) []byte {
	binary.BigEndian.PutUint32(b[0:], uint32(p))
	binary.BigEndian.PutUint64(b[4:], uint64(o))
	b[12] = kind
	binary.BigEndian.PutUint32(b[13:], idx)
	b[17] = flags
	copy(b[18:34], digest[:])
	return b
}

func idRecord(b []byte, digest [16]byte, kind byte) []byte {
	copy(b[:16], digest[:])
	b[16] = kind
	return b
}

// readPositions reads the sink's stored positions; none if the sink never
// ran.
func (c *SinkCheck) readPositions(ctx context.Context, f *topology.File) error {
	stored, err := pgsink.ReadPositions(ctx, pgsink.SinkConfig(f, &c.cfg, "verify"))
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, p := range stored {
		c.positions[p.Partition] = p.NextOffset
	}
	return nil
}

func (c *SinkCheck) readRows(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, string(c.cfg.Postgres.DSN))
	if err != nil {
		return fmt.Errorf("verify: sink %s: connect to postgres: %w", c.Name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	col := pgx.Identifier{c.cfg.Postgres.EventID}.Sanitize()
	rows, err := conn.Query(ctx, "SELECT "+col+"::text FROM "+ident(c.Table))
	if err != nil {
		if pgsink.IsUndefinedTable(err) || pgsink.IsUndefinedColumn(err) {
			return nil // the sink never ran, or the table is not its
		}
		return fmt.Errorf("verify: sink %s: read table: %w", c.Name, err)
	}
	defer rows.Close()
	var rec [idSize]byte
	for rows.Next() {
		var id *string
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("verify: sink %s: read table: %w", c.Name, err)
		}
		c.Rows++
		if id == nil {
			continue
		}
		d := sha(*id)
		if err := c.ids.add(int(d[0]), idRecord(rec[:], d, idRow)); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: sink %s: read table: %w", c.Name, err)
	}
	return nil
}

func ident(qualified string) string {
	schema, name, _ := strings.Cut(qualified, ".")
	return pgx.Identifier{schema, name}.Sanitize()
}

// openTransactions marks the partitions whose last stable offset stays
// below the high watermark they had at the start for OpenTxnWait: an open
// transaction blocks every read_committed reader there.
func openTransactions(ctx context.Context, adm *kadm.Client, cfg Config, parts []*Partition) error {
	deadline := time.Now().Add(cfg.OpenTxnWait)
	topics := map[string]bool{}
	for _, p := range parts {
		topics[p.Topic] = true
	}
	for {
		lso, err := adm.ListCommittedOffsets(ctx, keys(topics)...)
		if err == nil {
			err = lso.Error()
		}
		if err != nil {
			return fmt.Errorf("verify: list last stable offsets: %w", err)
		}
		blocked := 0
		for _, p := range parts {
			l, _ := lso.Lookup(p.Topic, p.Partition)
			p.Blocked = l.Offset < p.HWM
			if p.Blocked {
				blocked++
			}
		}
		if blocked == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("verify: wait for open transactions: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *StageCheck) example(format string, args ...any) {
	if len(c.Examples) < maxExamples {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

func (c *SinkCheck) example(format string, args ...any) {
	if len(c.Examples) < maxExamples {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

// group is one source record's lineage records.
type group struct {
	p         int32
	o         int64
	in        bool
	flags     byte
	digest    [16]byte
	outs, dlq int64
	dupOuts   int64
}

func parseGroup(recs [][]byte) group {
	g := group{p: int32(binary.BigEndian.Uint32(recs[0][0:])), o: int64(binary.BigEndian.Uint64(recs[0][4:]))}
	var lastIdx uint32
	for i, r := range recs {
		switch r[12] {
		case kIn:
			g.in, g.flags = true, r[17]
			copy(g.digest[:], r[18:34])
		case kOut:
			idx := binary.BigEndian.Uint32(r[13:])
			if g.outs > 0 && i > 0 && recs[i-1][12] == kOut && idx == lastIdx {
				g.dupOuts++
			}
			g.outs++
			lastIdx = idx
		case kDLQ:
			g.dlq++
		}
	}
	return g
}

func (c *StageCheck) account(starts map[int32]int64) error {
	err := c.lineage.groups(func(recs [][]byte) error {
		g := parseGroup(recs)
		src := fmt.Sprintf("%s/%d@%d", c.Input, g.p, g.o)
		if !g.in {
			if g.o < starts[g.p] {
				return nil // below the log start: deleted by retention
			}
			c.Orphans += g.outs + g.dlq
			c.example("orphan: %d outputs and %d dead letters name %s, which is no committed input record (aborted read?)", g.outs, g.dlq, src)
			return nil
		}
		c.In++
		c.Out += g.outs
		if g.dupOuts > 0 {
			c.Duplicates += g.dupOuts
			c.example("duplicate: %s has an output written %d extra times", src, g.dupOuts)
		}
		if g.dlq > 1 {
			c.Duplicates += g.dlq - 1
			c.example("duplicate: %s was dead-lettered %d times", src, g.dlq)
		}
		switch {
		case g.outs > 0 && g.dlq > 0:
			c.OutputAndDeadLetter++
			c.example("both: %s has outputs and a dead letter", src)
		case g.outs > 0:
			c.Processed++
		case g.dlq > 0:
			c.DeadLettered++
		case g.flags&fPending != 0:
			c.Pending++
		case c.mayFilter:
			c.Filtered++
		default:
			c.Lost++
			c.example("lost: %s has no output and no dead letter, and its offset is committed", src)
		}
		return nil
	})
	if err != nil || c.explodes {
		return err
	}
	return c.ids.groups(func(recs [][]byte) error {
		var in, out int64
		for _, r := range recs {
			switch r[16] {
			case idIn:
				in++
			case idOut:
				out++
			}
		}
		if out > max(in, 1) {
			c.EventIDDuplicates += out - max(in, 1)
			c.example("duplicate: an event ID (sha256 %x) is in the outputs %d times and in the input %d times", recs[0][:8], out, in)
		}
		return nil
	})
}

func (c *SinkCheck) account(starts map[int32]int64) error {
	var rec [idSize]byte
	err := c.lineage.groups(func(recs [][]byte) error {
		g := parseGroup(recs)
		src := fmt.Sprintf("%s/%d@%d", c.Input, g.p, g.o)
		if !g.in {
			if g.o < starts[g.p] {
				return nil
			}
			c.Orphans += g.dlq
			c.example("orphan: %d dead letters name %s, which is no committed input record", g.dlq, src)
			return nil
		}
		c.In++
		if g.dlq > 1 {
			c.DeadLetterRepeats += g.dlq - 1
		}
		pending := g.flags&fPending != 0
		switch {
		case g.dlq > 0:
			c.DeadLettered++
		case g.flags&fTombstone != 0:
			c.Skipped++
		case g.flags&fDigest != 0:
			kind := idExpected
			if pending {
				kind, c.Pending = idMaybe, c.Pending+1
			}
			return c.ids.add(int(g.digest[0]), idRecord(rec[:], g.digest, kind))
		case pending:
			c.Pending++
		default:
			c.Lost++
			c.example("lost: %s has no event ID and no dead letter, below the stored position", src)
		}
		return nil
	})
	if err != nil || !c.RowsChecked {
		return err
	}
	return c.ids.groups(func(recs [][]byte) error {
		var exp, maybe, rows int64
		for _, r := range recs {
			switch r[16] {
			case idExpected:
				exp++
			case idMaybe:
				maybe++
			case idRow:
				rows++
			}
		}
		if exp > 0 {
			c.Expected++
		}
		switch {
		case exp > 0 && rows == 0:
			c.Missing++
			c.example("missing: an event ID (sha256 %x) read from %s below the stored position is not in %s", recs[0][:8], c.Input, c.Table)
		case rows > 0 && exp == 0 && maybe == 0:
			c.Extra += rows
			c.example("extra: a row of %s (event ID sha256 %x) comes from no record of %s", c.Table, recs[0][:8], c.Input)
		}
		if rows > 1 {
			c.DuplicateRows += rows - 1
			c.example("duplicate: an event ID (sha256 %x) is in %s %d times", recs[0][:8], c.Table, rows)
		}
		return nil
	})
}

func (r *Report) judge() {
	for _, c := range r.Stages {
		if n := c.Failures(); n > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("stage %s: %d lost, %d duplicated, %d event IDs duplicated, %d orphans, %d both output and dead letter",
				c.Name, c.Lost, c.Duplicates, c.EventIDDuplicates, c.Orphans, c.OutputAndDeadLetter))
		}
	}
	for _, c := range r.Sinks {
		if n := c.Failures(); n > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("sink %s: %d rows missing, %d extra, %d duplicated, %d lost, %d orphans",
				c.Name, c.Missing, c.Extra, c.DuplicateRows, c.Lost, c.Orphans))
		}
	}
	for _, p := range r.Partitions {
		if p.Blocked {
			r.Problems = append(r.Problems, fmt.Sprintf("%s/%d: an open transaction holds the last stable offset below %d", p.Topic, p.Partition, p.HWM))
		}
		if p.Incomplete {
			r.Problems = append(r.Problems, fmt.Sprintf("%s/%d: not read to its last stable offset %d", p.Topic, p.Partition, p.LSO))
		}
	}
	r.OK = len(r.Problems) == 0
}
