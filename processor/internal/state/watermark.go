package state

import (
	"fmt"
	"maps"
	"math"
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

// observe advances the clock of src to ts, heard from at wall time now
// (Unix ms), and the stream time to st, what peek gave for them.
func (t *txnParts) observe(tp *txnPart, src string, ts, now, st int64) {
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
	tp.advance(st)
	c := &tp.wm
	if c.valid(src, now, len(tp.clocks)) {
		// src now counts, with a deadline no earlier than c.until.
		if src == c.src {
			c.stale++
		} else if v := tp.clocks[src]; v < c.min {
			c.min, c.src = v, src
		}
		return
	}
	c.min, c.src, c.until = t.scan(tp, src, tp.clocks[src], now)
	c.ok, c.stale = true, 0
}

// peek is the stream time once src's clock is at ts, heard from at wall
// time now, changing nothing.
func (t *txnParts) peek(tp *txnPart, src string, ts, now int64) int64 {
	return max(tp.streamTime, t.watermark(tp, src, ts, now))
}

// watermarkCache is the least clock of the active sources of a partition
// in an open transaction, and which source has it: the stream time of a
// record from another source is then the least of it and that source's
// clock, without a pass over every source.
//
// With many sources, records of the source holding the minimum leave it
// stale (low) for up to a sixteenth of the source count before a new
// pass: when every source sends in turn, that source is the next one
// nearly every time. A stream time that lags only closes windows later;
// it never makes a record late that the exact one would not.
type watermarkCache struct {
	ok    bool
	min   int64
	src   string
	until int64 // wall ms: the first time an active source can go idle
	stale int   // records of src since the pass
}

// valid reports whether the cache answers for a record of src at now,
// with n sources known: no active source went idle since the pass, and
// src does not hold the minimum, or may leave it stale.
func (c *watermarkCache) valid(src string, now int64, n int) bool {
	return c.ok && now < c.until && (src != c.src || c.stale < n/16)
}

// watermark is the minimum clock of the active sources of tp at wall time
// now, with src's clock raised to ts (heard now); noTime when a source is
// active but unheard of.
func (t *txnParts) watermark(tp *txnPart, src string, ts, now int64) int64 {
	if c := &tp.wm; c.valid(src, now, len(tp.clocks)) {
		v := ts
		if cur, ok := tp.clocks[src]; ok {
			v = max(cur, ts)
		}
		return min(c.min, v)
	}
	wm, _, _ := t.scan(tp, src, ts, now)
	return wm
}

// scan is watermark by a pass over every source; it also returns the
// source with the minimum and when the first active source can go idle.
func (t *txnParts) scan(tp *txnPart, src string, ts, now int64) (wm int64, minSrc string, until int64) {
	idle := t.set.wm.Idle.Milliseconds()
	wm, minSrc, until = ts, src, int64(math.MaxInt64)
	if cur, ok := tp.clocks[src]; ok {
		wm = max(cur, ts)
	}
	if idle > 0 {
		until = now + idle
	}
	consider := func(s string, c int64) {
		if s == src {
			return
		}
		if idle > 0 {
			at := tp.part.lastHeard(s)
			if now-at >= idle {
				return // idle
			}
			until = min(until, at+idle)
		}
		if c < wm {
			wm, minSrc = c, s
		}
	}
	for s, c := range tp.clocks {
		consider(s, c)
	}
	for _, s := range t.set.expected {
		if _, ok := tp.clocks[s]; !ok {
			consider(s, noTime)
		}
	}
	return wm, minSrc, until
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
// Records without lineage alone (one source "", whose clock is the stream
// time) give the number alone, as before there were sources.
func encodeStreamTime(st int64, clocks map[string]int64) []byte {
	b := strconv.AppendInt(nil, st, 10)
	if c, ok := clocks[""]; ok && len(clocks) == 1 && c == st {
		return b
	}
	for _, s := range slices.Sorted(maps.Keys(clocks)) {
		b = append(b, ';')
		b = append(b, s...)
		b = append(b, '=')
		b = strconv.AppendInt(b, clocks[s], 10)
	}
	return b
}

// decodeStreamTime reads encodeStreamTime's value; a plain number is the
// clock of records without lineage.
func decodeStreamTime(v []byte) (int64, map[string]int64, error) {
	head, rest, more := strings.Cut(string(v), ";")
	st, err := parseMillis([]byte(head))
	if err != nil || !more {
		if err != nil || st == noTime {
			return st, nil, err
		}
		return st, map[string]int64{"": st}, nil
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
