// Package status reads the live state of a topology's stages and sinks:
// each consumer group's state, members and assignment, and each input
// partition's lag against its last stable offset (LSO), the end that a
// read_committed consumer can reach. Stages are measured from their
// group's committed offsets; sinks from the positions they store in
// Postgres, which are theirs to resume from (Kafka's offsets of a sink
// group are never committed).
//
// Everything it does is read-only.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/plural"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/topology"
)

// Report is the state of a topology.
type Report struct {
	At     time.Time `json:"at"`
	Stages []Group   `json:"stages"`
	Sinks  []Group   `json:"sinks"`
	// HangingTransactions are the transactions open on the partitions of
	// the stages and sinks reported for longer than HangingAfterMs, or
	// than their own timeout when it is 0 (see HangingTxns).
	HangingTransactions []OpenTxn `json:"hanging_transactions"`
	HangingAfterMs      int64     `json:"hanging_after_ms"`
	// Errors are what could not be read outside any one group.
	Errors []string `json:"errors,omitempty"`
}

// Group is the state of one stage's or sink's consumer group and input.
type Group struct {
	Kind       string      `json:"kind"` // "stage" or "sink"
	Name       string      `json:"name"`
	Group      string      `json:"group"`
	Topic      string      `json:"topic"`
	State      string      `json:"state"` // the group coordinator's: Stable, Empty, PreparingRebalance, Dead, ...
	Members    []Member    `json:"members"`
	Partitions []Partition `json:"partitions"`
	Lag        int64       `json:"lag"` // over all partitions
	// Changelog is the changelog topic of a stage with a stateful step
	// (dedupe, aggregate, stateful); nil for other stages and sinks.
	Changelog *Changelog `json:"changelog,omitempty"`
	Errors    []string   `json:"errors,omitempty"`
}

// RestoreMetrics names the metrics that show a running instance's restore
// progress: status reads Kafka only, and a restore runs inside a stage
// process, before its partitions' offsets are fetched.
const RestoreMetrics = "exactly_stage_state_restored_records_total / exactly_stage_state_restore_pending_records"

// Changelog is a stateful stage's changelog topic, as Kafka has it: what
// an instance that restores a partition without a usable checkpoint reads.
type Changelog struct {
	Topic string `json:"topic"`
	// Offsets is the sum over partitions of end - start: the most a full
	// restore reads (offsets, so transaction markers and records compacted
	// away count too).
	Offsets    int64                `json:"offsets"`
	Partitions []ChangelogPartition `json:"partitions"`
	// Progress names the metrics of a restore under way.
	Progress string `json:"progress"`
}

// ChangelogPartition is one changelog partition's offsets.
type ChangelogPartition struct {
	Partition int32 `json:"partition"`
	Start     int64 `json:"start_offset"`
	End       int64 `json:"end_offset"`
}

// Member is one member of a group.
type Member struct {
	MemberID   string  `json:"member_id"`
	InstanceID string  `json:"instance_id,omitempty"` // the static member ID (KIP-345)
	ClientID   string  `json:"client_id"`
	Host       string  `json:"host"`
	Partitions []int32 `json:"partitions"`
}

