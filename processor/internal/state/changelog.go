package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DescribeChangelog returns, per partition of parts, what a restore needs
// to know of changelog topic before reading it: the topic ID, the log
// start and end offsets, and delete.retention.ms (0 when it cannot be
// read, a missing ACL say). A partition the topic lacks is
// ErrNoChangelogPartition.
func DescribeChangelog(ctx context.Context, opts []kgo.Opt, topic string, parts []int32) (map[int32]ChangelogPartition, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("describe changelog %s: %w", topic, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, topic)
	if err == nil {
		err = td.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("describe changelog %s: %w", topic, err)
	}
	id := td[topic].ID
	starts, ends, err := listStartsAndEnds(ctx, adm, topic)
	if err != nil {
		return nil, fmt.Errorf("describe changelog %s: list offsets: %w", topic, err)
	}
	retention := deleteRetention(ctx, adm, topic)
	out := make(map[int32]ChangelogPartition, len(parts))
	for _, p := range parts {
		s, sok := starts.Lookup(topic, p)
		e, eok := ends.Lookup(topic, p)
		if !sok || !eok {
			return nil, fmt.Errorf("describe changelog %s: partition %d: %w", topic, p, ErrNoChangelogPartition)
		}
		out[p] = ChangelogPartition{TopicID: id, Start: s.Offset, End: e.Offset, DeleteRetention: retention}
	}
	return out, nil
}

// listStartsAndEnds lists the log start and end offsets of topic.
func listStartsAndEnds(ctx context.Context, adm *kadm.Client, topic string) (starts, ends kadm.ListedOffsets, err error) {
	starts, err = adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err == nil {
		err = ends.Error()
	}
	return starts, ends, err
}

