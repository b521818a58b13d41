package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
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
// opts are the client options (brokers, TLS, SASL); ReadChangelog adds the
// consumer's own.
func ReadChangelog(ctx context.Context, opts []kgo.Opt, topic string, ranges map[int32]Range, fn func(r *kgo.Record) error) (int64, error) {
	want := map[int32]int64{} // partition -> end, for partitions with records to read
	from := map[int32]kgo.Offset{}
	for p, r := range ranges {
		if r.End > r.From {
			want[p] = r.End
			from[p] = kgo.NewOffset().At(r.From)
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
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
	defer cl.Close()
	var n int64
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("read changelog %s: %d partitions not at their end: %w", topic, len(want), err)
		}
		if err := fetchError(fs); err != nil {
			return n, err
		}
		if err := applyFetched(fs, want, fn, &n); err != nil {
			return n, err
		}
	}
	return n, nil
}

// fetchError is the first error of fs other than a cancel, named by its
// topic and partition.
func fetchError(fs kgo.Fetches) error {
	var ferr error
	fs.EachError(func(t string, p int32, err error) {
		if ferr == nil && !errors.Is(err, context.Canceled) {
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

// Replay restores partitions parts from changelog topic: it reads each
// partition from its restorer in rs's From to its end in cls
// (ReadChangelog), applies every record to its partition's restorer once
// each, if not nil, returns nil, and then completes every restorer (Done)
// at that end. It returns the records read.
func Replay(ctx context.Context, opts []kgo.Opt, topic string, parts []int32, rs map[int32]Restorer, cls map[int32]ChangelogPartition,
	each func() error) (int64, error) {
	ranges := make(map[int32]Range, len(parts))
	for _, p := range parts {
		ranges[p] = Range{From: rs[p].From(), End: cls[p].End}
	}
	n, err := ReadChangelog(ctx, opts, topic, ranges, func(r *kgo.Record) error {
		if each != nil {
			if err := each(); err != nil {
				return err
			}
		}
		return rs[r.Partition].Apply(r.Offset, r.Key, r.Value)
	})
	if err != nil {
		return n, err
	}
	for _, p := range parts {
		if _, err := rs[p].Done(cls[p].End); err != nil {
			return n, err
		}
	}
	return n, nil
}
