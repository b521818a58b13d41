package verify

import (
	"encoding/binary"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/stage"
)

// An input topic deleted and created again starts its offsets at 0: the
// outputs of its earlier incarnation name offsets that now hold other
// records, and outputs carry no topic ID. The stage keeps its input's
// timestamp on each output (or in stage.HeaderLineageTimestamp), and its
// resume guard matches outputs to inputs with it; verify does the same,
// so that an output is credited only to the record it came from.

// linTime is where a lineage record holds its timestamp, Unix ms; the
// record's fTime flag says it is known.
const linTime = 34

// setLinTime stores ms as rec's timestamp and marks it known.
func setLinTime(rec []byte, ms int64) {
	binary.BigEndian.PutUint64(rec[linTime:], uint64(ms))
	rec[17] |= fTime
}

// linTimeOf returns rec's timestamp, ok false when unknown.
func linTimeOf(rec []byte) (int64, bool) {
	return int64(binary.BigEndian.Uint64(rec[linTime:])), rec[17]&fTime != 0
}

// inputTime is input r's timestamp as the stage reads it: a redriven
// record's is its original one, deadletter.HeaderRedriveTimestamp (the
// last one, as the stage takes it).
func inputTime(r *kgo.Record) int64 {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == deadletter.HeaderRedriveTimestamp {
			if ms, err := strconv.ParseInt(string(r.Headers[i].Value), 10, 64); err == nil {
				return ms
			}
			break
		}
	}
	return r.Timestamp.UnixMilli()
}

// outputSourceTime is the timestamp of the input that output r came from:
// its stage.HeaderLineageTimestamp (output_timestamp: write), else its own
// timestamp. ok is false when the broker stamped r with its own time
// (message.timestamp.type=LogAppendTime): then nothing tells.
func outputSourceTime(r *kgo.Record) (int64, bool) {
	if v, ok := audit.Header(r, stage.HeaderLineageTimestamp); ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		return ms, err == nil
	}
	if r.Attrs.TimestampType() != 0 {
		return 0, false
	}
	return r.Timestamp.UnixMilli(), true
}

// deadLetterSourceTime is the timestamp of the input record that a
// stage's dead letter r names (deadletter.HeaderSourceTimestamp, the
// record as the stage read it). A window result's dead letter names the
// window's last input offset, with another time: ok is false.
func deadLetterSourceTime(r *kgo.Record) (int64, bool) {
	if _, ok := audit.Header(r, deadletter.HeaderWindowResult); ok {
		return 0, false
	}
	v, ok := audit.Header(r, deadletter.HeaderSourceTimestamp)
	if !ok {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	return ms, err == nil
}

// otherIncarnation reports whether out, an output's or a dead letter's
// lineage record of the group whose input record in was read, came from
// another record at that offset.
func otherIncarnation(in, out []byte) bool {
	ti, okI := linTimeOf(in)
	to, okO := linTimeOf(out)
	return okI && okO && ti != to
}
