// Package reset moves where a stage or a sink resumes: a stage's consumer
// group offsets, or a sink's positions stored in Postgres. It is `exactly
// reset`: a plan first (per partition, current -> new), then, only when
// asked, the change. Like Kafka's kafka-consumer-groups --reset-offsets, it
// refuses while the group has live members, since a running instance
// would overwrite the reset with its next commit.
package reset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/status"
)

// Target kinds.
const (
	Earliest = "earliest" // the log start offset of each partition
	Latest   = "latest"   // the last stable offset: skip every committed record there is now
	Time     = "time"     // the first offset whose timestamp is at or after Target.Time, at most the last stable offset
	Offsets  = "offsets"  // explicit offsets per partition, each at most the last stable offset; others unchanged
)

// Target is where a reset moves positions to.
type Target struct {
	Kind    string
	Time    time.Time       // Kind Time
	Offsets map[int32]int64 // Kind Offsets: partition -> next offset to read
}

// String describes t for the plan's header.
func (t Target) String() string {
	switch t.Kind {
	case Time:
		return "time " + t.Time.Format(time.RFC3339Nano)
	case Offsets:
		return "explicit offsets"
	}
	return t.Kind
}

// ParseTarget returns the target of the --to-* flags; exactly one must be
// set. datetime is RFC 3339 (2024-05-01T12:00:00Z, or with an offset);
// offsets is a comma-separated list of PARTITION=OFFSET.
func ParseTarget(earliest, latest bool, datetime, offsets string) (Target, error) {
	n := 0
	for _, set := range []bool{earliest, latest, datetime != "", offsets != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return Target{}, fmt.Errorf("%w: give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offsets", ErrUsage)
	}
	switch {
	case earliest:
		return Target{Kind: Earliest}, nil
	case latest:
		return Target{Kind: Latest}, nil
	case datetime != "":
		t, err := time.Parse(time.RFC3339Nano, datetime)
		if err != nil {
			return Target{}, fmt.Errorf("%w: --to-datetime %q: want RFC 3339, e.g. 2024-05-01T12:00:00Z", ErrUsage, datetime)
		}
		return Target{Kind: Time, Time: t}, nil
	}
	m := map[int32]int64{}
	for _, part := range strings.Split(offsets, ",") {
		ps, os, ok := strings.Cut(strings.TrimSpace(part), "=")
		p, perr := strconv.ParseInt(ps, 10, 32)
		o, oerr := strconv.ParseInt(os, 10, 64)
		if !ok || perr != nil || oerr != nil || p < 0 || o < 0 {
			return Target{}, fmt.Errorf("%w: --to-offsets %q: want PARTITION=OFFSET[,PARTITION=OFFSET...], both non-negative integers", ErrUsage, part)
		}
		if _, dup := m[int32(p)]; dup {
			return Target{}, fmt.Errorf("%w: --to-offsets: partition %d given twice", ErrUsage, p)
		}
		m[int32(p)] = o
	}
	return Target{Kind: Offsets, Offsets: m}, nil
}

// NoPosition is Change.Current of a partition with no stored position.
const NoPosition = int64(-1)

// Change is one partition of a plan.
type Change struct {
	Partition int32
	Current   int64 // NoPosition when none is stored
	New       int64
}

// Plan is what a reset changes.
type Plan struct {
	Kind    string // "stage" or "sink"
	Name    string // stage or sink name
	Group   string // consumer group
	Topic   string // input topic
	TopicID [16]byte
	Target  Target
	// Where the positions live: "consumer group <g>" or "postgres table <t>".
	Store string
	// PositionsTable is a sink's positions table.
	PositionsTable string
	Changes        []Change // by partition
	// Stable and HighWatermark are each partition's last stable offset
	// and high watermark when planned: they differ while a transaction is
	// open there.
	Stable, HighWatermark map[int32]int64
	// Open are the transactions open on the topic when planned, and
	// OpenErr what could not be read about them.
	Open    []status.OpenTxn
	OpenErr error
}

