package verify

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/plural"
	"github.com/exactly-io/exactly/processor/internal/resetlog"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/internal/status"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

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
	// Deduplicated counts inputs without output or dead letter, in a
	// stage with a dedupe step, whose event ID has an output from another
	// input: a resent duplicate the step dropped.
	Deduplicated int64 `json:"deduplicated"`
	// Aggregated counts inputs without output or dead letter in a stage
	// with an aggregate step: each went into its windows' results, which
	// are records of their own (counted in WindowResults), not one input's
	// output. Verify does not recompute the results.
	Aggregated int64 `json:"aggregated,omitempty"`
	// WindowResults counts the aggregate step's results in the outputs:
	// they carry the stage's exactly.stage header and no source headers,
	// since a window has many inputs.
	WindowResults int64 `json:"window_results,omitempty"`
	Pending       int64 `json:"pending"`
	// OutputDeleted counts inputs without output or dead letter whose
	// output or dead letter may lie below its topic's log start, deleted
	// by retention (retention.go): not lost. Whether the stage or sink
	// reading that topic read it first is checked on its side.
	OutputDeleted int64 `json:"output_deleted,omitempty"`
	// ResetSkipped counts inputs without output or dead letter in a range
	// an `exactly reset` skipped (ResetSkips): on purpose, not lost.
	ResetSkipped int64       `json:"reset_skipped"`
	ResetSkips   []ResetSkip `json:"reset_skips,omitempty"`
	// Failures.
	Lost                int64 `json:"lost"`
	Duplicates          int64 `json:"duplicates"`          // repeated (source, index) or dead letters
	EventIDDuplicates   int64 `json:"event_id_duplicates"` // IDs more often out than in
	Orphans             int64 `json:"orphans"`             // outputs of no committed input
	OutputAndDeadLetter int64 `json:"output_and_dead_letter"`
	// Information.
	NoLineage int64 `json:"no_lineage"` // outputs without lineage headers, not accounted
	// OtherIncarnation counts outputs and dead letters whose source
	// offset holds another record, by its timestamp: of an earlier
	// incarnation of a re-created input topic, not counted as the record's.
	OtherIncarnation    int64            `json:"other_incarnation,omitempty"`
	NoEventID           int64            `json:"inputs_without_event_id"`
	DeadLettersByReason map[string]int64 `json:"dead_letters_by_reason"`
	Examples            []string         `json:"examples,omitempty"`
	// DeletedUnread are the input ranges whose records were deleted
	// before the stage read them (retention.go): each is a problem.
	DeletedUnread []DeletedUnread `json:"deleted_unread,omitempty"`
	// DeletedOutputs are the ranges of outputs the stage wrote older than
	// their topic's retention allows, since deleted, of a topic that no
	// stage or sink of the topology reads (retention.go): each is a
	// problem.
	DeletedOutputs []DeletedUnread `json:"deleted_outputs,omitempty"`

	// recorded are the input ranges the stage recorded as deleted
	// unread, and pastRetention its outputs written past retention, by
	// topic, as the reset log holds them.
	recorded      map[int32][]resetlog.Partition
	pastRetention map[string]map[int32][]resetlog.Partition
	// firstKept is, for each partition of the output and dead-letter
	// topics, the lowest input offset of each input partition that an
	// output or dead letter still there names; starts are the log starts
	// of every topic read.
	firstKept map[tp]map[int32]int64
	// deletedOut is the offsets deleted below the log starts of the
	// output topics not yet taken by OutputDeleted for inputs a dedupe
	// step dropped as copies of an event whose output is gone.
	deletedOut int64
	starts     map[string]map[int32]int64

	mayFilter, explodes, dedupes, aggregates bool
	in, out                                  serde.Codec
	group                                    map[int32]int64 // committed group offsets of the input
	lineage, ids                             *spill
}

// Failures returns the number of records that break exactly-once.
func (c *StageCheck) Failures() int64 {
	return c.Lost + c.Duplicates + c.EventIDDuplicates + c.Orphans + c.OutputAndDeadLetter
}

