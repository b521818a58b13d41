package state

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// gapChangelog writes n committed transactions of one large record each
// to partition 0 of topic (record 2i, its commit marker 2i+1), so that a
// restore's bounded fetch holds one record at a time and a deletion can
// land between two fetches. It returns the client options and an admin.
func gapChangelog(t *testing.T, topic string, n int) ([]kgo.Opt, *kadm.Client, context.Context) {
	t.Helper()
	seeds, prod, ctx := changelogCluster(t, topic, 1)
	// Random bytes: the producer's compression leaves them large.
	big := make([]byte, restoreFetchBytes*45/100)
	_, _ = rand.New(rand.NewSource(1)).Read(big)
	for i := range n {
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "id-%d", i), Value: append([]byte(nil), big...)}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	return opts, kadm.NewClient(prod), ctx
}

func deleteBefore(t *testing.T, ctx context.Context, adm *kadm.Client, topic string, off int64) {
	t.Helper()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: off})
	rs, err := adm.DeleteRecords(ctx, os)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadChangelogContiguous: a read proves it read every record from
// its start to its end. Records deleted before it reads them (the log
// start offset passing the next offset to read, during the read or before
// it) are a *GapError, which is ErrStateLost; a read that starts at the
// log start, or whose deletion passes only what it already read, is whole
// although its offsets have gaps (markers).
func TestReadChangelogContiguous(t *testing.T) {
	const topic = "exactly-s-dedupe-changelog"
	opts, adm, ctx := gapChangelog(t, topic, 10) // offsets 0..19, end 20

	read := func(from int64, during func(r *kgo.Record)) ([]int64, error) {
		var got []int64
		_, err := ReadChangelog(ctx, opts, topic, map[int32]Range{0: {from, 20}}, func(r *kgo.Record) error {
			got = append(got, r.Offset)
			if during != nil {
				during(r)
			}
			return nil
		})
		return got, err
	}
	gapAt := func(t *testing.T, err error, below int64) {
		t.Helper()
		var gap *GapError
		if !errors.As(err, &gap) || !errors.Is(err, ErrStateLost) {
			t.Fatalf("read over deleted records: %v, want a GapError (ErrStateLost)", err)
		}
		if gap.Partition != 0 || gap.Next >= below {
			t.Fatalf("gap %+v: want partition 0, next below %d", gap, below)
		}
	}

	t.Run("deletion behind the read", func(t *testing.T) {
		// Deleting what was read already loses nothing.
		got, err := read(0, func(r *kgo.Record) {
			if r.Offset == 4 {
				deleteBefore(t, ctx, adm, topic, 4)
			}
		})
		if err != nil || len(got) != 10 {
			t.Fatalf("read %v, %v; want all 10 records", got, err)
		}
	})
	t.Run("deletion during the read", func(t *testing.T) {
		got, err := read(4, func(r *kgo.Record) {
			if r.Offset == 4 {
				deleteBefore(t, ctx, adm, topic, 16)
			}
		})
		gapAt(t, err, 16)
		for _, o := range got {
			if o >= 16 {
				t.Fatalf("read %v: went on past the deletion", got)
			}
		}
	})
	t.Run("start below the log start", func(t *testing.T) {
		_, err := read(8, nil)
		gapAt(t, err, 9)
	})
	t.Run("start at the log start", func(t *testing.T) {
		got, err := read(16, nil)
		if err != nil || len(got) != 2 || got[0] != 16 {
			t.Fatalf("read %v, %v; want offsets 16 18", got, err)
		}
	})
}