// Partition is one input partition.
type Partition struct {
	Partition int32 `json:"partition"`
	// LastStable is the read_committed end offset (LSO).
	LastStable int64 `json:"last_stable_offset"`
	// Committed is the stage group's committed offset, or the sink's
	// stored position; -1 when there is none (the start is used for lag).
	Committed int64 `json:"committed"`
	Lag       int64 `json:"lag"`
	// Member is the instance ID (or member ID) the partition is assigned
	// to now; empty when unassigned.
	Member string `json:"member,omitempty"`
	// For sinks: which instance stored the position, and when.
	Writer    string     `json:"writer,omitempty"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
	// Void says why a sink's stored position is not its position (the
	// topic was deleted and created again since it was stored; see
	// operating.md, "Topic identity and start positions"): the sink starts the partition over at
	// its first offset, and Committed and Lag say so. Empty otherwise.
	Void string `json:"void,omitempty"`
}

// PositionsFunc reads a sink's stored positions; the default is
// pgsink.ReadPositions.
type PositionsFunc func(ctx context.Context, cfg pgsink.Config) ([]pgsink.StoredPosition, error)

// Option configures Collect.
type Option func(*options)

type options struct {
	positions    PositionsFunc
	only         string
	hangingAfter time.Duration
}

// WithPositions replaces how sink positions are read.
func WithPositions(f PositionsFunc) Option { return func(o *options) { o.positions = f } }

// Only restricts the report to the stage or sink with this name.
func Only(name string) Option { return func(o *options) { o.only = name } }

// HangingAfter reports open transactions once they have been open for d;
// the default, 0, once they have been open longer than their timeout.
func HangingAfter(d time.Duration) Option { return func(o *options) { o.hangingAfter = d } }

// Collect reads the state of every stage and sink of f. A problem with
// one group (a missing topic, Postgres down) is recorded in its Errors;
// the error return is for a failure that leaves nothing to report.
func Collect(ctx context.Context, adm *kadm.Client, f *topology.File, opts ...Option) (*Report, error) {
	o := options{positions: pgsink.ReadPositions}
	for _, opt := range opts {
		opt(&o)
	}
	rep := newReport(f, o)
	groups := rep.groups()
	if len(groups) == 0 {
		if o.only != "" {
			return nil, fmt.Errorf("no stage or sink %q", o.only)
		}
		return rep, nil
	}
	var names, topics []string
	for _, g := range groups {
		names = append(names, g.Group)
		if !slices.Contains(topics, g.Topic) {
			topics = append(topics, g.Topic)
		}
	}
	c, err := readCluster(ctx, adm, names, topics)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		c.collect(ctx, adm, f, o, g)
	}
	txns, err := HangingTxns(ctx, adm, TxnTopics(f, o.only), o.hangingAfter)
	if err != nil {
		rep.Errors = append(rep.Errors, "open transactions: "+err.Error())
	}
	rep.HangingTransactions = append(rep.HangingTransactions, txns...)
	return rep, nil
}

// newReport is the report of f's stages and sinks (or of the one that o
// names), before anything is read.
func newReport(f *topology.File, o options) *Report {
	rep := &Report{At: time.Now().UTC(), Stages: []Group{}, Sinks: []Group{}, HangingTransactions: []OpenTxn{}, HangingAfterMs: o.hangingAfter.Milliseconds()}
	for _, st := range f.StagesInOrder() {
		if o.only != "" && st.Name != o.only {
			continue
		}
		g := Group{Kind: "stage", Name: st.Name, Group: stage.StageConfig(f, st, "").Group(), Topic: st.Input.Topic}
		if store := st.StateStore(); store != "" {
			g.Changelog = &Changelog{Topic: topology.ChangelogTopic(st.Name, store)}
		}
		rep.Stages = append(rep.Stages, g)
	}
	for i := range f.Sinks {
		sk := &f.Sinks[i]
		if o.only != "" && sk.Name != o.only {
			continue
		}
		rep.Sinks = append(rep.Sinks, Group{Kind: "sink", Name: sk.Name, Group: pgsink.SinkConfig(f, sk, "").Group(), Topic: sk.Input.Topic})
	}
	return rep
}

// groups returns the stages' groups, then the sinks'.
func (rep *Report) groups() []*Group {
	var groups []*Group
	for i := range rep.Stages {
		groups = append(groups, &rep.Stages[i])
	}
	for i := range rep.Sinks {
		groups = append(groups, &rep.Sinks[i])
	}
	return groups
}

// cluster is what Collect reads of the input topics and the groups once,
// for all of them.
type cluster struct {
	lso, start kadm.ListedOffsets // read_committed ends; starts
	described  kadm.DescribedGroups
	derr       error             // of describing the groups
	ids        map[string]string // topic -> ID
	hwm        kadm.ListedOffsets
}

func readCluster(ctx context.Context, adm *kadm.Client, names, topics []string) (*cluster, error) {
	c := &cluster{ids: map[string]string{}}
	var err error
	// read_committed ends: the LSO (ListOffsets with isolation level 1).
	if c.lso, err = adm.ListCommittedOffsets(ctx, topics...); err != nil {
		return nil, fmt.Errorf("list last stable offsets: %w", err)
	}
	if c.start, err = adm.ListStartOffsets(ctx, topics...); err != nil {
		return nil, fmt.Errorf("list start offsets: %w", err)
	}
	c.described, c.derr = adm.DescribeGroups(ctx, names...)
	// Topic IDs and high watermarks, to tell a sink's stored position
	// from one of an earlier topic of the same name.
	if md, err := adm.ListTopics(ctx, topics...); err == nil {
		for name, d := range md {
			if d.Err == nil {
				c.ids[name] = d.ID.String()
			}
		}
	}
	c.hwm, _ = adm.ListEndOffsets(ctx, topics...)
	return c, nil
}

// collect fills in g: its members, and the position and lag of each
// partition, from the group's committed offsets (a stage's) or the
// positions stored in Postgres (a sink's).
func (c *cluster) collect(ctx context.Context, adm *kadm.Client, f *topology.File, o options, g *Group) {
	if c.derr != nil {
		g.Errors = append(g.Errors, "describe group: "+c.derr.Error())
	} else if d, ok := c.described[g.Group]; ok {
		describe(g, d)
	}
	committed := map[int32]int64{}
	writers := map[int32]pgsink.StoredPosition{}
	voided := map[int32]string{}
	if g.Kind == "stage" {
		stageCommitted(ctx, adm, g, committed)
	} else {
		c.sinkCommitted(ctx, f, o, g, committed, writers, voided)
	}
	partitions(g, c.lso[g.Topic], c.start[g.Topic], committed, writers, voided)
	if g.Changelog != nil {
		changelog(ctx, adm, g)
	}
}

// stageCommitted reads the offsets stage group g committed into
// committed.
func stageCommitted(ctx context.Context, adm *kadm.Client, g *Group, committed map[int32]int64) {
	var resp kadm.OffsetResponses
	err := backoff.RetryRetriable(ctx, 10, func() (err error) {
		if resp, err = adm.FetchOffsetsForTopics(ctx, g.Group, g.Topic); err == nil {
			err = resp.Error()
		}
		return err
	})
	if err != nil {
		g.Errors = append(g.Errors, "fetch committed offsets: "+err.Error())
	}
	for p, r := range resp[g.Topic] {
		if r.Err == nil && r.At >= 0 {
			committed[p] = r.At
		}
	}
}

// sinkCommitted reads the positions sink g stored in Postgres: into
// writers each, into committed those of the current topic, into voided
// why the others are not.
func (c *cluster) sinkCommitted(ctx context.Context, f *topology.File, o options, g *Group, committed map[int32]int64, writers map[int32]pgsink.StoredPosition, voided map[int32]string) {
	sk, _ := f.Sink(g.Name)
	pos, err := o.positions(ctx, pgsink.SinkConfig(f, sk, "status"))
	if err != nil {
		g.Errors = append(g.Errors, err.Error())
	}
	for _, p := range pos {
		writers[p.Partition] = p
		if why := voidPosition(p, c.ids[g.Topic], c.hwm[g.Topic][p.Partition]); why != "" {
			voided[p.Partition] = why
			continue
		}
		committed[p.Partition] = p.NextOffset
	}
}

func describe(g *Group, d kadm.DescribedGroup) {
	if errors.Is(d.Err, kerr.GroupIDNotFound) {
		g.State = "Dead" // what Kafka itself reports for a group that does not exist
		return
	}
	if d.Err != nil {
		g.Errors = append(g.Errors, "describe group: "+d.Err.Error())
		return
	}
	g.State = d.State
	for _, m := range d.Members {
		mem := Member{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Partitions: []int32{}}
		if m.InstanceID != nil {
			mem.InstanceID = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == g.Topic {
					mem.Partitions = append(mem.Partitions, t.Partitions...)
				}
			}
		}
		slices.Sort(mem.Partitions)
		g.Members = append(g.Members, mem)
	}
}

// voidPosition says why the sink would not resume at stored position p
// of a topic whose ID is now id and whose high watermark is end, as the
// sink decides when it starts (sink.md, "Topic identity, for the sink"): the
// position was stored under another topic ID, or, with no ID stored, it
// is past the high watermark. "" when it is the sink's position.
func voidPosition(p pgsink.StoredPosition, id string, end kadm.ListedOffset) string {
	switch {
	case p.TopicID != "" && id != "" && p.TopicID != id:
		return fmt.Sprintf("stored at offset %d under topic ID %s; the topic is now %s (deleted and created again): the sink starts the partition over", p.NextOffset, p.TopicID, id)
	case p.TopicID == "" && end.Err == nil && end.Topic != "" && p.NextOffset > end.Offset:
		return fmt.Sprintf("stored at offset %d with no topic ID, past the high watermark %d (the topic was created again): the sink starts the partition over", p.NextOffset, end.Offset)
	}
	return ""
}

func partitions(g *Group, lso, start map[int32]kadm.ListedOffset, committed map[int32]int64, writers map[int32]pgsink.StoredPosition, voided map[int32]string) {
	owner := map[int32]string{}
	for _, m := range g.Members {
		name := m.InstanceID
		if name == "" {
			name = m.MemberID
		}
		for _, p := range m.Partitions {
			owner[p] = name
		}
	}
	if len(lso) == 0 {
		g.Errors = append(g.Errors, fmt.Sprintf("topic %s: no partitions (does it exist?)", g.Topic))
	}
	for p, end := range lso {
		if p < 0 || end.Err != nil {
			if end.Err != nil {
				g.Errors = append(g.Errors, fmt.Sprintf("topic %s partition %d: %v", g.Topic, p, end.Err))
			}
			continue
		}
		pt := Partition{Partition: p, LastStable: end.Offset, Committed: -1, Member: owner[p]}
		c, ok := committed[p]
		if ok {
			pt.Committed = c
		}
		pt.Lag = partpos.Lag(end.Offset, start[p].Offset, c, ok)
		if w, ok := writers[p]; ok && voided[p] == "" {
			pt.Writer = w.Owner
			at := w.UpdatedAt.UTC()
			pt.UpdatedAt = &at
		}
		pt.Void = voided[p]
		g.Lag += pt.Lag
		g.Partitions = append(g.Partitions, pt)
	}
	slices.SortFunc(g.Partitions, func(a, b Partition) int { return int(a.Partition - b.Partition) })
}

// changelog reads the offsets of g's changelog topic.
func changelog(ctx context.Context, adm *kadm.Client, g *Group) {
	c := g.Changelog
	c.Progress, c.Partitions = RestoreMetrics, []ChangelogPartition{}
	starts, err := adm.ListStartOffsets(ctx, c.Topic)
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, c.Topic)
	}
	if err == nil {
		err = errors.Join(starts.Error(), ends.Error())
	}
	if err != nil {
		g.Errors = append(g.Errors, fmt.Sprintf("changelog %s: %v", c.Topic, err))
		return
	}
	for p, e := range ends[c.Topic] {
		s := starts[c.Topic][p]
		c.Partitions = append(c.Partitions, ChangelogPartition{Partition: p, Start: s.Offset, End: e.Offset})
		c.Offsets += max(e.Offset-s.Offset, 0)
	}
	slices.SortFunc(c.Partitions, func(a, b ChangelogPartition) int { return int(a.Partition - b.Partition) })
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r as a table for people: a header line per group,
// then one line per partition.
func (r *Report) WriteTable(w io.Writer) error {
	for i, g := range slices.Concat(r.Stages, r.Sinks) {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := g.writeTable(w); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	return WriteHangingTable(w, r.HangingTransactions, time.Duration(r.HangingAfterMs)*time.Millisecond)
}

// writeTable writes g's header line, its errors, its partitions and its
// changelog's.
func (g *Group) writeTable(w io.Writer) error {
	state := g.State
	if state == "" {
		state = "unknown"
	}
	fmt.Fprintf(w, "%s %s: group %s, state %s, %s, lag %d\n", strings.ToUpper(g.Kind), g.Name, g.Group, state, plural.Count(len(g.Members), "member"), g.Lag)
	for _, e := range g.Errors {
		fmt.Fprintf(w, "  error: %s\n", e)
	}
	if err := g.writePartitions(w); err != nil {
		return err
	}
	for _, p := range g.Partitions {
		if p.Void != "" {
			fmt.Fprintf(w, "  %s/%d: position void: %s\n", g.Topic, p.Partition, p.Void)
		}
	}
	if c := g.Changelog; c != nil {
		fmt.Fprintf(w, "  changelog %s: %d offsets; a restore without a checkpoint reads up to that many (restore progress of running instances: %s)\n", c.Topic, c.Offsets, c.Progress)
		ctw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(ctw, "  CHANGELOG/PARTITION\tSTART\tEND\n")
		for _, p := range c.Partitions {
			fmt.Fprintf(ctw, "  %s/%d\t%d\t%d\n", c.Topic, p.Partition, p.Start, p.End)
		}
		return ctw.Flush()
	}
	return nil
}

// writePartitions writes the table of g's partitions.
func (g *Group) writePartitions(w io.Writer) error {
	committed := "COMMITTED"
	if g.Kind == "sink" {
		committed = "POSITION"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  TOPIC/PARTITION\tMEMBER\tLAST STABLE\t%s\tLAG\n", committed)
	for _, p := range g.Partitions {
		c := "-"
		if p.Committed >= 0 {
			c = fmt.Sprint(p.Committed)
			if p.UpdatedAt != nil {
				c += fmt.Sprintf(" (%s, %s)", p.Writer, p.UpdatedAt.Format(time.RFC3339))
			}
		}
		member := p.Member
		if member == "" {
			member = "-"
		}
		fmt.Fprintf(tw, "  %s/%d\t%s\t%d\t%s\t%d\n", g.Topic, p.Partition, member, p.LastStable, c, p.Lag)
	}
	return tw.Flush()
}

// Failed reports whether anything could not be read.
func (r *Report) Failed() bool {
	if len(r.Errors) > 0 {
		return true
	}
	for _, g := range slices.Concat(r.Stages, r.Sinks) {
		if len(g.Errors) > 0 {
			return true
		}
	}
	return false
}