// SinkCheck is the accounting of one Postgres sink.
type SinkCheck struct {
	Name       string `json:"name"`
	Input      string `json:"input"`
	Table      string `json:"table"`
	DeadLetter string `json:"dead_letter"`
	// DeadLetterTable is the sink's dead-letter table, read instead of
	// a topic.
	DeadLetterTable string `json:"dead_letter_table,omitempty"`
	In              int64  `json:"in"`
	Expected        int64  `json:"expected_rows"` // distinct event IDs that must be rows
	Rows            int64  `json:"rows"`
	DeadLettered    int64  `json:"dead_lettered"`
	Skipped         int64  `json:"skipped_tombstones"`
	Pending         int64  `json:"pending"`
	// ResetSkipped counts inputs without a dead letter in a range an
	// `exactly reset` skipped (ResetSkips): no row is expected of them.
	ResetSkipped int64       `json:"reset_skipped"`
	ResetSkips   []ResetSkip `json:"reset_skips,omitempty"`
	// Failures.
	Missing int64 `json:"missing_rows"`
	Extra   int64 `json:"extra_rows"`
	// InputDeleted counts rows whose input record retention deleted
	// after the sink read it (below the input's log start), and
	// DeadLetterDeleted inputs whose dead letter retention deleted from
	// the dead-letter topic: not extra, not missing. Each is bounded by
	// the offsets deleted there, so a deletion cannot hide more.
	InputDeleted      int64 `json:"rows_input_deleted,omitempty"`
	DeadLetterDeleted int64 `json:"dead_letters_deleted,omitempty"`
	DuplicateRows     int64 `json:"duplicate_rows"`
	Lost              int64 `json:"lost"` // no row possible and no dead letter
	Orphans           int64 `json:"orphans"`
	// Information.
	DeadLetterRepeats   int64            `json:"dead_letter_repeats"` // at least once by design for a topic; never for a table
	RowsChecked         bool             `json:"rows_checked"`
	Note                string           `json:"note,omitempty"`
	DeadLettersByReason map[string]int64 `json:"dead_letters_by_reason"`
	Examples            []string         `json:"examples,omitempty"`
	// DeletedUnread are the input ranges whose records were deleted
	// before the sink read them (retention.go): each is a problem.
	DeletedUnread []DeletedUnread `json:"deleted_unread,omitempty"`

	// recorded are the input ranges the sink recorded as deleted unread.
	recorded map[int32][]resetlog.Partition

	cfg topology.Sink
	// eventIDs reads an input's event ID as the sink does and gives
	// inputs and rows equal in the event ID column's type one key.
	eventIDs *pgsink.EventIDs
	// keying holds inputs whose event IDs wait for their keys from
	// Postgres, which casts them in batches (flushKeys).
	keying []keying
	// deletedIn and deletedDLQ are the offsets deleted below the log
	// starts of the input and of the dead-letter topic not yet taken
	// by InputDeleted and DeadLetterDeleted.
	deletedIn, deletedDLQ int64
	positions             map[int32]int64
	topicIDs              map[int32]string // the topic ID of each stored position ("" unknown)
	lineage, ids          *spill
}

// Failures returns the number of records or rows that break exactly-once.
func (c *SinkCheck) Failures() int64 {
	return c.Missing + c.Extra + c.DuplicateRows + c.Lost + c.Orphans
}

const maxExamples = 10

// role is what a topic is to a check.
type role struct {
	stage *StageCheck
	sink  *SinkCheck
	kind  byte
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
		c.starts = starts
		for _, o := range c.Outputs {
			c.deletedOut += sumStarts(starts[o])
		}
		if err := c.account(starts[c.Input]); err != nil {
			return err
		}
	}
	for _, c := range r.Sinks {
		c.deletedIn = sumStarts(starts[c.Input])
		if c.DeadLetterTable == "" && c.DeadLetter != "" {
			c.deletedDLQ = sumStarts(starts[c.DeadLetter])
		}
		if err := c.account(starts[c.Input]); err != nil {
			return err
		}
	}
	r.checkDeletedUnread(starts)
	r.judge()
	return nil
}

func (ro role) handle(ctx context.Context, r *kgo.Record, rec, idRec []byte, field string) error {
	switch {
	case ro.stage != nil:
		return ro.stage.handle(ro.kind, r, rec, idRec, field)
	default:
		return ro.sink.handle(ctx, ro.kind, r, rec)
	}
}

