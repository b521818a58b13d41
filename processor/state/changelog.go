package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadChangelog reads partitions parts of changelog topic from their start
// to their end, read_committed, and calls fn with each committed record, in
// offset order within a partition. It returns the records read.
//
// The end is the high watermark when the read begins, not the last stable
// offset: a transaction of the partition's previous owner may still be
// open (a crashed instance's, until a new producer with its transactional
// ID aborts it or transaction.timeout.ms passes), and its offset commit
// (KIP-447) may yet make its input offsets the ones this owner resumes
// from, so its changes must be read once it ends. Reading read_committed
// with control records kept, the read ends at the first record it is given
// at or past the high watermark, or at the record just below it: a
// committed record or a transaction's marker, which comes once the
// transaction ends (an aborted transaction's records are never given,
// only its marker). So the read waits for an open transaction and then
// ends exactly at the end.
// ctx bounds the wait.
//
// opts are the client options (brokers, TLS, SASL); ReadChangelog adds the
// consumer's own.
func ReadChangelog(ctx context.Context, opts []kgo.Opt, topic string, parts []int32, fn func(r *kgo.Record) error) (int64, error) {
	if len(parts) == 0 {
		return 0, nil
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, fmt.Errorf("read changelog %s: %w", topic, err)
	}
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err == nil {
		err = ends.Error()
	}
	cl.Close()
	if err != nil {
		return 0, fmt.Errorf("read changelog %s: list offsets: %w", topic, err)
	}
	want := map[int32]int64{} // partition -> end, for partitions with records
	from := map[int32]kgo.Offset{}
	for _, p := range parts {
		s, sok := starts.Lookup(topic, p)
		e, eok := ends.Lookup(topic, p)
		if !sok || !eok {
			return 0, fmt.Errorf("read changelog %s: partition %d: %w", topic, p, ErrNoChangelogPartition)
		}
		if e.Offset > s.Offset {
			want[p] = e.Offset
			from[p] = kgo.NewOffset().At(s.Offset)
		}
	}
	if len(want) == 0 {
		return 0, nil
	}
	cl, err = kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
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
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("read changelog %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return n, ferr
		}
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
				n++
				applyErr = fn(r)
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
		})
		if applyErr != nil {
			return n, applyErr
		}
	}
	return n, nil
}
