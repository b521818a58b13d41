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
//     explode, func or stateful step, or a join that drops a missing key
//     (the steps that may yield nothing; a
//     stateful function that emits nothing for a record, a running balance
//     that writes only on change say, still commits its state change);
//   - deduplicated: no output and no dead letter, in a stage with a dedupe
//     step, and its event ID (the --event-id field) has an output from
//     another input record: a resent duplicate that the step dropped. In a
//     stage that also has an explode or func step, event IDs are not
//     compared, and every such record counts as deduplicated;
//   - pending: no output and no dead letter, at or after the offset the
//     stage's consumer group has committed (not processed yet);
//   - reset-skipped: no output and no dead letter, in a range of offsets
//     an `exactly reset` moved the stage past, as the reset log
//     (reset.LogTopic) records it: skipped on purpose (ResetSkip);
//   - lost: none of the above.
//
// A duplicate is a (source, index) written twice, or a second dead letter of
// one source, or, in stages without explode, func or stateful steps, an event ID that
// appears in the stage's outputs more often than in its input (and more than
// once). An orphan is an output or dead letter whose source is no committed
// input record: an aborted read.
//
// For a sink, every committed input record without a dead letter (and not a
// skipped tombstone) must be a row whose event ID is the record's, and every
// row must come from such a record. Event IDs are read as the sink reads
// them and compared as the table's event ID column compares them
// (pgsink.EventIDs): 1 and 1.0 in numeric are one row, and an ID that a
// row equals by the column's own = (citext, interval, a nondeterministic
// collation) matches that row. Input at or after the stored position is
// pending: a row for it may or may not exist yet; so is input in a range a
// reset skipped, counted as reset-skipped. A sink's dead letters
// are read from its dead-letter table when it has one (exactly once: one
// row per record) and from its dead-letter topic otherwise, where they are
// at least once (see pgsink): repeated sink dead letters are reported but
// are not failures.
//
// # Deleted records
//
// Records the broker deleted before a reader of the topology read them
// are lost to it (retention.go): a position below the log start, no
// position while the log start is past 0, or a range the reader wrote to
// the reset log when it read on past it (resetlog.CauseDeletedUnread).
// On a topic that no stage or sink reads, the outputs a stage recorded as
// written past their topic's retention (resetlog.CausePastRetention) and
// since deleted are reported too.
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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/processor/internal/status"
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
	// HangingAfter reports a transaction open on a partition of the
	// topology for longer than this; 0: longer than its own transaction
	// timeout (see status.HangingTxns).
	HangingAfter time.Duration
	// IdleTimeout ends the read of a partition that returns nothing for
	// this long before reaching its read_committed end; default 10s.
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// Progress, when set, hears how far the read of the topics is: one
	// SetTotal with the offsets between every partition's start and its
	// last stable offset (its read_committed end), then Add as they are
	// read. Offsets, not records: transaction markers count as read.
	Progress Progress
}

// Progress is told how far a long read is; *progress.Reporter is one.
type Progress interface {
	SetTotal(total int64)
	Add(n int64)
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
	// HangingTransactions are the transactions open for longer than
	// Config.HangingAfter (or their timeout): each is a problem, as it
	// holds its partition's last stable offset.
	HangingTransactions []status.OpenTxn `json:"hanging_transactions"`
	Records             int64            `json:"records_read"`
	Elapsed             Duration         `json:"elapsed"`
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

	// The reset log before the positions (see readResets).
	if err := p.readResets(ctx, adm, cfg); err != nil {
		return nil, err
	}
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
	if err := p.readDeleted(ctx, adm, cfg); err != nil {
		return nil, err
	}
	if err := read(ctx, cfg, parts, p.roles, p.rep); err != nil {
		return nil, err
	}
	for _, c := range p.rep.Sinks {
		if err := c.flushKeys(ctx); err != nil {
			return nil, err
		}
	}
	if err := openTransactions(ctx, adm, cfg, parts); err != nil {
		return nil, err
	}
	hanging, err := status.HangingTxns(ctx, adm, hangingTopics(f, p.topics()), cfg.HangingAfter)
	if err != nil {
		return nil, fmt.Errorf("verify: open transactions: %w", err)
	}
	p.rep.HangingTransactions = append([]status.OpenTxn{}, hanging...)
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
	for _, c := range p.rep.Sinks {
		c.eventIDs.Close(context.Background())
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
		if err == nil {
			c.lineage, c.ids, err = p.newSpills("stage" + strconv.Itoa(i))
		}
		if err != nil {
			return err
		}
		p.rep.Stages = append(p.rep.Stages, c)
		p.addRoles(role{stage: c}, c.Input, c.Outputs, c.DeadLetter)
	}
	for i := range f.Sinks {
		c, err := newSinkCheck(f, f.Sinks[i])
		if err == nil {
			c.lineage, c.ids, err = p.newSpills("sink" + strconv.Itoa(i))
		}
		if err != nil {
			return err
		}
		p.rep.Sinks = append(p.rep.Sinks, c)
		p.addRoles(role{sink: c}, c.Input, nil, c.DeadLetter)
	}
	return nil
}