func (c *StageCheck) handle(kind byte, r *kgo.Record, rec, idRec []byte, field string) error {
	switch kind {
	case kIn:
		return c.handleInput(r, rec, idRec, field)
	case kOut:
		return c.handleOutput(r, rec, idRec, field)
	case kDLQ:
		if st, _ := audit.Header(r, deadletter.HeaderStage); st == c.Name {
			p, errP := strconv.ParseInt(hdr(r, deadletter.HeaderSourcePartition), 10, 32)
			o, errO := strconv.ParseInt(hdr(r, deadletter.HeaderSourceOffset), 10, 64)
			if src, _ := audit.Header(r, deadletter.HeaderSourceTopic); src == c.Input && errP == nil && errO == nil {
				c.kept(r, int32(p), o)
			}
		}
		return addDLQ(c.Name, c.Input, c.lineage, c.DeadLettersByReason, r, rec, deadLetterSourceTime)
	}
	return nil
}

// kept notes that output or dead letter r, of input partition p, offset
// o, is still in its topic.
func (c *StageCheck) kept(r *kgo.Record, p int32, o int64) {
	k := tp{r.Topic, r.Partition}
	if c.firstKept == nil {
		c.firstKept = map[tp]map[int32]int64{}
	}
	m := c.firstKept[k]
	if m == nil {
		m = map[int32]int64{}
		c.firstKept[k] = m
	}
	if first, ok := m[p]; !ok || o < first {
		m[p] = o
	}
}

// outputMayBeDeleted reports whether an output or dead letter of input
// partition p, offset o, may lie below the log start of a partition of
// the stage's output and dead-letter topics. A stage writes the outputs
// of one input partition in input order: below the first one still in an
// output partition, an output of an earlier input is either deleted or
// was never written there.
func (c *StageCheck) outputMayBeDeleted(p int32, o int64) bool {
	for _, topic := range append(slices.Clone(c.Outputs), c.DeadLetter) {
		for q, st := range c.starts[topic] {
			if st <= 0 {
				continue
			}
			if first, ok := c.firstKept[tp{topic, q}][p]; !ok || o < first {
				return true
			}
		}
	}
	return false
}

// handleInput spills input record r: its lineage, and its event ID.
func (c *StageCheck) handleInput(r *kgo.Record, rec, idRec []byte, field string) error {
	var flags byte
	if o, ok := c.group[r.Partition]; !ok || r.Offset >= o {
		flags |= fPending
	}
	digest, ok := eventID(c.in, r, field)
	if ok {
		flags |= fDigest
	}
	switch {
	case ok && !c.explodes:
		if err := c.ids.add(int(digest[0]), idRecord(idRec, digest, idIn)); err != nil {
			return err
		}
	case !ok:
		c.NoEventID++
	}
	linRecord(rec, r.Partition, r.Offset, kIn, 0, flags, digest)
	setLinTime(rec, inputTime(r))
	return c.lineage.add(linBucket(r.Partition, r.Offset), rec)
}

// handleOutput spills output record r of the stage, by the input its
// lineage headers name, and its event ID; an output of another stage is
// skipped, and one without lineage counted.
func (c *StageCheck) handleOutput(r *kgo.Record, rec, idRec []byte, field string) error {
	if st, ok := audit.Header(r, stage.HeaderLineageStage); ok && st != c.Name {
		return nil // another stage writing the same topic
	}
	src, _ := audit.Header(r, stage.HeaderLineageTopic)
	p, errP := strconv.ParseInt(hdr(r, stage.HeaderLineagePartition), 10, 32)
	o, errO := strconv.ParseInt(hdr(r, stage.HeaderLineageOffset), 10, 64)
	idx, errI := strconv.ParseUint(hdr(r, stage.HeaderLineageIndex), 10, 32)
	if src != c.Input || errP != nil || errO != nil || errI != nil {
		c.countUnlinked(r, src)
		return nil
	}
	if !c.explodes {
		if digest, ok := eventID(c.out, r, field); ok {
			if err := c.ids.add(int(digest[0]), idRecord(idRec, digest, idOut)); err != nil {
				return err
			}
		}
	}
	c.kept(r, int32(p), o)
	linRecord(rec, int32(p), o, kOut, uint32(idx), 0, [16]byte{})
	if ms, ok := outputSourceTime(r); ok {
		setLinTime(rec, ms)
	}
	return c.lineage.add(linBucket(int32(p), o), rec)
}

