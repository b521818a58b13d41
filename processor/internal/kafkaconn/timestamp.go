package kafkaconn

import (
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A Kafka record timestamp is an int64 of Unix milliseconds (the record
// batch format, https://kafka.apache.org/documentation/#recordbatch), so
// it spans about ±292 million years. franz-go carries it as a time.Time
// converted through int64 nanoseconds: it reads ms as time.Unix(0, ms*1e6)
// and writes t.UnixNano()/1e6. Both wrap outside about ±292 years of 1970:
// a timestamp after 2262-04-11T23:47:16.854Z (say 32503680000000, the year
// 3000) is read as another instant (1830-11-23T00:50:52.580896768Z) and
// would be written as yet another.
const (
	// MaxWritableMillis and MinWritableMillis bound the record timestamps,
	// in Unix milliseconds, that franz-go writes as they are (ms*1e6
	// fits an int64).
	MaxWritableMillis = math.MaxInt64 / int64(time.Millisecond)
	MinWritableMillis = math.MinInt64 / int64(time.Millisecond)

	// exactMillisBits: ms is recovered from a wrapped read modulo 2^58,
	// so for |ms| < 2^57 (about 4.5 million years either side of 1970).
	exactMillisBits = 58
)

// inv15625 is the inverse of 15625 modulo 2^64 (15625 is odd), computed
// by Newton's iteration x = x(2 - ax), each step doubling the correct bits.
var inv15625 = func() uint64 {
	const a = 15625
	x := uint64(a) // correct to 3 bits: a*a ≡ 1 (mod 8) for odd a
	for range 5 {
		x *= 2 - a*x
	}
	return x
}()

// ExactTimestamp returns the record timestamp that franz-go read as t:
// t itself when it is a whole millisecond (every timestamp within
// [MinWritableMillis, MaxWritableMillis]), else the instant the record
// really holds, recovered from the wrapped nanoseconds. franz-go computed
// ns = ms*10^6 mod 2^64, and 10^6 = 2^6 * 15625: so ns/2^6 ≡ ms*15625
// (mod 2^58), and ms is ns/2^6 times the inverse of 15625, mod 2^58, read
// as a signed 58-bit number. A wrapped read is not a whole millisecond
// unless it wrapped a multiple of 15625 times (|ms| ≥ 2.9e17, 9 million
// years), which is left as it was read.
func ExactTimestamp(t time.Time) time.Time {
	ns := t.UnixNano()
	if ns%int64(time.Millisecond) == 0 {
		return t
	}
	m := ((uint64(ns) >> 6) * inv15625) & (1<<exactMillisBits - 1)
	ms := int64(m)
	if m >= 1<<(exactMillisBits-1) {
		ms -= 1 << exactMillisBits
	}
	return time.UnixMilli(ms)
}

// exactTimestamps is a franz-go hook that replaces the Timestamp of every
// fetched record by ExactTimestamp of it before the record is polled
// (kgo.HookFetchRecordBuffered, whose doc allows such interceptors).
type exactTimestamps struct{}

func (exactTimestamps) OnFetchRecordBuffered(r *kgo.Record) {
	r.Timestamp = ExactTimestamp(r.Timestamp)
}

// CheckWritableTimestamp returns an error when franz-go would write t as
// another timestamp: before MinWritableMillis or after MaxWritableMillis.
// A record that must keep t (an output keeps its input's timestamp) cannot
// be written exactly.
func CheckWritableTimestamp(t time.Time) error {
	if ms := t.UnixMilli(); ms > MaxWritableMillis || ms < MinWritableMillis {
		return fmt.Errorf("record timestamp %d ms (%s) is outside what the Kafka client can write as it is (%s to %s): it would be written as another time",
			ms, t.UTC().Format(time.RFC3339Nano), time.UnixMilli(MinWritableMillis).UTC().Format(time.RFC3339Nano),
			time.UnixMilli(MaxWritableMillis).UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// NoTimestamp is the timestamp of a record written without one, in Unix
// milliseconds (RecordBatch.NO_TIMESTAMP of Kafka's Java client). Kafka
// Connect hands such a record to a sink with a null timestamp.
const NoTimestamp = -1

// HasTimestamp reports whether a record's timestamp t is one, not
// NoTimestamp.
func HasTimestamp(t time.Time) bool { return t.UnixMilli() != NoTimestamp }
