package kafkaconn

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// franzRead is how franz-go reads a record timestamp of ms Unix
// milliseconds (source.go timeFromMillis): through int64 nanoseconds,
// which wrap.
func franzRead(ms int64) time.Time { return time.Unix(0, ms*1e6) }

func TestExactTimestamp(t *testing.T) {
	for _, ms := range []int64{
		0, 1, -1, -5, 1700000000000,
		MaxWritableMillis, MinWritableMillis, // the last ones read as they are
		MaxWritableMillis + 1, MinWritableMillis - 1, // the first ones that wrap
		10413792000000, 32503680000000, -11676096000000, // 2300, 3000, 1600
		253402300799999,       // 9999-12-31T23:59:59.999Z
		1<<57 - 1, -(1 << 57), // the ends of the exact range
	} {
		read := franzRead(ms)
		if ms > MaxWritableMillis && read.UnixMilli() == ms {
			t.Fatalf("%d ms: franz-go's read no longer wraps; the test's model of it is wrong", ms)
		}
		if got := ExactTimestamp(read).UnixMilli(); got != ms {
			t.Errorf("ExactTimestamp(read of %d ms) = %d ms", ms, got)
		}
		r := &kgo.Record{Timestamp: read}
		exactTimestamps{}.OnFetchRecordBuffered(r)
		if r.Timestamp.UnixMilli() != ms {
			t.Errorf("hook: %d ms became %d", ms, r.Timestamp.UnixMilli())
		}
	}
}

func TestCheckWritableTimestamp(t *testing.T) {
	for _, tc := range []struct {
		ms int64
		ok bool
	}{
		{0, true}, {-1, true}, {1735689600000, true}, {MaxWritableMillis, true}, {MinWritableMillis, true},
		{MaxWritableMillis + 1, false}, {MinWritableMillis - 1, false}, {32503680000000, false}, {math.MaxInt64 / 2, false},
	} {
		err := CheckWritableTimestamp(time.UnixMilli(tc.ms))
		if (err == nil) != tc.ok {
			t.Errorf("CheckWritableTimestamp(%d ms) = %v, want ok %v", tc.ms, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "2262-04-11T23:47:16.854Z") {
			t.Errorf("CheckWritableTimestamp(%d ms) = %q: want the writable range named", tc.ms, err)
		}
	}
}

func TestHasTimestamp(t *testing.T) {
	if HasTimestamp(franzRead(-1)) {
		t.Error("a record with timestamp -1 (NO_TIMESTAMP) has one")
	}
	if !HasTimestamp(franzRead(0)) || !HasTimestamp(franzRead(-2)) {
		t.Error("timestamps 0 and -2 are timestamps")
	}
}