// countUnlinked counts output r, whose lineage names no input record of
// the stage (src is its source topic header): a window's result, or an
// output without lineage.
func (c *StageCheck) countUnlinked(r *kgo.Record, src string) {
	_, ofStage := audit.Header(r, stage.HeaderLineageStage)
	switch {
	case src == "" && ofStage && c.aggregates:
		c.WindowResults++
	case src == "":
		c.NoLineage++
	}
}

// keying is an input of a sink whose event ID waits for its key.
type keying struct {
	p     int32
	o     int64
	flags byte
	id    string
}

// keyBatch is how many event IDs one query to Postgres keys.
const keyBatch = 1000

func (c *SinkCheck) handle(ctx context.Context, kind byte, r *kgo.Record, rec []byte) error {
	switch kind {
	case kIn:
		var flags byte
		if o, ok := c.positions[r.Partition]; !ok || r.Offset >= o {
			flags |= fPending
		}
		if c.eventIDs.IsTombstone(r) && c.cfg.Postgres.Tombstones != topology.TombstonesDelete {
			flags |= fTombstone
		} else if id, ok := c.eventIDs.Of(r); ok && !c.eventIDs.AsText() {
			c.keying = append(c.keying, keying{p: r.Partition, o: r.Offset, flags: flags, id: id})
			if len(c.keying) >= keyBatch {
				return c.flushKeys(ctx)
			}
			return nil
		} else if ok {
			return c.addInput(r.Partition, r.Offset, flags|fDigest, sha(id))
		}
		return c.addInput(r.Partition, r.Offset, flags, [16]byte{})
	case kDLQ:
		return addDLQ(c.Name, c.Input, c.lineage, c.DeadLettersByReason, r, rec, nil)
	}
	return nil
}

func (c *SinkCheck) addInput(p int32, o int64, flags byte, digest [16]byte) error {
	var rec [linSize]byte
	return c.lineage.add(linBucket(p, o), linRecord(rec[:], p, o, kIn, 0, flags, digest))
}

// flushKeys spills the inputs waiting for their event IDs' keys. An ID
// the event ID column's type cannot read is none: the sink dead-letters
// its record.
func (c *SinkCheck) flushKeys(ctx context.Context) error {
	if len(c.keying) == 0 {
		return nil
	}
	ids := make([]string, len(c.keying))
	for i, k := range c.keying {
		ids[i] = k.id
	}
	keys, ok, err := c.eventIDs.Keys(ctx, ids)
	if err != nil {
		return fmt.Errorf("verify: sink %s: %w", c.Name, err)
	}
	for i, k := range c.keying {
		var digest [16]byte
		if ok[i] {
			digest, k.flags = sha(keys[i]), k.flags|fDigest
		}
		if err := c.addInput(k.p, k.o, k.flags, digest); err != nil {
			return err
		}
	}
	c.keying = c.keying[:0]
	return nil
}

// addDLQ spills dead letter r if it is of name reading input; sourceTime,
// when set, gives the timestamp of the record it names.
func addDLQ(name, input string, lin *spill, reasons map[string]int64, r *kgo.Record, rec []byte, sourceTime func(*kgo.Record) (int64, bool)) error {
	if st, _ := audit.Header(r, deadletter.HeaderStage); st != name {
		return nil
	}
	if src, _ := audit.Header(r, deadletter.HeaderSourceTopic); src != input {
		return nil
	}
	p, errP := strconv.ParseInt(hdr(r, deadletter.HeaderSourcePartition), 10, 32)
	o, errO := strconv.ParseInt(hdr(r, deadletter.HeaderSourceOffset), 10, 64)
	if errP != nil || errO != nil {
		return nil
	}
	reasons[hdr(r, deadletter.HeaderReason)]++
	linRecord(rec, int32(p), o, kDLQ, 0, 0, [16]byte{})
	if sourceTime != nil {
		if ms, ok := sourceTime(r); ok {
			setLinTime(rec, ms)
		}
	}
	return lin.add(linBucket(int32(p), o), rec)
}

func hdr(r *kgo.Record, key string) string { v, _ := audit.Header(r, key); return v }

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

