// Package resetlog is the topic exactly-resets: the durable record of the
// offsets a stage or a sink did not read, and why. `exactly reset` writes
// one entry per reset executed (package reset); a stage or a sink writes
// one when it finds that the broker deleted records before it read them;
// a stage writes one when it commits outputs already older than their
// topic's retention allows. `exactly verify` reads them all: a range
// skipped by a reset is skipped on purpose, a range deleted unread is
// lost, for ever after, whatever the positions say by then.
package resetlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic is where the entries are written, one record each. One partition
// keeps them in order; no retention (retention.ms=-1) keeps them as long
// as the topics they describe. The first writer creates it when missing.
const Topic = "exactly-resets"

// Causes of an entry (Entry.Cause); "" is a reset.
const (
	// CauseDeletedUnread: the reader (Kind, Name) found its position on
	// Topic below the log start, or had none while the log start was
	// past 0: the broker deleted each partition's [From, To) before it
	// read them.
	CauseDeletedUnread = "deleted_unread"
	// CausePastRetention: the stage Name committed the outputs [From, To)
	// of each partition of Topic with timestamps older than the topic's
	// retention.ms allows: the broker may delete them before anyone reads
	// them.
	CausePastRetention = "outputs_past_retention"
)

// Entry is one record of Topic, its JSON value; its key is
// "<kind>/<name>".
type Entry struct {
	Kind  string `json:"kind"` // "stage" or "sink"
	Name  string `json:"name"`
	Group string `json:"group,omitempty"`
	// PositionsTable is a sink's positions table: two sinks of one name
	// in two files are one only when they share it.
	PositionsTable string `json:"positions_table,omitempty"`
	Topic          string `json:"topic"`
	TopicID        string `json:"topic_id"` // base64, as kadm prints it
	Target         string `json:"target,omitempty"`
	// Cause is why the offsets were not read; "" for a reset.
	Cause string `json:"cause,omitempty"`
	// At is when the reset was executed, or the entry written.
	At         time.Time   `json:"at"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition of an entry: for a reset, From is the
// position before (-1: none stored) and To the position after; otherwise
// the range [From, To) of offsets.
type Partition struct {
	Partition int32 `json:"partition"`
	From      int64 `json:"from"`
	To        int64 `json:"to"`
	// NoPosition: the reader had no stored position on the partition, so
	// the range lies below where it first started. That loses records
	// only of a topic the topology writes: an input's history deleted by
	// retention before the pipeline existed is no loss (verify judges).
	NoPosition bool `json:"no_position,omitempty"`
}

// Create creates Topic unless it exists: one partition, the broker's
// replication factor, kept forever.
func Create(ctx context.Context, adm *kadm.Client) error {
	retention := "-1"
	resp, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": &retention}, Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s (create it with one partition and retention.ms=-1, or grant CREATE on it): %w", Topic, err)
	}
	return nil
}

// Write writes e to Topic, creating the topic when missing, and fills in
// e's topic ID and time when unset. opts connect to the cluster (seed
// brokers, TLS, SASL). The record is not transactional: the caller
// writes it before it commits a position past the range, and a range
// written twice is one range to verify.
func Write(ctx context.Context, opts []kgo.Opt, e Entry) error {
	w, err := NewWriter(opts)
	if err != nil {
		return err
	}
	defer w.Close()
	return w.Write(ctx, e)
}

// Writer writes entries through one client, for a writer of many.
type Writer struct {
	cl      *kgo.Client
	created bool
}

// NewWriter returns a writer on the cluster that opts connect to.
func NewWriter(opts []kgo.Opt) (*Writer, error) {
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.DefaultProduceTopic(Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DisableIdempotentWrite())...)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", Topic, err)
	}
	return &Writer{cl: cl}, nil
}

// Close closes the writer's client.
func (w *Writer) Close() { w.cl.Close() }

// Write writes e, as the function Write does. Not safe for concurrent use.
func (w *Writer) Write(ctx context.Context, e Entry) error {
	adm := kadm.NewClient(w.cl)
	if !w.created {
		// A writer with Write on the topic but no Create still writes
		// to a topic that exists.
		err := Create(ctx, adm)
		if err != nil && !errors.Is(err, kerr.TopicAuthorizationFailed) && !errors.Is(err, kerr.ClusterAuthorizationFailed) {
			return fmt.Errorf("write %s: %w", Topic, err)
		}
		w.created = true
	}
	if e.TopicID == "" {
		tds, err := adm.ListTopics(ctx, e.Topic)
		if err != nil {
			return fmt.Errorf("write %s: describe %s: %w", Topic, e.Topic, err)
		}
		if td, ok := tds[e.Topic]; ok && td.Err == nil {
			e.TopicID = kadm.TopicID(td.ID).String()
		}
	}
	if e.At.IsZero() {
		e.At = time.Now().UTC()
	}
	value, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("write %s: %w", Topic, err)
	}
	rec := &kgo.Record{Key: []byte(e.Kind + "/" + e.Name), Value: value, Partition: 0}
	if err := w.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("write %s: %w", Topic, err)
	}
	return nil
}

// Ranges returns the ranges [From, To) of the entries of cause that are
// of's (kind, name, positions table, topic and topic ID: a topic
// re-created under the same name is another), by partition, merged where
// they overlap or touch.
func Ranges(entries []Entry, cause string, of Entry) map[int32][]Partition {
	out := map[int32][]Partition{}
	for _, e := range entries {
		if e.Cause != cause || e.Kind != of.Kind || e.Name != of.Name || e.PositionsTable != of.PositionsTable ||
			e.Topic != of.Topic || e.TopicID != of.TopicID {
			continue
		}
		for _, p := range e.Partitions {
			if p.From < p.To {
				out[p.Partition] = append(out[p.Partition], p)
			}
		}
	}
	for p, rs := range out {
		slices.SortFunc(rs, func(a, b Partition) int { return int(a.From - b.From) })
		merged := rs[:1]
		for _, r := range rs[1:] {
			// Ranges below a first start stay apart: verify drops them
			// for a topic the topology does not write.
			if last := &merged[len(merged)-1]; r.From <= last.To && r.NoPosition == last.NoPosition {
				last.To = max(last.To, r.To)
				continue
			}
			merged = append(merged, r)
		}
		out[p] = merged
	}
	return out
}

// Watch finds, in what a reader polls, the offsets the broker deleted
// before the reader got to them: for each partition it knows the next
// offset the reader expects (its stored position when assigned, 0 when
// none), and a fetch whose log start offset is past it skipped them (the
// client resumes at the log start when a position falls below it,
// silently). Safe for concurrent use.
type Watch struct {
	mu    sync.Mutex
	next  map[int32]int64
	first map[int32]bool // no stored position: starting for the first time
}

// Expect sets the next offset the reader reads of partition p: its
// stored position, or 0 when it has none (it starts at the log start,
// and whatever is below was never read by it).
func (w *Watch) Expect(p int32, next int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.next == nil {
		w.next = map[int32]int64{}
	}
	w.next[p] = next
	delete(w.first, p)
}

// ExpectFirst notes that the reader has no stored position on partition
// p: it starts at the log start, and a range below it is NoPosition.
func (w *Watch) ExpectFirst(p int32) {
	w.Expect(p, 0)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first == nil {
		w.first = map[int32]bool{}
	}
	w.first[p] = true
}

// Polled notes the records [first, last] of partition p polled from a
// fetch that gave logStart as the partition's log start, and returns the
// range deleted unread before them, if any. A partition not expected (no
// Expect since its assignment) is not judged.
func (w *Watch) Polled(p int32, logStart, first, last int64) (Partition, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	exp, ok := w.next[p]
	if !ok {
		return Partition{}, false
	}
	w.next[p] = max(exp, last+1)
	noPosition := w.first[p]
	delete(w.first, p)
	// Offsets below the log start that the reader never read; the ones
	// from first on were read (the log start can pass them after the
	// fetch).
	if to := min(logStart, first); ok && to > exp {
		return Partition{Partition: p, From: exp, To: to, NoPosition: noPosition}, true
	}
	return Partition{}, false
}

// OnlyNoPosition reports whether every range of ps lies below where its
// reader first started (Partition.NoPosition): recording them can fail
// without losing anything verify needs to judge a topic the reader's
// own history decides.
func OnlyNoPosition(ps []Partition) bool {
	for _, p := range ps {
		if !p.NoPosition {
			return false
		}
	}
	return true
}
