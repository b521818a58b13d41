package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// TestSpillGroups: every record added comes back once, in a group of
// records with an equal key, and groups of one bucket come in key order.
func TestSpillGroups(t *testing.T) {
	s, err := newSpill(t.TempDir(), "t", 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	want := map[string]int{}
	for i := range 1000 {
		key := uint16(i * 7919 % 300) // 300 keys, most of them repeated
		rec := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, key), uint16(i))
		if err := s.add(int(key), rec); err != nil {
			t.Fatal(err)
		}
		want[string(rec)]++
	}
	seen := map[uint16]bool{}
	var last []byte
	err = s.groups(func(recs [][]byte) error {
		key := binary.BigEndian.Uint16(recs[0])
		if seen[key] {
			return fmt.Errorf("key %d in two groups", key)
		}
		seen[key] = true
		if last != nil && int(binary.BigEndian.Uint16(last))%buckets == int(key)%buckets && bytes.Compare(last, recs[0][:2]) >= 0 {
			return fmt.Errorf("key %d after %d in one bucket", key, binary.BigEndian.Uint16(last))
		}
		last = slices.Clone(recs[0][:2])
		for _, r := range recs {
			if binary.BigEndian.Uint16(r) != key {
				return fmt.Errorf("record %x in the group of key %d", r, key)
			}
			want[string(r)]--
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 300 {
		t.Errorf("%d groups, want 300", len(seen))
	}
	for r, n := range want {
		if n != 0 {
			t.Errorf("record %x: %d left over", r, n)
		}
	}
}

func TestParseGroup(t *testing.T) {
	var b [5][linSize]byte
	digest := sha("e1")
	recs := [][]byte{
		linRecord(b[0][:], 3, 42, kIn, 0, fPending|fDigest, digest),
		linRecord(b[1][:], 3, 42, kOut, 0, 0, [16]byte{}),
		linRecord(b[2][:], 3, 42, kOut, 0, 0, [16]byte{}), // the same index again: a duplicate
		linRecord(b[3][:], 3, 42, kOut, 1, 0, [16]byte{}),
		linRecord(b[4][:], 3, 42, kDLQ, 0, 0, [16]byte{}),
	}
	g := parseGroup(recs)
	want := group{p: 3, o: 42, in: true, flags: fPending | fDigest, digest: digest, outs: 3, dlq: 1, dupOuts: 1}
	if g != want {
		t.Errorf("parseGroup = %+v, want %+v", g, want)
	}
}

func TestIDText(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
		ok   bool
	}{
		{nil, "", false},
		{"", "", false},
		{"abc", "abc", true},
		{json.Number("12.50"), "12.50", true},
		{int64(-7), "-7", true},
		{true, "true", true},
		{map[string]any{"a": "b"}, `{"a":"b"}`, true},
	} {
		t.Run(fmt.Sprint(tc.v), func(t *testing.T) {
			got, ok := idText(tc.v)
			if got != tc.want || ok != tc.ok {
				t.Errorf("idText(%#v) = %q, %v; want %q, %v", tc.v, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestLinBucketInRange(t *testing.T) {
	for p := int32(0); p < 8; p++ {
		for o := int64(0); o < 5000; o += 7 {
			if b := linBucket(p, o); b < 0 || b >= buckets {
				t.Fatalf("linBucket(%d, %d) = %d, want [0, %d)", p, o, b, buckets)
			}
		}
	}
}

// stage records for the accounting tests: topic in, partition 0.
func input(offset int64, id string) *kgo.Record {
	return &kgo.Record{Topic: "in", Offset: offset, Value: []byte(`{"id":"` + id + `"}`)}
}

func output(offset int64, index int, id string) *kgo.Record {
	return &kgo.Record{Topic: "out", Value: []byte(`{"id":"` + id + `"}`), Headers: []kgo.RecordHeader{
		{Key: stage.HeaderLineageStage, Value: []byte("st")},
		{Key: stage.HeaderLineageTopic, Value: []byte("in")},
		{Key: stage.HeaderLineagePartition, Value: []byte("0")},
		{Key: stage.HeaderLineageOffset, Value: []byte(strconv.FormatInt(offset, 10))},
		{Key: stage.HeaderLineageIndex, Value: []byte(strconv.Itoa(index))},
	}}
}

func deadLetter(name string, offset int64) *kgo.Record {
	return &kgo.Record{Topic: "dlq", Headers: []kgo.RecordHeader{
		{Key: deadletter.HeaderReason, Value: []byte(deadletter.ReasonDecode)},
		{Key: deadletter.HeaderStage, Value: []byte(name)},
		{Key: deadletter.HeaderSourceTopic, Value: []byte("in")},
		{Key: deadletter.HeaderSourcePartition, Value: []byte("0")},
		{Key: deadletter.HeaderSourceOffset, Value: []byte(strconv.FormatInt(offset, 10))},
	}}
}

type handled struct {
	kind byte
	r    *kgo.Record
}

func newTestSpills(t *testing.T) (*spill, *spill) {
	t.Helper()
	dir := t.TempDir()
	l, err := newSpill(dir, "lin", linSize, linKey)
	if err != nil {
		t.Fatal(err)
	}
	i, err := newSpill(dir, "ids", idSize, idKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.close(); i.close() })
	return l, i
}

// accountedStage returns the check of stage "st" (JSON in and out, input
// "in"), with a filter or a dedupe step as mayFilter and dedupes say,
// after it handled recs and accounted them with committed as its group's
// offset of partition 0.
func accountedStage(t *testing.T, committed int64, mayFilter, dedupes bool, recs []handled) *StageCheck {
	t.Helper()
	json, _ := serde.New(serde.JSON)
	c := &StageCheck{Name: "st", Input: "in", in: json, out: json, mayFilter: mayFilter, dedupes: dedupes,
		group: map[int32]int64{0: committed}, DeadLettersByReason: map[string]int64{}}
	c.lineage, c.ids = newTestSpills(t)
	var rec [linSize]byte
	var idRec [idSize]byte
	for _, h := range recs {
		if err := c.handle(h.kind, h.r, rec[:], idRec[:], "id"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.account(map[int32]int64{0: 0}); err != nil {
		t.Fatal(err)
	}
	return c
}

// A window result carries the stage's name and no source: it is counted
// apart, and its inputs as aggregated. In a stage without an aggregate
// step, the same record is an output without lineage.
func TestStageAccountWindowResults(t *testing.T) {
	result := &kgo.Record{Topic: "out", Value: []byte(`{"key":"c-1","window":{},"results":{"n":1}}`),
		Headers: []kgo.RecordHeader{{Key: stage.HeaderLineageStage, Value: []byte("st")}}}
	for _, tc := range []struct {
		name       string
		aggregates bool
		want       StageCheck
	}{
		{"aggregate", true, StageCheck{In: 1, Aggregated: 1, WindowResults: 1}},
		{"no aggregate", false, StageCheck{In: 1, Lost: 1, NoLineage: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			json, _ := serde.New(serde.JSON)
			c := &StageCheck{Name: "st", Input: "in", in: json, out: json, aggregates: tc.aggregates,
				group: map[int32]int64{0: 1}, DeadLettersByReason: map[string]int64{}}
			c.lineage, c.ids = newTestSpills(t)
			var rec [linSize]byte
			var idRec [idSize]byte
			for _, r := range []struct {
				kind byte
				r    *kgo.Record
			}{{kIn, input(0, "a")}, {kOut, result}} {
				if err := c.handle(r.kind, r.r, rec[:], idRec[:], "id"); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.account(map[int32]int64{0: 0}); err != nil {
				t.Fatal(err)
			}
			got := StageCheck{In: c.In, Aggregated: c.Aggregated, WindowResults: c.WindowResults, Lost: c.Lost, NoLineage: c.NoLineage}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("counters:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestStageAccount(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed int64 // the group's committed offset of partition 0
		mayFilter bool
		recs      []handled
		want      StageCheck // the counters compared
	}{
		{"processed", 1, false, []handled{{kIn, input(0, "a")}, {kOut, output(0, 0, "a")}},
			StageCheck{In: 1, Processed: 1, Out: 1}},
		{"exploded", 1, false, []handled{{kIn, input(0, "a")}, {kOut, output(0, 0, "a")}, {kOut, output(0, 1, "b")}},
			StageCheck{In: 1, Processed: 1, Out: 2}},
		{"dead-lettered", 1, false, []handled{{kIn, input(0, "a")}, {kDLQ, deadLetter("st", 0)}},
			StageCheck{In: 1, DeadLettered: 1}},
		{"another stage's dead letter is not ours", 1, false, []handled{{kIn, input(0, "a")}, {kDLQ, deadLetter("other", 0)}},
			StageCheck{In: 1, Lost: 1}},
		{"pending at the committed offset", 0, false, []handled{{kIn, input(0, "a")}},
			StageCheck{In: 1, Pending: 1}},
		{"filtered", 1, true, []handled{{kIn, input(0, "a")}},
			StageCheck{In: 1, Filtered: 1}},
		{"lost below the committed offset", 1, false, []handled{{kIn, input(0, "a")}},
			StageCheck{In: 1, Lost: 1}},
		{"an output written twice", 1, false, []handled{{kIn, input(0, "a")}, {kOut, output(0, 0, "a")}, {kOut, output(0, 0, "a")}},
			StageCheck{In: 1, Processed: 1, Out: 2, Duplicates: 1, EventIDDuplicates: 1}},
		{"dead-lettered twice", 1, false, []handled{{kIn, input(0, "a")}, {kDLQ, deadLetter("st", 0)}, {kDLQ, deadLetter("st", 0)}},
			StageCheck{In: 1, DeadLettered: 1, Duplicates: 1}},
		{"output and dead letter", 1, false, []handled{{kIn, input(0, "a")}, {kOut, output(0, 0, "a")}, {kDLQ, deadLetter("st", 0)}},
			StageCheck{In: 1, Out: 1, OutputAndDeadLetter: 1}},
		{"orphan output", 1, false, []handled{{kIn, input(0, "a")}, {kOut, output(0, 0, "a")}, {kOut, output(5, 0, "x")}},
			StageCheck{In: 1, Processed: 1, Out: 1, Orphans: 1}},
		{"one event ID out of two inputs", 2, false, []handled{
			{kIn, input(0, "a")}, {kIn, input(1, "b")}, {kOut, output(0, 0, "a")}, {kOut, output(1, 0, "a")}},
			StageCheck{In: 2, Processed: 2, Out: 2, EventIDDuplicates: 1}},
		{"no lineage", 1, false, []handled{{kIn, input(0, "a")}, {kOut, &kgo.Record{Topic: "out", Value: []byte(`{}`)}}},
			StageCheck{In: 1, Lost: 1, NoLineage: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := accountedStage(t, tc.committed, tc.mayFilter, false, tc.recs)
			got := StageCheck{In: c.In, Processed: c.Processed, Out: c.Out, DeadLettered: c.DeadLettered, Filtered: c.Filtered,
				Pending: c.Pending, Lost: c.Lost, Duplicates: c.Duplicates, EventIDDuplicates: c.EventIDDuplicates,
				Orphans: c.Orphans, OutputAndDeadLetter: c.OutputAndDeadLetter, NoLineage: c.NoLineage}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("counters:\n got %+v\nwant %+v", got, tc.want)
			}
			if failing := tc.want.Lost+tc.want.Duplicates+tc.want.EventIDDuplicates+tc.want.Orphans+tc.want.OutputAndDeadLetter > 0; (c.Failures() > 0) != failing {
				t.Errorf("Failures = %d, want failing %v", c.Failures(), failing)
			}
		})
	}
}

// testEventIDs reads the event IDs of a json sink whose event_id column
// id maps field id, with a body column of $value.
func testEventIDs(t *testing.T) *pgsink.EventIDs {
	t.Helper()
	ids, err := pgsink.NewEventIDs(pgsink.Config{Sink: "pg", InstanceID: "verify", Brokers: []string{"127.0.0.1:9092"},
		Input: "in", DeadLetter: "dlq", InputFormat: serde.JSON, DSN: "postgres://127.0.0.1/db", Table: "raw.t", EventID: "id",
		Columns: []pgsink.Column{{Name: "id", Source: "id"}, {Name: "body", Source: topology.SourceValue}}})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestSinkAccount(t *testing.T) {
	sinkInput := func(offset int64, id string) *kgo.Record {
		switch {
		case id == "":
			return &kgo.Record{Topic: "in", Offset: offset} // a tombstone
		case strings.HasPrefix(id, "{"):
			return &kgo.Record{Topic: "in", Offset: offset, Value: []byte(id)}
		}
		return input(offset, id)
	}
	for _, tc := range []struct {
		name     string
		position int64 // the stored next offset of partition 0
		in       []string
		dlq      []int64 // offsets dead-lettered
		rows     []string
		want     SinkCheck
	}{
		{"all rows", 2, []string{"a", "b"}, nil, []string{"a", "b"},
			SinkCheck{In: 2, Expected: 2, Rows: 2}},
		{"a row missing", 2, []string{"a", "b"}, nil, []string{"a"},
			SinkCheck{In: 2, Expected: 2, Rows: 1, Missing: 1}},
		{"an extra row", 1, []string{"a"}, nil, []string{"a", "z"},
			SinkCheck{In: 1, Expected: 1, Rows: 2, Extra: 1}},
		{"a row twice", 1, []string{"a"}, nil, []string{"a", "a"},
			SinkCheck{In: 1, Expected: 1, Rows: 2, DuplicateRows: 1}},
		{"pending may or may not be a row", 1, []string{"a", "b", "c"}, nil, []string{"a", "b"},
			SinkCheck{In: 3, Expected: 1, Rows: 2, Pending: 2}},
		{"dead-lettered, twice", 2, []string{"a", "b"}, []int64{1, 1}, []string{"a"},
			SinkCheck{In: 2, Expected: 1, Rows: 1, DeadLettered: 1, DeadLetterRepeats: 1}},
		{"tombstone skipped", 2, []string{"a", ""}, nil, []string{"a"},
			SinkCheck{In: 2, Expected: 1, Rows: 1, Skipped: 1}},
		{"same event ID in two records is one row", 2, []string{"a", "a"}, nil, []string{"a"},
			SinkCheck{In: 2, Expected: 1, Rows: 1}},
		// The sink reads the event ID's field only: a lone surrogate in a
		// field it does not map is stored, in $value, as it came.
		{"lone surrogate in a field the sink does not map", 1, []string{`{"id":"s1","s":"\ud800"}`}, nil, []string{"s1"},
			SinkCheck{In: 1, Expected: 1, Rows: 1}},
		{"lone surrogate in the event ID: a dead letter", 1, []string{`{"id":"s\ud800"}`}, []int64{0}, nil,
			SinkCheck{In: 1, DeadLettered: 1}},
		{"a number is its text", 2, []string{`{"id":1}`, `{"id":2.50}`}, nil, []string{"1", "2.50"},
			SinkCheck{In: 2, Expected: 2, Rows: 2}},
		{"no event ID and no dead letter is lost", 1, []string{`{"b":"x"}`}, nil, nil,
			SinkCheck{In: 1, Lost: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &SinkCheck{Name: "pg", Input: "in", Table: "raw.t", eventIDs: testEventIDs(t), RowsChecked: true,
				positions: map[int32]int64{0: tc.position}, DeadLettersByReason: map[string]int64{},
				cfg: topology.Sink{Postgres: topology.Postgres{Tombstones: topology.TombstonesSkip}}}
			c.lineage, c.ids = newTestSpills(t)
			var rec [linSize]byte
			for i, id := range tc.in {
				if err := c.handle(context.Background(), kIn, sinkInput(int64(i), id), rec[:]); err != nil {
					t.Fatal(err)
				}
			}
			for _, o := range tc.dlq {
				if err := c.handle(context.Background(), kDLQ, deadLetter("pg", o), rec[:]); err != nil {
					t.Fatal(err)
				}
			}
			var idRec [idSize]byte
			for _, id := range tc.rows {
				d := sha(id)
				c.Rows++
				if err := c.ids.add(int(d[0]), idRecord(idRec[:], d, idRow)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.flushKeys(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := c.account(map[int32]int64{0: 0}); err != nil {
				t.Fatal(err)
			}
			got := SinkCheck{In: c.In, Expected: c.Expected, Rows: c.Rows, DeadLettered: c.DeadLettered, Skipped: c.Skipped,
				Pending: c.Pending, Missing: c.Missing, Extra: c.Extra, DuplicateRows: c.DuplicateRows, Lost: c.Lost,
				Orphans: c.Orphans, DeadLetterRepeats: c.DeadLetterRepeats}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("counters:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestAddChecksDeadLetterTable: a sink with a dead-letter table reads its
// dead letters from the table, so no topic is read for them; a sink with
// a topic reads that topic.
func TestAddChecksDeadLetterTable(t *testing.T) {
	tests := []struct {
		name      string
		dl        topology.SinkDeadLetter
		wantTopic []string
	}{
		{"table", topology.SinkDeadLetter{Table: "raw.dead"}, []string{"in"}},
		{"topic", topology.SinkDeadLetter{Topic: "dlq"}, []string{"dlq", "in"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &topology.File{Kafka: topology.Kafka{Brokers: []string{"127.0.0.1:9092"}},
				Sinks: []topology.Sink{{Name: "pg", Input: topology.Endpoint{Topic: "in", Format: "json"}, DeadLetter: tt.dl,
					Postgres: topology.Postgres{DSN: "postgres://127.0.0.1/db", Table: "raw.events", EventID: "event_id",
						Columns: map[string]string{"event_id": "event_id"}, ColumnOrder: []string{"event_id"}}}}}
			p := &plan{dir: t.TempDir(), rep: &Report{}, roles: map[string][]role{}}
			defer p.close()
			if err := p.addChecks(f); err != nil {
				t.Fatal(err)
			}
			if got := p.topics(); !slices.Equal(got, tt.wantTopic) {
				t.Fatalf("topics read %q, want %q", got, tt.wantTopic)
			}
			if c := p.rep.Sinks[0]; c.DeadLetterTable != tt.dl.Table || c.DeadLetter != tt.dl.Topic {
				t.Fatalf("check's dead letters: topic %q table %q; want %+v", c.DeadLetter, c.DeadLetterTable, tt.dl)
			}
		})
	}
}

// TestStageAccountDedupe: in a stage with a dedupe step, an input without
// output is deduplicated only if its event ID came out of another input.
func TestStageAccountDedupe(t *testing.T) {
	for _, tc := range []struct {
		name      string
		committed int64
		mayFilter bool
		recs      []handled
		want      StageCheck
	}{
		{"resent duplicate", 2, false, []handled{{kIn, input(0, "a")}, {kIn, input(1, "a")}, {kOut, output(0, 0, "a")}},
			StageCheck{In: 2, Processed: 1, Out: 1, Deduplicated: 1}},
		{"resent twice", 3, false, []handled{{kIn, input(0, "a")}, {kIn, input(1, "a")}, {kIn, input(2, "a")}, {kOut, output(1, 0, "a")}},
			StageCheck{In: 3, Processed: 1, Out: 1, Deduplicated: 2}},
		{"no copy came out", 1, false, []handled{{kIn, input(0, "a")}},
			StageCheck{In: 1, Lost: 1}},
		{"no copy came out, filter step", 1, true, []handled{{kIn, input(0, "a")}},
			StageCheck{In: 1, Filtered: 1}},
		{"another ID came out", 2, false, []handled{{kIn, input(0, "a")}, {kIn, input(1, "b")}, {kOut, output(0, 0, "a")}},
			StageCheck{In: 2, Processed: 1, Out: 1, Lost: 1}},
		{"pending is not deduplicated", 1, false, []handled{{kIn, input(0, "a")}, {kIn, input(1, "a")}, {kOut, output(0, 0, "a")}},
			StageCheck{In: 2, Processed: 1, Out: 1, Pending: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := accountedStage(t, tc.committed, tc.mayFilter, true, tc.recs)
			got := StageCheck{In: c.In, Processed: c.Processed, Out: c.Out, Filtered: c.Filtered, Deduplicated: c.Deduplicated,
				Pending: c.Pending, Lost: c.Lost, EventIDDuplicates: c.EventIDDuplicates}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("counters:\n got %+v\nwant %+v", got, tc.want)
			}
			if (c.Failures() > 0) != (tc.want.Lost > 0) {
				t.Errorf("Failures = %d, want failing %v", c.Failures(), tc.want.Lost > 0)
			}
		})
	}
}