func (c *StageCheck) account(starts map[int32]int64) error {
	err := c.lineage.groups(func(recs [][]byte) error { return c.accountRecord(starts, parseGroup(recs)) })
	if err != nil || c.explodes {
		return err
	}
	return c.ids.groups(c.accountEventID)
}

// accountRecord counts what became of one input record, g: its outputs
// and dead letters (or of the records they name, with no input).
func (c *StageCheck) accountRecord(starts map[int32]int64, g group) error {
	src := fmt.Sprintf("%s/%d@%d", c.Input, g.p, g.o)
	if !g.in {
		if g.o < starts[g.p] {
			return nil // below the log start: deleted by retention
		}
		c.Orphans += g.outs + g.dlq
		c.example("orphan: %s and %s name %s, which is no committed input record (aborted read?)", plural.Count(g.outs, "output"), plural.Count(g.dlq, "dead letter"), src)
		return nil
	}
	c.In++
	c.Out += g.outs
	c.OtherIncarnation += g.otherIncarnation
	if g.dupOuts > 0 {
		c.Duplicates += g.dupOuts
		c.example("duplicate: %s has an output written %s more", src, plural.Count(g.dupOuts, "time"))
	}
	if g.dlq > 1 {
		c.Duplicates += g.dlq - 1
		c.example("duplicate: %s was dead-lettered %s", src, plural.Count(g.dlq, "time"))
	}
	return c.accountOutcome(g, src)
}

// accountOutcome counts input g (named src) by its outcome: processed,
// dead-lettered, both, pending, deduplicated, aggregated, filtered or
// lost.
func (c *StageCheck) accountOutcome(g group, src string) error {
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
	case skippedByReset(c.ResetSkips, g.p, g.o):
		c.ResetSkipped++
	case c.dedupes && g.flags&fDigest != 0 && !c.explodes:
		// Deduplicated if its event ID has an output (judged
		// below, by event ID).
		var rec [idSize]byte
		c.Deduplicated++
		return c.ids.add(int(g.digest[0]), idRecord(rec[:], g.digest, idDropped))
	case c.aggregates:
		c.Aggregated++
	case c.mayFilter:
		c.Filtered++
	case c.outputMayBeDeleted(g.p, g.o):
		c.OutputDeleted++
	default:
		c.Lost++
		c.example("lost: %s has no output and no dead letter, and its offset is committed", src)
	}
	return nil
}

// accountEventID counts the records of one event ID: inputs dropped as
// duplicates of none, and outputs more than its inputs.
func (c *StageCheck) accountEventID(recs [][]byte) error {
	n := countIDKinds(recs)
	in, out, dropped := n[idIn], n[idOut], n[idDropped]
	if dropped > 0 && out == 0 {
		// Dropped, but no copy of the event came out: not a
		// duplicate the dedupe step removed, unless retention deleted
		// that copy from an output topic.
		c.Deduplicated -= dropped
		excused := min(dropped, c.deletedOut)
		c.deletedOut -= excused
		c.OutputDeleted += excused
		dropped -= excused
		switch {
		case dropped == 0:
		case c.mayFilter:
			c.Filtered += dropped
		default:
			c.Lost += dropped
			c.example("lost: %s of an event ID (sha256 %x) have no output and no dead letter, and no other input of that ID has an output", plural.Count(dropped, "input"), recs[0][:8])
		}
	}
	if out > max(in, 1) {
		c.EventIDDuplicates += out - max(in, 1)
		c.example("duplicate: an event ID (sha256 %x) is in the outputs %s and in the input %s", recs[0][:8], plural.Count(out, "time"), plural.Count(in, "time"))
	}
	return nil
}

func (c *SinkCheck) account(starts map[int32]int64) error {
	var rec [idSize]byte
	err := c.lineage.groups(func(recs [][]byte) error { return c.accountRecord(starts, parseGroup(recs), rec[:]) })
	if err != nil || !c.RowsChecked {
		return err
	}
	return c.ids.groups(c.accountEventID)
}