// deleteRetention is the delete.retention.ms of topic, or 0 when it
// cannot be read.
func deleteRetention(ctx context.Context, adm *kadm.Client, topic string) time.Duration {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return 0
	}
	var retention time.Duration
	for _, c := range rc.Configs {
		if c.Key == "delete.retention.ms" && c.Value != nil {
			if ms, err := strconv.ParseInt(*c.Value, 10, 64); err == nil && ms > 0 {
				retention = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return retention
}

// restoreFetchBytes bounds a restore's fetches (franz-go's default is 50
// MiB): with it a restore's memory stays small whatever the changelog's
// size, at no cost in speed (see processor/internal/statebench).
const restoreFetchBytes = 1 << 20

// Range is the offsets [From, End) of a changelog partition to read.
type Range struct{ From, End int64 }

// ReadChangelog reads the ranges of the partitions of changelog topic,
// read_committed, and calls fn with each committed record, in offset order
// within a partition. It returns the records read.
//
// End is the high watermark before the read begins, not the last stable
// offset: a transaction of the partition's previous owner may still be
// open (a crashed instance's, until a new producer with its transactional
// ID aborts it or transaction.timeout.ms passes), and its offset commit
// (KIP-447) may yet make its input offsets the ones this owner resumes
// from, so its changes must be read once it ends. Reading read_committed
// with control records kept, the read ends at the first record it is given
// at or past End, or at the record just below it: a committed record or a
// transaction's marker, which comes once the transaction ends (an aborted
// transaction's records are never given, only its marker). So the read
// waits for an open transaction and then ends exactly at End.
// From may be inside a transaction: the broker lists the aborted
// transactions that overlap a fetch, so their records are still skipped
// (KIP-98). ctx bounds the wait.
//
// The read is contiguous or fails with a *GapError: see readContiguous.
//
// opts are the client options (brokers, TLS, SASL); ReadChangelog adds the
// consumer's own.
func ReadChangelog(ctx context.Context, opts []kgo.Opt, topic string, ranges map[int32]Range, fn func(r *kgo.Record) error) (int64, error) {
	return readChangelog(ctx, opts, topic, ranges, fn, nil)
}

// readContiguous is the rule that makes a read prove it missed nothing.
// Offsets of a changelog partition have gaps that lose nothing: the
// markers of transactions, the records of aborted ones (never delivered
// read_committed) and the records compaction removed (a later record of
// the same key, or a tombstone's deletion, stands for them). Only the log
// start offset moving past an offset not yet read loses a record, by
// DeleteRecords or by retention (KIP-107): compaction never moves it.
// The broker answers a fetch below the log start offset with
// OFFSET_OUT_OF_RANGE, never with the records that remain (Kafka's
// UnifiedLog.read checks the fetch offset against logStartOffset), and the
// consumer fetches each offset from the one after the last batch it was
// given. So a read that never gets OFFSET_OUT_OF_RANGE read every record
// from its start to its end; franz-go would answer one by resuming at the
// new log start, silently, so the read asks it not to reset
// (kgo.NoResetOffset) and fails with a *GapError instead. A start below
// the log start, listed before the read, fails the same way at the first
// fetch; a checkpoint below it is refused earlier (Checkpoint.Check).
// OFFSET_OUT_OF_RANGE past the high watermark (the log truncated under the
// read, after an unclean leader election) is a gap too.

// readChangelog is ReadChangelog; onWait, if not nil, is told which open
// transactions the read waits for (see watchWaits).
func readChangelog(ctx context.Context, opts []kgo.Opt, topic string, ranges map[int32]Range, fn func(r *kgo.Record) error,
	onWait func([]Wait)) (int64, error) {
	r := NewTableReader(opts, topic)
	defer r.Close()
	return r.read(ctx, ranges, fn, onWait)
}

// TableReader reads ranges of one topic, read_committed, as ReadChangelog
// does, with one client kept across reads: a join reads its table after
// every poll, and a new client per read would cost its connections and
// metadata each time. It is not safe for concurrent use.
type TableReader struct {
	opts  []kgo.Opt
	topic string
	cl    *kgo.Client // created by the first read
	// Waiting, if set, is told which open transactions a read waits for
	// (as ReplayHooks.Waiting is).
	Waiting func([]Wait)
}

// NewTableReader returns a reader of topic with the client options opts.
// Close releases it.
func NewTableReader(opts []kgo.Opt, topic string) *TableReader {
	return &TableReader{opts: opts, topic: topic}
}

// Close closes the reader's client, if it made one.
func (t *TableReader) Close() {
	if t.cl != nil {
		t.cl.Close()
		t.cl = nil
	}
}

// Read is ReadChangelog with the reader's client.
func (t *TableReader) Read(ctx context.Context, ranges map[int32]Range, fn func(r *kgo.Record) error) (int64, error) {
	return t.read(ctx, ranges, fn, t.Waiting)
}

func (t *TableReader) read(ctx context.Context, ranges map[int32]Range, fn func(r *kgo.Record) error, onWait func([]Wait)) (int64, error) {
	topic := t.topic
	want := map[int32]int64{} // partition -> end, for partitions with records to read
	from := map[int32]kgo.Offset{}
	prog := &readProgress{next: map[int32]int64{}, end: map[int32]int64{}, at: time.Now()}
	for p, r := range ranges {
		if r.End > r.From {
			want[p] = r.End
			from[p] = kgo.NewOffset().At(r.From)
			prog.next[p], prog.end[p] = r.From, r.End
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	cl := t.cl
	if cl == nil {
		var err error
		cl, err = kgo.NewClient(append(append([]kgo.Opt(nil), t.opts...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
			kgo.ConsumeResetOffset(kgo.NoResetOffset()), // see readContiguous
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
			// Bounded fetches: a restore buffers at most one fetch per
			// broker, and decoded records take several times their bytes.
			kgo.FetchMaxBytes(restoreFetchBytes),
			kgo.FetchMaxPartitionBytes(restoreFetchBytes/2),
		)...)
		if err != nil {
			return 0, fmt.Errorf("read changelog %s: %w", topic, err)
		}
		t.cl = cl
	} else {
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
	}
	// The partitions stop being consumed when the read ends, whatever its
	// outcome: what was fetched past the ends is dropped, and the next
	// read starts each partition at its own From.
	defer func() {
		ps := make([]int32, 0, len(from))
		for p := range from {
			ps = append(ps, p)
		}
		cl.RemoveConsumePartitions(map[string][]int32{topic: ps})
	}()
	if onWait != nil {
		stop := watchWaits(ctx, kadm.NewClient(cl), topic, prog, onWait)
		defer stop()
	}
	var n int64
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("read changelog %s: %d partitions not at their end: %w", topic, len(want), err)
		}
		if err := fetchError(fs, prog); err != nil {
			return n, err
		}
		if err := applyFetched(fs, want, fn, &n); err != nil {
			return n, err
		}
		prog.update(fs, want)
	}
	return n, nil
}

// fetchError is the first error of fs other than a cancel, named by its
// topic and partition; OFFSET_OUT_OF_RANGE is a *GapError at the
// partition's next offset in prog (see readContiguous).
func fetchError(fs kgo.Fetches, prog *readProgress) error {
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		switch {
		case ferr != nil || errors.Is(err, context.Canceled):
		case errors.Is(err, kerr.OffsetOutOfRange):
			ferr = &GapError{Topic: t, Partition: p, Next: prog.nextOf(p)}
		default:
			ferr = fmt.Errorf("read changelog %s partition %d: %w", t, p, err)
		}
	})
	return ferr
}

// applyFetched calls fn with each committed record of fs below the end of
// its partition in want, counting them in n, and removes a partition from
// want once its read is over. It stops at fn's first error.
func applyFetched(fs kgo.Fetches, want map[int32]int64, fn func(r *kgo.Record) error, n *int64) error {
	var applyErr error
	fs.EachRecord(func(r *kgo.Record) {
		end, ok := want[r.Partition]
		if !ok || applyErr != nil {
			return
		}
		if r.Offset >= end {
			// Records come in offset order: everything committed
			// below end has been read. This is how a read ends whose
			// last offsets below end belong to a transaction that
			// aborted (its records are never delivered, and its
			// marker is at end or beyond).
			delete(want, r.Partition)
			return
		}
		if !r.Attrs.IsControl() {
			*n++
			applyErr = fn(r)
		}
		if r.Offset+1 >= end {
			delete(want, r.Partition)
		}
	})
	return applyErr
}

// ReplayHooks are what a caller of Replay watches, each nil if unused.
type ReplayHooks struct {
	// Each runs before each record is applied; its error ends the read.
	Each func() error
	// Waiting is told, every few seconds while the read makes no
	// progress, the open transactions it waits for (none: nil).
	Waiting func([]Wait)
}

// Replay restores partitions parts from changelog topic: it reads each
// partition from its restorer in rs's From to its end in cls
// (ReadChangelog), applies every record to its partition's restorer, and
// then completes every restorer (Done) at that end. It returns the records
// read. A read that fails keeps what each partition applied, with a
// checkpoint where it stopped (restorer.Cut): after a read that found
// records deleted before it read them (a *GapError), the restore that
// follows finds the changelog starting after that checkpoint, so it
// rebuilds the partition as lost (Checkpoint.Check), never as whole.
func Replay(ctx context.Context, opts []kgo.Opt, topic string, parts []int32, rs map[int32]Restorer, cls map[int32]ChangelogPartition,
	h ReplayHooks) (int64, error) {
	ranges := make(map[int32]Range, len(parts))
	for _, p := range parts {
		ranges[p] = Range{From: rs[p].From(), End: cls[p].End}
	}
	n, err := readChangelog(ctx, opts, topic, ranges, func(r *kgo.Record) error {
		if h.Each != nil {
			if err := h.Each(); err != nil {
				return err
			}
		}
		if ra, ok := rs[r.Partition].(recordApplier); ok {
			return ra.ApplyRecord(r)
		}
		return rs[r.Partition].Apply(r.Offset, r.Key, r.Value)
	}, h.Waiting)
	if err != nil {
		// Every partition keeps its place, not only the one a gap was
		// found in: the others' reads stopped before they could meet
		// theirs, and the next restore must judge them from where they
		// stood, not from the log start it then lists.
		errs := []error{err}
		for _, p := range parts {
			if c, ok := rs[p].(interface{ Cut() error }); ok {
				errs = append(errs, c.Cut())
			}
		}
		return n, errors.Join(errs...)
	}
	for _, p := range parts {
		if _, err := rs[p].Done(cls[p].End); err != nil {
			return n, err
		}
	}
	return n, nil
}

// readProgress is where a read stands, for the messages of a gap and the
// watch for open transactions.
type readProgress struct {
	mu   sync.Mutex
	next map[int32]int64 // partition -> offset after the last record given; only partitions still read
	end  map[int32]int64
	at   time.Time // the last time a record was given
}

// nextOf returns the next offset of partition p.
func (r *readProgress) nextOf(p int32) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next[p]
}

// update records what fs gave; partitions no longer in want are done.
func (r *readProgress) update(fs kgo.Fetches, want map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs.EachRecord(func(rec *kgo.Record) {
		if rec.Offset+1 > r.next[rec.Partition] {
			r.next[rec.Partition] = rec.Offset + 1
		}
		r.at = time.Now()
	})
	for p := range r.next {
		if _, ok := want[p]; !ok {
			delete(r.next, p)
		}
	}
}

// stalled returns the partitions still read, with their next offsets and
// ends, if no record came for at least d.
func (r *readProgress) stalled(d time.Duration) map[int32][2]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) < d || len(r.next) == 0 {
		return nil
	}
	out := make(map[int32][2]int64, len(r.next))
	for p, n := range r.next {
		out[p] = [2]int64{n, r.end[p]}
	}
	return out
}
