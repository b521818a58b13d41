package verify

import (
	"testing"

	"github.com/exactly-io/exactly/processor/internal/reset"
	"github.com/exactly-io/exactly/serde"
)

// Records a reset moved the stage past are reset-skipped, counted in the
// range that skipped them; the same records outside any range are lost,
// and one with an output is processed whatever the ranges say.
func TestStageAccountResetSkipped(t *testing.T) {
	skips := func() []ResetSkip {
		return []ResetSkip{{Skip: reset.Skip{Partition: 0, From: 1, To: 3, Target: "latest"}}}
	}
	for _, tc := range []struct {
		name        string
		skips       []ResetSkip
		mayFilter   bool
		want        StageCheck
		wantRecords int64
	}{
		{name: "skipped by a reset", skips: skips(), want: StageCheck{In: 4, Processed: 1, ResetSkipped: 2, Lost: 1}, wantRecords: 2},
		{name: "no reset logged", want: StageCheck{In: 4, Processed: 1, Lost: 3}},
		{name: "a filter stage", skips: skips(), mayFilter: true, want: StageCheck{In: 4, Processed: 1, ResetSkipped: 2, Filtered: 1}, wantRecords: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			json, _ := serde.New(serde.JSON)
			c := &StageCheck{Name: "st", Input: "in", in: json, out: json, mayFilter: tc.mayFilter,
				group: map[int32]int64{0: 4}, DeadLettersByReason: map[string]int64{}, ResetSkips: tc.skips}
			c.lineage, c.ids = newTestSpills(t)
			var rec [linSize]byte
			var idRec [idSize]byte
			// Offset 0 processed; 1 and 2 in the skipped range; 3 after it.
			for _, h := range []handled{{kIn, input(0, "a")}, {kOut, output(0, 0, "a")},
				{kIn, input(1, "b")}, {kIn, input(2, "c")}, {kIn, input(3, "d")}} {
				if err := c.handle(h.kind, h.r, rec[:], idRec[:], "id"); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.account(map[int32]int64{0: 0}); err != nil {
				t.Fatal(err)
			}
			got := StageCheck{In: c.In, Processed: c.Processed, ResetSkipped: c.ResetSkipped, Filtered: c.Filtered, Lost: c.Lost}
			if got.In != tc.want.In || got.Processed != tc.want.Processed || got.ResetSkipped != tc.want.ResetSkipped ||
				got.Filtered != tc.want.Filtered || got.Lost != tc.want.Lost {
				t.Errorf("counters:\n got %+v\nwant %+v", got, tc.want)
			}
			if len(c.ResetSkips) > 0 && c.ResetSkips[0].Records != tc.wantRecords {
				t.Errorf("range counts %d records, want %d", c.ResetSkips[0].Records, tc.wantRecords)
			}
		})
	}
}

// A sink expects no row of a record a reset skipped, and a row that a
// run before the reset wrote for it is not extra.
func TestSinkAccountResetSkipped(t *testing.T) {
	c := &SinkCheck{Name: "sk", Input: "in", Table: "t", RowsChecked: true, DeadLettersByReason: map[string]int64{},
		positions:  map[int32]int64{0: 3},
		ResetSkips: []ResetSkip{{Skip: reset.Skip{Partition: 0, From: 1, To: 3}}}}
	c.lineage, c.ids = newTestSpills(t)
	for o, id := range []string{"a", "b", "c"} {
		if err := c.addInput(0, int64(o), fDigest, sha(id)); err != nil {
			t.Fatal(err)
		}
	}
	// Rows: a (expected), b (written before the reset); none of c.
	var rec [idSize]byte
	for _, id := range []string{"a", "b"} {
		d := sha(id)
		if err := c.ids.add(int(d[0]), idRecord(rec[:], d, idRow)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.account(map[int32]int64{0: 0}); err != nil {
		t.Fatal(err)
	}
	if c.In != 3 || c.ResetSkipped != 2 || c.Missing != 0 || c.Extra != 0 || c.Lost != 0 || c.Expected != 1 {
		t.Errorf("in %d, reset-skipped %d, missing %d, extra %d, lost %d, expected %d; want 3, 2, 0, 0, 0, 1",
			c.In, c.ResetSkipped, c.Missing, c.Extra, c.Lost, c.Expected)
	}
	if c.ResetSkips[0].Records != 2 {
		t.Errorf("range counts %d records, want 2", c.ResetSkips[0].Records)
	}
}
