package state

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTableReaderReads: one reader reads successive ranges of a topic,
// each from its own start to its own end, also a range that starts
// before what an earlier read left fetched past its end, and a partition
// it had not read before.
func TestTableReaderReads(t *testing.T) {
	const topic = "customers"
	seeds, prod, ctx := changelogCluster(t, topic, 2)
	commit := func(p int32, keys ...string) {
		t.Helper()
		if err := prod.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Key: []byte(k)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
	// Partition 0: a 0, b 1, commit 2, c 3, d 4, commit 5, e 6, commit 7.
	commit(0, "a", "b")
	commit(0, "c", "d")
	commit(0, "e")
	commit(1, "x")

	tr := NewTableReader([]kgo.Opt{kgo.SeedBrokers(seeds...)}, topic)
	defer tr.Close()
	for _, tc := range []struct {
		name   string
		ranges map[int32]Range
		want   map[int32][]string
	}{
		{"first", map[int32]Range{0: {0, 2}}, map[int32][]string{0: {"a", "b"}}},
		{"next", map[int32]Range{0: {2, 5}}, map[int32][]string{0: {"c", "d"}}},
		{"again from an earlier offset", map[int32]Range{0: {1, 4}}, map[int32][]string{0: {"b", "c"}}},
		{"nothing to read", map[int32]Range{0: {7, 7}}, map[int32][]string{}},
		{"two partitions", map[int32]Range{0: {5, 8}, 1: {0, 2}}, map[int32][]string{0: {"e"}, 1: {"x"}}},
	} {
		got := map[int32][]string{}
		n, err := tr.Read(ctx, tc.ranges, func(r *kgo.Record) error {
			got[r.Partition] = append(got[r.Partition], string(r.Key))
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		total := 0
		for p, w := range tc.want {
			total += len(w)
			if !slices.Equal(got[p], w) {
				t.Errorf("%s: partition %d read %v, want %v", tc.name, p, got[p], w)
			}
		}
		if n != int64(total) || len(got) != len(tc.want) {
			t.Errorf("%s: read %d records %v, want %v", tc.name, n, got, tc.want)
		}
	}
}