// Print writes the plan: a header line, then a table with one line per
// partition (current position, new position, and how far it moves). The
// topic ID is in base64, as Kafka's tools, the positions table and the
// dead letters' exactly.dlq.source.topic_id give it.
func (p Plan) Print(w io.Writer) {
	fmt.Fprintf(w, "%s %s: reset %s (topic ID %s) to %s, positions in %s\n",
		p.Kind, p.Name, p.Topic, kadm.TopicID(p.TopicID), p.Target, p.Store)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tCURRENT\tNEW\tMOVE")
	for _, c := range p.Changes {
		cur, move := "none", "-"
		if c.Current != NoPosition {
			cur = strconv.FormatInt(c.Current, 10)
			move = fmt.Sprintf("%+d", c.New-c.Current)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\n", c.Partition, cur, c.New, move)
	}
	_ = tw.Flush()
	p.printOpen(w)
}

// Summary is the last line of a reset: what was done, or for a dry run
// (executed false) how to do it.
func (p Plan) Summary(executed bool) string {
	n := len(p.Changes)
	if executed {
		return fmt.Sprintf("done: reset %d %s of %s %s.", n, plural(n, "partition", "partitions"), p.Kind, p.Name)
	}
	return fmt.Sprintf("dry run: nothing changed; run again with --execute to reset %d %s.", n, plural(n, "partition", "partitions"))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// CheckIdle returns an error wrapping ErrLiveMembers when group has
// members: a reset must wait until every instance is stopped. A group
// that does not exist is idle.
func CheckIdle(ctx context.Context, adm *kadm.Client, group string) error {
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("describe group %s: %w", group, err)
	}
	g, ok := described[group]
	if !ok || errors.Is(g.Err, kerr.GroupIDNotFound) {
		return nil
	}
	if g.Err != nil {
		return fmt.Errorf("describe group %s: %w", group, g.Err)
	}
	if len(g.Members) == 0 {
		return nil
	}
	ids := make([]string, 0, len(g.Members))
	for _, m := range g.Members {
		id := m.MemberID
		if m.InstanceID != nil {
			id = *m.InstanceID
		}
		ids = append(ids, id)
	}
	return fmt.Errorf("group %s is %s with %d %s (%s): %w", group, strings.ToLower(g.State), len(ids),
		plural(len(ids), "member", "members"), strings.Join(ids, ", "), ErrLiveMembers)
}

// partitionState is what the broker has for one partition of a topic: its
// log start offset, its high watermark (end) and its last stable offset
// (stable: the first offset of the oldest open transaction, or the end).
type partitionState struct{ start, end, stable int64 }

// topicState lists the partitions of topic with their log start offset,
// high watermark and last stable offset, and the topic's ID.
func topicState(ctx context.Context, adm *kadm.Client, topic string) (map[int32]partitionState, [16]byte, error) {
	var id [16]byte
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, id, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		return nil, id, fmt.Errorf("describe topic %s: %w", topic, errors.Join(td.Err, errIfNot(ok, kerr.UnknownTopicOrPartition)))
	}
	id = td.ID
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, id, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, id, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	// read_committed (isolation level 1): the last stable offset.
	stables, err := adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = stables.Error()
	}
	if err != nil {
		return nil, id, fmt.Errorf("list last stable offsets of %s: %w", topic, err)
	}
	out := make(map[int32]partitionState, len(td.Partitions))
	for p := range td.Partitions {
		s, okS := starts.Lookup(topic, p)
		e, okE := ends.Lookup(topic, p)
		l, okL := stables.Lookup(topic, p)
		if !okS || !okE || !okL {
			// A zero offset is no answer: a reset there would replay all.
			return nil, id, fmt.Errorf("list offsets of %s: partition %d: %w", topic, p, kerr.LeaderNotAvailable)
		}
		out[p] = partitionState{start: s.Offset, end: e.Offset, stable: min(l.Offset, e.Offset)}
	}
	return out, id, nil
}

func errIfNot(ok bool, err error) error {
	if ok {
		return nil
	}
	return err
}

// resolve returns the new offset of every partition that t moves. Every
// offset is at most the partition's last stable offset, a transaction
// boundary: a position above it could sit inside a transaction still
// open, whose records below the position would be skipped and those above
// it read once it commits. Below it, every transaction has ended.
func resolve(ctx context.Context, adm *kadm.Client, topic string, parts map[int32]partitionState, t Target) (map[int32]int64, error) {
	switch t.Kind {
	case Earliest, Latest:
		out := make(map[int32]int64, len(parts))
		for p, s := range parts {
			out[p] = s.start
			if t.Kind == Latest {
				out[p] = s.stable
			}
		}
		return out, nil
	case Time:
		return resolveTime(ctx, adm, topic, parts, t.Time)
	case Offsets:
		return resolveOffsets(topic, parts, t.Offsets)
	}
	return nil, fmt.Errorf("%w: unknown target %q", ErrUsage, t.Kind)
}

// resolveTime returns, for every partition, the offset of its first
// record at or after at, or its last stable offset when there is none or
// it is past it (the lookup reads uncommitted records too, so it may name
// one inside an open transaction).
func resolveTime(ctx context.Context, adm *kadm.Client, topic string, parts map[int32]partitionState, at time.Time) (map[int32]int64, error) {
	listed, err := adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s at %s: %w", topic, at.Format(time.RFC3339), err)
	}
	out := make(map[int32]int64, len(parts))
	for p, s := range parts {
		o, ok := listed.Lookup(topic, p)
		if !ok || o.Offset < 0 {
			out[p] = s.stable
			continue
		}
		out[p] = min(o.Offset, s.stable)
	}
	return out, nil
}