// addRoles records what the topics of r's check are to it: in its input,
// outs its outputs, dlq (unless empty: a sink's may be a table) its dead
// letters.
func (p *plan) addRoles(r role, in string, outs []string, dlq string) {
	add := func(topic string, k byte) {
		r.kind = k
		p.roles[topic] = append(p.roles[topic], r)
	}
	add(in, kIn)
	for _, o := range outs {
		add(o, kOut)
	}
	if dlq != "" {
		add(dlq, kDLQ)
	}
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
		var offs kadm.OffsetResponses
		err := backoff.RetryRetriable(ctx, 10, func() (err error) {
			offs, err = adm.FetchOffsets(ctx, "exactly-"+c.Name)
			return err
		})
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
		if c.DeadLetterTable != "" {
			if err := c.readDeadLetters(ctx); err != nil {
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
		// A Go function, stateful or not, may write no record or many.
		goFunc := s.Func != "" || s.Op() == "stateful"
		// A join with missing: drop writes nothing for a key the table
		// does not hold at the record's time.
		joinDrops := s.Op() == "join" && (s.Join.Missing == "" || s.Join.Missing == topology.JoinDrop)
		c.mayFilter = c.mayFilter || s.Filter != "" || s.Explode != "" || goFunc || joinDrops
		c.explodes = c.explodes || s.Explode != "" || goFunc
	}
	c.dedupes = st.DedupeStep() != nil
	c.aggregates = st.AggregateStep() != nil
	var err error
	if c.in, err = serde.NewCodec(reader.CodecConfig(f, st.Input)); err != nil {
		return nil, fmt.Errorf("verify: stage %s input: %w", st.Name, err)
	}
	if c.out, err = serde.NewCodec(reader.CodecConfig(f, st.Output)); err != nil {
		return nil, fmt.Errorf("verify: stage %s output: %w", st.Name, err)
	}
	return c, nil
}

func newSinkCheck(f *topology.File, sk topology.Sink) (*SinkCheck, error) {
	c := &SinkCheck{Name: sk.Name, Input: sk.Input.Topic, Table: sk.Postgres.Table, DeadLetter: sk.DeadLetter.Topic,
		DeadLetterTable: sk.DeadLetter.Table, DeadLettersByReason: map[string]int64{}, cfg: sk,
		positions: map[int32]int64{}, topicIDs: map[int32]string{}}
	idSource := sk.Postgres.Columns[sk.Postgres.EventID]
	c.RowsChecked = true
	switch {
	case sk.Postgres.Tombstones == topology.TombstonesDelete:
		c.RowsChecked, c.Note = false, "rows not compared: tombstones: delete makes the rows depend on order"
	case sk.Postgres.Envelope == topology.EnvelopeDebezium:
		c.RowsChecked, c.Note = false, "rows not compared: envelope: debezium applies changes (deletes among them)"
	case strings.HasPrefix(idSource, "$") && idSource != topology.SourceKey:
		c.RowsChecked, c.Note = false, "rows not compared: the event_id column is "+idSource
	}
	var err error
	if c.eventIDs, err = pgsink.NewEventIDs(pgsink.SinkConfig(f, &sk, "verify")); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	return c, nil
}

func ident(qualified string) string {
	schema, name, _ := strings.Cut(qualified, ".")
	return pgx.Identifier{schema, name}.Sanitize()
}

// WriteHangingTable writes the report's hanging transactions as a table;
// after is the threshold they were found with (0: their timeout).
func (r *Report) WriteHangingTable(w io.Writer, after time.Duration) error {
	return status.WriteHangingTable(w, r.HangingTransactions, after)
}
