package transform

import (
	"errors"
	"testing"
	"time"
)

// An event time must be one a Kafka record timestamp holds, from the Unix
// epoch to the last millisecond of int64 nanoseconds (2262-04-11): a
// window's result carries its largest event time as its timestamp.
func TestAggregateEventTimeRange(t *testing.T) {
	p, err := compileSteps(t, `      - aggregate:
          window: { tumbling: 1m }
          time: value.ts
          aggregations: { n: count }
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := p.Aggregate()
	for _, tc := range []struct {
		ts   string
		want int64
		bad  bool
	}{
		{"0", 0, false},
		{"1767225600000", 1767225600000, false},
		{"9223372036854", 9223372036854, false},
		{`"2262-04-11T23:47:16.854Z"`, 9223372036854, false},
		{`"2026-01-01t00:00:01z"`, 1767225601000, false},      // RFC 3339 §5.6: t and z in either case
		{`"2026-01-01 00:00:01+00:00"`, 1767225601000, false}, // and the space of its NOTE
		{"-1", 0, true},
		{"-60000", 0, true},
		{`"1969-12-31T23:59:59Z"`, 0, true},
		{"9223372036855", 0, true},
		{`"2262-04-11T23:47:16.855Z"`, 0, true},
		{"9223372036854775807", 0, true},
		{"-9223372036854775808", 0, true},
	} {
		r := &Record{Value: decodeJSON(t, `{"ts":`+tc.ts+`}`), Timestamp: time.Now()}
		got, err := a.Time(t.Context(), r)
		switch {
		case tc.bad && !errors.Is(err, ErrEventTimeRange):
			t.Errorf("ts %s: %d, %v; want ErrEventTimeRange", tc.ts, got, err)
		case !tc.bad && (err != nil || got != tc.want):
			t.Errorf("ts %s: %d, %v; want %d", tc.ts, got, err, tc.want)
		}
	}
}