// resolveOffsets checks the offsets given, each within its partition's
// log and at most its last stable offset, and returns them. An offset past
// the last stable offset is refused rather than moved: it may be inside
// the open transaction, or after it, and only the user knows which they
// meant.
func resolveOffsets(topic string, parts map[int32]partitionState, offsets map[int32]int64) (map[int32]int64, error) {
	out := make(map[int32]int64, len(parts))
	var errs []error
	for p, o := range offsets {
		s, ok := parts[p]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("partition %d: %s has %d partitions", p, topic, len(parts)))
		case o < s.start || o > s.end:
			errs = append(errs, fmt.Errorf("partition %d: offset %d is outside the log [%d, %d]", p, o, s.start, s.end))
		case o > s.stable:
			errs = append(errs, fmt.Errorf("partition %d: offset %d is past the last stable offset %d, where a transaction still open starts "+
				"(a position there could split it): give at most %d, or wait until it ends (exactly status --hanging-after names it)", p, o, s.stable, s.stable))
		default:
			out[p] = o
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: --to-offsets: %w", ErrUsage, err)
	}
	return out, nil
}

// changes builds the sorted changes of news against the current positions.
func changes(news map[int32]int64, current map[int32]int64) []Change {
	out := make([]Change, 0, len(news))
	for p, n := range news {
		cur, ok := current[p]
		if !ok {
			cur = NoPosition
		}
		out = append(out, Change{Partition: p, Current: cur, New: n})
	}
	slices.SortFunc(out, func(a, b Change) int { return int(a.Partition) - int(b.Partition) })
	return out
}

// PlanStage plans the reset of the stage whose consumer group is group and
// whose input topic is topic. It changes nothing.
func PlanStage(ctx context.Context, adm *kadm.Client, stage, group, topic string, t Target) (Plan, error) {
	parts, id, err := topicState(ctx, adm, topic)
	if err != nil {
		return Plan{}, err
	}
	news, err := resolve(ctx, adm, topic, parts, t)
	if err != nil {
		return Plan{}, err
	}
	fetched, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err == nil {
		err = fetched.Error()
	}
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return Plan{}, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	current := map[int32]int64{}
	for p := range parts {
		if o, ok := fetched.Lookup(topic, p); ok && o.Err == nil && o.At >= 0 {
			current[p] = o.At
		}
	}
	p := Plan{Kind: "stage", Name: stage, Group: group, Topic: topic, TopicID: id, Target: t,
		Store: "consumer group " + group, Changes: changes(news, current)}
	p.addOpen(ctx, adm, parts)
	return p, nil
}

// ExecuteStage commits the plan's offsets for its group, with the commit
// metadata the stage writes (the input topic's ID, see CommitMetadata),
// so that the stage's next start resumes there and sees no topic change.
// kadm commits outside any generation: the broker accepts it only while
// the group has no members (otherwise UNKNOWN_MEMBER_ID), a second guard
// beside CheckIdle.
func ExecuteStage(ctx context.Context, adm *kadm.Client, p Plan) error {
	var os kadm.Offsets
	meta := CommitMetadata(p.TopicID)
	for _, c := range p.Changes {
		os.Add(kadm.Offset{Topic: p.Topic, Partition: c.Partition, At: c.New, LeaderEpoch: -1, Metadata: meta})
	}
	resp, err := adm.CommitOffsets(ctx, p.Group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", p.Group, err)
	}
	return nil
}

// CommitMetadata is the offset commit metadata the stage writes for its
// input topic, partpos.CommitMetadata: "exactly/v1 topic_id=<32 hex digits>"
// (see operating.md, "Topic identity and start positions").
func CommitMetadata(id [16]byte) string { return partpos.CommitMetadata(id) }

// PlanSink plans the reset of the sink cfg, whose positions live in its
// Postgres database. It changes nothing.
func PlanSink(ctx context.Context, adm *kadm.Client, cfg pgsink.Config, t Target) (Plan, error) {
	parts, id, err := topicState(ctx, adm, cfg.Input)
	if err != nil {
		return Plan{}, err
	}
	news, err := resolve(ctx, adm, cfg.Input, parts, t)
	if err != nil {
		return Plan{}, err
	}
	stored, err := pgsink.ReadPositions(ctx, cfg)
	if err != nil {
		return Plan{}, err
	}
	current := map[int32]int64{}
	for _, s := range stored {
		current[s.Partition] = s.NextOffset
	}
	p := Plan{Kind: "sink", Name: cfg.Sink, Group: cfg.Group(), Topic: cfg.Input, TopicID: id, Target: t,
		Store: "postgres table " + cfg.PositionsTable, PositionsTable: cfg.PositionsTable, Changes: changes(news, current)}
	p.addOpen(ctx, adm, parts)
	return p, nil
}

// ExecuteSink writes the plan's positions to the sink's positions table in
// one transaction.
func ExecuteSink(ctx context.Context, cfg pgsink.Config, p Plan) error {
	ps := make([]pgsink.StoredPosition, 0, len(p.Changes))
	id := kadm.TopicID(p.TopicID).String() // the sink stores the ID as kadm prints it
	for _, c := range p.Changes {
		ps = append(ps, pgsink.StoredPosition{Partition: c.Partition, NextOffset: c.New, TopicID: id})
	}
	return pgsink.ResetPositions(ctx, cfg, ps)
}
