package state

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The clock that closes windows and expires dedupe IDs: a watermark.
//
// A record names its upstream partition (its source, from the lineage
// headers an upstream stage writes: "topic/partition"; "" without them).
// Each input partition keeps, per source, the largest event time seen of
// it (its source clock); its stream time is the minimum of the clocks of
// the sources still active, and never goes back. Behind a re-keying stage
// an input partition gets one upstream partition's run after another's
// (a backlog, a first start, a reset): the minimum waits for the slowest,
// so the same input closes the same windows however the runs interleave.
// With one source (records without lineage) it is the largest event time
// seen, the rule of Kafka Streams.
//
// A source is known from its first record, or from the start when
// Watermark.Upstream names its topic (the partitions of an upstream
// stage's input). A known source not heard from for Watermark.Idle (wall
// clock, since the partition was restored when never heard from) stops
// holding the minimum back, and holds it again from its next record on;
// records behind the stream time then are late, as are those of a source
// first heard of behind it. The source clocks are state: they go to the
// changelog with the stream time and into the checkpoint's batch, so a
// restored partition judges as its previous owner did; when a source was
// last heard from is not (a restored partition gives every source Idle
// again).

// Watermark configures the stream time of a step's input partitions.
type Watermark struct {
	// Upstream is, per topic, the partition count of the upstream
	// sources known before their first record: the input topics of the
	// stages that write this input.
	Upstream map[string]int32
	// Idle is how long a silent source holds the stream time back; 0
	// holds it for ever.
	Idle time.Duration
	// Now is the wall clock; nil is time.Now.
	Now func() time.Time
}

// SetWatermark sets how the stream time of the step's partitions is kept;
// before any transaction begins.
func (s *partSet) SetWatermark(w Watermark) {
	if w.Now == nil {
		w.Now = time.Now
	}
	var expected []string
	for topic, n := range w.Upstream {
		for p := range n {
			expected = append(expected, Source(topic, p))
		}
	}
	slices.Sort(expected)
	s.mu.Lock()
	s.wm, s.expected = w, expected
	s.mu.Unlock()
}

// Source names upstream partition p of topic, as clocks are keyed.
func Source(topic string, p int32) string { return topic + "/" + strconv.Itoa(int(p)) }

// observe advances the clock of src to ts and the stream time to the
// watermark at wall time now (Unix ms).
func (t *txnParts) observe(tp *txnPart, src string, ts, now int64) {
	if cur, ok := tp.clocks[src]; !ok || ts > cur {
		if !tp.ownClocks {
			tp.clocks, tp.ownClocks = maps.Clone(tp.clocks), true
			if tp.clocks == nil {
				tp.clocks = map[string]int64{}
			}
		}
		tp.clocks[src] = ts
		tp.clocksChanged = true
	}
	tp.part.heard(src, now)
	tp.advance(t.watermark(tp, "", noTime, now))
}

// peek is the stream time observe(src, ts) would leave, changing nothing.
func (t *txnParts) peek(tp *txnPart, src string, ts, now int64) int64 {
	return max(tp.streamTime, t.watermark(tp, src, ts, now))
}

// watermark is the minimum clock of the active sources of tp at wall time
// now, with src's clock raised to ts (heard now) unless ts is noTime;
// noTime when a source is active but unheard of, or none is.
func (t *txnParts) watermark(tp *txnPart, src string, ts, now int64) int64 {
	idle := t.set.wm.Idle.Milliseconds()
	active := func(s string) bool {
		if s == src && ts != noTime {
			return true
		}
		return idle <= 0 || now-tp.part.lastHeard(s) < idle
	}
	wm, found := int64(noTime), false
	consider := func(s string, c int64) {
		if !active(s) {
			return
		}
		if s == src && ts != noTime {
			c = max(c, ts)
		}
		if !found || c < wm {
			wm, found = c, true
		}
	}
	for s, c := range tp.clocks {
		consider(s, c)
	}
	if src != "" && ts != noTime {
		if _, ok := tp.clocks[src]; !ok {
			consider(src, noTime)
		}
	}
	for _, s := range t.set.expected {
		if _, ok := tp.clocks[s]; !ok && s != src {
			consider(s, noTime)
		}
	}
	if !found {
		return noTime
	}
	return wm
}

// heard records that src was heard from at wall time now (Unix ms). Only
// the processing goroutine reads and writes it.
func (pt *part) heard(src string, now int64) {
	if pt.heardAt == nil {
		pt.heardAt = map[string]int64{}
	}
	pt.heardAt[src] = now
}

// lastHeard is when src was last heard from, or when the partition was
// restored.
func (pt *part) lastHeard(src string) int64 {
	if at, ok := pt.heardAt[src]; ok {
		return at
	}
	return pt.restored
}

// encodeStreamTime is the changelog value of a stream time and its source
// clocks: the stream time in Unix milliseconds as decimal text, then
// ";source=ms" per source in order. Topic names hold neither ';' nor '='.
func encodeStreamTime(st int64, clocks map[string]int64) []byte {
	b := strconv.AppendInt(nil, st, 10)
	for _, s := range slices.Sorted(maps.Keys(clocks)) {
		b = append(b, ';')
		b = append(b, s...)
		b = append(b, '=')
		b = strconv.AppendInt(b, clocks[s], 10)
	}
	return b
}

// decodeStreamTime reads encodeStreamTime's value; a plain number has no
// source clocks.
func decodeStreamTime(v []byte) (int64, map[string]int64, error) {
	head, rest, more := strings.Cut(string(v), ";")
	st, err := parseMillis([]byte(head))
	if err != nil || !more {
		return st, nil, err
	}
	clocks := map[string]int64{}
	for _, f := range strings.Split(rest, ";") {
		s, ms, ok := strings.Cut(f, "=")
		n, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil {
			return 0, nil, fmt.Errorf("want source=ms, got %q", f)
		}
		clocks[s] = n
	}
	return st, clocks, nil
}

// mergeClocks raises the clocks of into to those of from.
func mergeClocks(into map[string]int64, from map[string]int64) map[string]int64 {
	if into == nil && len(from) > 0 {
		into = map[string]int64{}
	}
	for s, c := range from {
		if cur, ok := into[s]; !ok || c > cur {
			into[s] = c
		}
	}
	return into
}