// accountRecord counts what became of one input record, g: a dead
// letter, a tombstone skipped, an event ID expected in the table (or
// maybe, when pending; spilled through rec), or lost.
func (c *SinkCheck) accountRecord(starts map[int32]int64, g group, rec []byte) error {
	src := fmt.Sprintf("%s/%d@%d", c.Input, g.p, g.o)
	if !g.in {
		if g.o < starts[g.p] {
			return nil
		}
		c.Orphans += g.dlq
		c.example("orphan: %s %s %s, which is no committed input record", plural.Count(g.dlq, "dead letter"), plural.Noun(g.dlq, "names", "name"), src)
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
	case !pending && skippedByReset(c.ResetSkips, g.p, g.o):
		// Maybe a row: one written before the reset stays.
		c.ResetSkipped++
		if g.flags&fDigest != 0 {
			return c.ids.add(int(g.digest[0]), idRecord(rec, g.digest, idMaybe))
		}
	case g.flags&fDigest != 0:
		kind := idExpected
		if pending {
			kind, c.Pending = idMaybe, c.Pending+1
		}
		return c.ids.add(int(g.digest[0]), idRecord(rec, g.digest, kind))
	case pending:
		c.Pending++
	default:
		c.Lost++
		c.example("lost: %s has no event ID and no dead letter, below the stored position", src)
	}
	return nil
}

// accountEventID compares the records of one event ID with the table's
// rows of it: missing, extra and duplicate rows.
func (c *SinkCheck) accountEventID(recs [][]byte) error {
	n := countIDKinds(recs)
	exp, maybe, rows := n[idExpected], n[idMaybe], n[idRow]
	if exp > 0 {
		c.Expected++
	}
	switch {
	case exp > 0 && rows == 0 && c.deletedDLQ > 0:
		// Its dead letter may be among those deleted.
		c.deletedDLQ--
		c.DeadLetterDeleted++
	case exp > 0 && rows == 0:
		c.Missing++
		c.example("missing: an event ID (sha256 %x) read from %s below the stored position is not in %s", recs[0][:8], c.Input, c.Table)
	case rows > 0 && exp == 0 && maybe == 0:
		// Its input record may be among those deleted.
		excused := min(rows, c.deletedIn)
		c.deletedIn -= excused
		c.InputDeleted += excused
		if extra := rows - excused; extra > 0 {
			c.Extra += extra
			c.example("extra: a row of %s (event ID sha256 %x) comes from no record of %s", c.Table, recs[0][:8], c.Input)
		}
	}
	if rows > 1 {
		c.DuplicateRows += rows - 1
		c.example("duplicate: an event ID (sha256 %x) is in %s %s", recs[0][:8], c.Table, plural.Count(rows, "time"))
	}
	return nil
}

func (r *Report) judge() {
	for _, c := range r.Stages {
		if n := c.Failures(); n > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("stage %s: %d lost, %d duplicated, %s duplicated, %s, %d both output and dead letter",
				c.Name, c.Lost, c.Duplicates, plural.Count(c.EventIDDuplicates, "event ID"), plural.Count(c.Orphans, "orphan"), c.OutputAndDeadLetter))
		}
	}
	for _, c := range r.Sinks {
		if n := c.Failures(); n > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("sink %s: %s missing, %d extra, %d duplicated, %d lost, %s",
				c.Name, plural.Count(c.Missing, "row"), c.Extra, c.DuplicateRows, c.Lost, plural.Count(c.Orphans, "orphan")))
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
	for _, t := range r.HangingTransactions {
		r.Problems = append(r.Problems, HangingProblem(t))
	}
	r.OK = len(r.Problems) == 0
}

// HangingProblem says what is wrong with the hanging transaction t.
func HangingProblem(t status.OpenTxn) string {
	id := t.TransactionalID
	if id == "" {
		id = "(unknown)"
	}
	timeout := "unknown"
	if t.TimeoutMs > 0 {
		timeout = t.Timeout().String()
	}
	return fmt.Sprintf("%s/%d: transaction %s (producer ID %d) open for %s (timeout %s, %s) holds the last stable offset at %d",
		t.Topic, t.Partition, id, t.ProducerID, t.Open().Round(time.Second), timeout, t.Reason, t.StartOffset)
}

// sumStarts is the number of offsets below the log starts of a topic's
// partitions: deleted, records and transaction markers alike.
func sumStarts(starts map[int32]int64) int64 {
	var n int64
	for _, st := range starts {
		n += st
	}
	return n
}
