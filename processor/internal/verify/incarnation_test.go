package verify

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/stage"
)

// An output or a dead letter is credited to the input record at its
// source offset only when it carries that record's timestamp: after the
// input topic was deleted and created again, the outputs of its earlier
// incarnation name offsets that hold other records now.
func TestStageAccountOtherIncarnation(t *testing.T) {
	old, now := time.UnixMilli(1_700_000_000_000), time.UnixMilli(1_700_000_900_000)
	in := func(ts time.Time, hs ...kgo.RecordHeader) *kgo.Record {
		r := input(0, "a")
		r.Timestamp, r.Headers = ts, hs
		return r
	}
	out := func(ts time.Time, hs ...kgo.RecordHeader) *kgo.Record {
		r := output(0, 0, "a")
		r.Timestamp, r.Headers = ts, append(r.Headers, hs...)
		return r
	}
	ms := func(t time.Time) []byte { return []byte(strconv.FormatInt(t.UnixMilli(), 10)) }
	dl := func(ts time.Time, hs ...kgo.RecordHeader) *kgo.Record {
		r := deadLetter("st", 0)
		r.Headers = append(r.Headers, append(hs, kgo.RecordHeader{Key: deadletter.HeaderSourceTimestamp, Value: ms(ts)})...)
		return r
	}
	for _, tc := range []struct {
		name string
		recs []handled
		want StageCheck
	}{
		{"same timestamp", []handled{{kIn, in(now)}, {kOut, out(now)}},
			StageCheck{In: 1, Processed: 1, Out: 1}},
		{"another record's output", []handled{{kIn, in(now)}, {kOut, out(old)}},
			StageCheck{In: 1, Lost: 1, OtherIncarnation: 1}},
		{"both incarnations' outputs", []handled{{kIn, in(now)}, {kOut, out(old)}, {kOut, out(now)}},
			StageCheck{In: 1, Processed: 1, Out: 1, OtherIncarnation: 1}},
		{"written with the time of writing", []handled{{kIn, in(old)},
			{kOut, out(now, kgo.RecordHeader{Key: stage.HeaderLineageTimestamp, Value: ms(old)})}},
			StageCheck{In: 1, Processed: 1, Out: 1}},
		{"another record's, written with the time of writing", []handled{{kIn, in(now)},
			{kOut, out(now, kgo.RecordHeader{Key: stage.HeaderLineageTimestamp, Value: ms(old)})}},
			StageCheck{In: 1, Lost: 1, OtherIncarnation: 1}},
		{"redriven input keeps its original time", []handled{
			{kIn, in(now, kgo.RecordHeader{Key: deadletter.HeaderRedriveTimestamp, Value: ms(old)})}, {kOut, out(old)}},
			StageCheck{In: 1, Processed: 1, Out: 1}},
		{"dead letter of the record", []handled{{kIn, in(now)}, {kDLQ, dl(now)}},
			StageCheck{In: 1, DeadLettered: 1}},
		{"another record's dead letter", []handled{{kIn, in(now)}, {kDLQ, dl(old)}},
			StageCheck{In: 1, Lost: 1, OtherIncarnation: 1}},
		{"a window result's dead letter is not told apart", []handled{{kIn, in(now)},
			{kDLQ, dl(old, kgo.RecordHeader{Key: deadletter.HeaderWindowResult, Value: []byte("true")})}},
			StageCheck{In: 1, DeadLettered: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := accountedStage(t, 1, false, false, tc.recs)
			got := StageCheck{In: c.In, Processed: c.Processed, Out: c.Out, DeadLettered: c.DeadLettered, Lost: c.Lost, Duplicates: c.Duplicates,
				Orphans: c.Orphans, OtherIncarnation: c.OtherIncarnation}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("counters:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
