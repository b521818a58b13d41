package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// changelogCluster starts a kfake cluster with topic in partitions
// partitions and returns its seeds, a transactional producer that writes
// to the partition set on each record, and a context bounding the test.
func changelogCluster(t *testing.T, topic string, partitions int32) ([]string, *kgo.Client, context.Context) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seeds := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID("owner"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	return seeds, prod, ctx
}

// TestReadChangelog: committed records are read in order to the end;
// aborted ones are not; a partition without records ends at once.
func TestReadChangelog(t *testing.T) {
	const topic = "exactly-s-dedupe-changelog"
	seeds, prod, ctx := changelogCluster(t, topic, 3)
	txn := func(commit bool, p int32, keys ...string) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(k), Value: []byte(strconv.Itoa(len(k)))}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn(true, 0, "a", "bb")
	txn(false, 0, "aborted")
	txn(true, 0, "ccc")
	txn(true, 1, "d")
	txn(false, 1, "aborted-last") // the partition ends on an abort marker

	got := map[int32][]string{}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	cls, err := DescribeChangelog(ctx, opts, topic, []int32{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	ranges := map[int32]Range{}
	for p, cl := range cls {
		if cl.TopicID == ([16]byte{}) {
			t.Errorf("partition %d: no topic ID", p)
		}
		ranges[p] = Range{cl.Start, cl.End}
	}
	n, err := ReadChangelog(ctx, opts, topic, ranges, func(r *kgo.Record) error {
		got[r.Partition] = append(got[r.Partition], string(r.Key))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int32][]string{0: {"a", "bb", "ccc"}, 1: {"d"}}
	if n != 4 || len(got) != 2 || !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
		t.Fatalf("read %d: %v, want %v", n, got, want)
	}

	// Offsets of partition 0: a 0, bb 1, commit 2, aborted 3, abort 4,
	// ccc 5, commit 6. A read may start anywhere, inside an aborted
	// transaction too (a checkpoint), and still skips it.
	for _, tc := range []struct {
		from int64
		want []string
	}{{1, []string{"bb", "ccc"}}, {3, []string{"ccc"}}, {6, nil}, {7, nil}} {
		t.Run(fmt.Sprintf("from %d", tc.from), func(t *testing.T) {
			var got []string
			_, err := ReadChangelog(ctx, opts, topic, map[int32]Range{0: {tc.from, 7}}, func(r *kgo.Record) error {
				got = append(got, string(r.Key))
				return nil
			})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("read from %d: %v, %v; want %v", tc.from, got, err, tc.want)
			}
		})
	}

	t.Run("missing partition", func(t *testing.T) {
		_, err := DescribeChangelog(ctx, opts, topic, []int32{7})
		if !errors.Is(err, ErrNoChangelogPartition) {
			t.Fatal("read of a partition the topic lacks: no error")
		}
	})
}

// TestReadChangelogOpenTransactionAborts: the read begins while a
// transaction of the partition's previous owner is open; the transaction
// then aborts. Its records lie below the high watermark the read aims at
// and are never delivered, and its marker lies at that mark: the read
// must end on the marker, with the committed records, not wait on.
func TestReadChangelogOpenTransactionAborts(t *testing.T) {
	const topic = "exactly-s-dedupe-changelog"
	seeds, prod, ctx := changelogCluster(t, topic, 1)
	produce := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("1")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce("kept")
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce("open-1", "open-2") // open when the read begins

	type result struct {
		keys []string
		n    int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var keys []string
		opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
		d, err := DescribeChangelog(ctx, opts, topic, []int32{0})
		if err != nil {
			done <- result{err: err}
			return
		}
		n, err := ReadChangelog(ctx, opts, topic, map[int32]Range{0: {d[0].Start, d[0].End}}, func(r *kgo.Record) error {
			keys = append(keys, string(r.Key))
			return nil
		})
		done <- result{keys, n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("read ended while the transaction was open: %+v", r)
	case <-time.After(500 * time.Millisecond): // the read waits for the open transaction
	}
	if err := prod.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != 1 || !slices.Equal(r.keys, []string{"kept"}) {
			t.Fatalf("read %d %q, %v; want 1 [kept]", r.n, r.keys, r.err)
		}
	case <-ctx.Done():
		t.Fatal("read did not end after the open transaction aborted")
	}
}