// TestRestoreGapIsLost: a restore whose changelog loses records under it
// fails, and the restore after it rebuilds the partition as lost (the
// "partition state lost" path), never as whole, even when the first had
// no checkpoint to resume.
func TestRestoreGapIsLost(t *testing.T) {
	const topic = "exactly-s-stateful-changelog"
	opts, adm, ctx := gapChangelog(t, topic, 10)
	d := NewKV(openDB(t))
	restore := func(each func(n int)) (Restorer, error) {
		t.Helper()
		cls, err := DescribeChangelog(ctx, opts, topic, []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		r, err := d.Restore(0, cls[0], time.Now())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		_, err = Replay(ctx, opts, topic, []int32{0}, map[int32]Restorer{0: r}, cls, ReplayHooks{Each: func() error {
			n++
			if each != nil {
				each(n)
			}
			return nil
		}})
		return r, err
	}
	// A fresh restore (no checkpoint) from the log start at 0: records
	// below 10 are deleted after its first record.
	r, err := restore(func(n int) {
		if n == 1 {
			deleteBefore(t, ctx, adm, topic, 10)
		}
	})
	if !errors.Is(err, ErrStateLost) {
		t.Fatalf("restore over deleted records: %v, want ErrStateLost", err)
	}
	if r.Lost() {
		t.Fatal("a first restore without a checkpoint reads as lost before it read anything")
	}
	if _, ok := d.Size()[0]; ok {
		t.Fatal("partition usable after a cut restore")
	}
	r, err = restore(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Lost() || r.Rebuild() == "" {
		t.Fatalf("restore after the gap: lost %v (%q), want lost", r.Lost(), r.Rebuild())
	}
}

// TestReadChangelogNamesOpenTransaction: a read held by another
// producer's open transaction says which one, with its first offset,
// producer ID and transactional ID, and says nothing once it ends.
func TestReadChangelogNamesOpenTransaction(t *testing.T) {
	const topic = "exactly-s-dedupe-changelog"
	seeds, prod, ctx := changelogCluster(t, topic, 1)
	old := waitCheckEvery
	waitCheckEvery = 50 * time.Millisecond
	t.Cleanup(func() { waitCheckEvery = old })

	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("open"), Value: []byte("1")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waits := make(chan []Wait, 100)
	done := make(chan error, 1)
	go func() {
		_, err := readChangelog(ctx, []kgo.Opt{kgo.SeedBrokers(seeds...)}, topic, map[int32]Range{0: {0, 1}},
			func(*kgo.Record) error { return nil }, func(ws []Wait) { waits <- ws })
		done <- err
	}()
	var ws []Wait
	select {
	case ws = <-waits:
	case err := <-done:
		t.Fatalf("read ended while the transaction was open: %v", err)
	case <-ctx.Done():
		t.Fatal("the read never named the transaction it waits for")
	}
	if len(ws) != 1 || ws[0].Partition != 0 || ws[0].Offset != 0 || ws[0].TransactionalID != "owner" || ws[0].ProducerID < 0 {
		t.Fatalf("waits %+v; want the owner's transaction at offset 0", ws)
	}
	if s := ws[0].String(); !strings.Contains(s, "waiting for an open transaction at offset 0") || !strings.Contains(s, `"owner"`) {
		t.Fatalf("wait reads %q", s)
	}
	if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRebuildCutBeforeItsFirstBatchIsLost: a rebuild that never applied a
// batch (the process was killed at once) leaves a checkpoint at the log
// start it began from, so records deleted before the next restore are
// lost state there too, not a silent rebuild from the later log start.
func TestRebuildCutBeforeItsFirstBatchIsLost(t *testing.T) {
	const topic = "exactly-s-stateful-changelog"
	opts, adm, ctx := gapChangelog(t, topic, 4)
	d := NewKV(openDB(t))
	restore := func() Restorer {
		t.Helper()
		cls, err := DescribeChangelog(ctx, opts, topic, []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		r, err := d.Restore(0, cls[0], time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := restore(); r.Lost() || r.From() != 0 {
		t.Fatalf("first restore: lost %v from %d; want a rebuild from 0", r.Lost(), r.From())
	}
	// Killed here: nothing applied, nothing done.
	deleteBefore(t, ctx, adm, topic, 4)
	if r := restore(); !r.Lost() {
		t.Fatalf("restore after records were deleted under a cut rebuild: %q, want lost", r.Rebuild())
	}
}
