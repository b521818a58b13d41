package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/exactly-io/exactly/serde"
)

// Aggregate is the state of an aggregate step: per input partition, the
// open windows of each record key, and the partition's stream time (a
// watermark over its upstream sources, see watermark.go).
//
// A window is [start, end) in Unix milliseconds, end = start + size, with
// starts at the multiples of advance (tumbling windows: advance = size).
// It closes when the partition's stream time reaches end + grace: a record
// whose every window is closed is late.
//
// The store key of a window is its start (8 bytes, big-endian with the
// sign bit flipped, so keys sort by start) followed by the record key; the
// value is its accumulator, JSON. The changelog of partition p holds the
// same keys and values, a tombstone once a window closed, and, under the
// empty key, the stream time in Unix milliseconds as decimal text.
type Aggregate struct {
	db      *DB
	windows *Store
	cfg     AggregateConfig
	kinds   []aggKind // of cfg.Kinds
	size    int64     // ms
	advance int64
	grace   int64
	gap     int64 // > 0: session windows (see session.go)
	*partSet
}

// AggregateConfig describes an aggregate step.
type AggregateConfig struct {
	Size, Advance, Grace time.Duration
	// Gap, when positive, makes the windows sessions (see session.go);
	// Size and Advance are then unused.
	Gap time.Duration
	// Kinds are the aggregations, in output order: count, sum, min, max,
	// avg, first or last.
	Kinds []string
	// Update emits a result on every change; otherwise one result per
	// window when it closes.
	Update bool
}

// NewAggregate returns the state of an aggregate step in store
// "aggregate" of db.
func NewAggregate(db *DB, cfg AggregateConfig) *Aggregate {
	w := db.Store("aggregate")
	return &Aggregate{db: db, windows: w, cfg: cfg, kinds: aggKindsOf(cfg.Kinds), size: cfg.Size.Milliseconds(), advance: cfg.Advance.Milliseconds(),
		grace: cfg.Grace.Milliseconds(), gap: cfg.Gap.Milliseconds(), partSet: newPartSet(w)}
}

// Window is a window's bounds, Unix milliseconds, end exclusive; a
// session's end is its last event time, inclusive.
type Window struct{ Start, End int64 }

// Windows returns the windows that contain event time ts, earliest first.
func (a *Aggregate) Windows(ts int64) []Window {
	last := floorDiv(ts, a.advance) * a.advance
	var out []Window
	for start := last; start > ts-a.size; start -= a.advance {
		out = append(out, Window{start, start + a.size})
	}
	slices.Reverse(out)
	return out
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// closed reports whether w is closed at stream time st.
func (a *Aggregate) closed(w Window, st int64) bool { return st != noTime && st >= w.End+a.grace }

// Result is one window's results.
type Result struct {
	Partition int32
	Key       []byte
	Window    Window
	// Count is the window's records; MaxTime the largest event time among
	// them (Unix ms).
	Count, MaxTime int64
	// Values are the JSON texts of the aggregations, in config order.
	Values []json.RawMessage
	// Retract is, with emit update, a session merged away or whose
	// bounds moved: it no longer exists (Values is nil).
	Retract bool
}

// acc is a window's accumulator, as stored.
type acc struct {
	C int64    `json:"c"` // records
	T int64    `json:"t"` // largest event time
	A []aggAcc `json:"a"`
}

type aggAcc struct {
	N int64           `json:"n,omitempty"` // non-null values (sum, min, max, avg)
	S string          `json:"s,omitempty"` // sum, min or max: number text
	T int64           `json:"t,omitempty"` // first, last: event time of V
	V json.RawMessage `json:"v,omitempty"` // first, last: the value's JSON
	U string          `json:"u,omitempty"` // first, last: upstream source of V (see keeps)
}

// AggregateTxn is the changes of one Kafka transaction to an Aggregate.
type AggregateTxn struct {
	a    *Aggregate
	txn  *Txn
	emit Emit
	txnParts
	touched touched // window keys changed
	// byKey is, for session windows, the session keys changed by
	// partition and record key.
	byKey map[int32]map[string]map[string]bool
}

// Begin returns an AggregateTxn whose changelog records go to emit.
func (a *Aggregate) Begin(emit Emit) *AggregateTxn {
	txn := a.db.Begin()
	return &AggregateTxn{a: a, txn: txn, emit: emit, txnParts: newTxnParts(a.partSet, txn), touched: touched{}, byKey: map[int32]map[string]map[string]bool{}}
}

// Late reports whether a record of partition p with this key and event
// time ts would be late (every window of ts closed, Add's late), changing
// nothing.
func (t *AggregateTxn) Late(p int32, key []byte, ts int64) (bool, error) {
	return t.LateFrom(p, "", key, ts)
}

// LateFrom is Late for a record of upstream source src (see Source).
func (t *AggregateTxn) LateFrom(p int32, src string, key []byte, ts int64) (bool, error) {
	if t.a.gap > 0 {
		return t.lateSession(p, src, key, ts)
	}
	tp, err := t.get(p)
	if err != nil {
		return false, err
	}
	st := t.peek(tp, src, ts, t.set.wm.Now().UnixMilli())
	for _, w := range t.a.Windows(ts) {
		if !t.a.closed(w, st) {
			return false, nil
		}
	}
	return true, nil
}

// Add adds a record of partition p with this key, event time ts (Unix
// ms) and one native value per aggregation (ignored for count) to its
// open windows, after advancing the stream time to ts. It returns the
// results of the windows it changed (emit update), or late when every
// window of ts is closed. An error is the record's (ErrOverflow,
// ErrNotNumber, naming the aggregation by index), and it changes nothing,
// or ErrNotRestored.
func (t *AggregateTxn) Add(p int32, key []byte, ts int64, values []any) (updated []Result, late bool, err error) {
	return t.AddFrom(p, "", key, ts, values)
}

// AddFrom is Add for a record of upstream source src (see Source): the
// stream time it judges by is the watermark once src's clock is at ts.
func (t *AggregateTxn) AddFrom(p int32, src string, key []byte, ts int64, values []any) (updated []Result, late bool, err error) {
	if t.a.gap > 0 {
		return t.addSession(p, src, key, ts, values)
	}
	tp, err := t.get(p)
	if err != nil {
		return nil, false, err
	}
	now := t.set.wm.Now().UnixMilli()
	st := t.peek(tp, src, ts, now)
	type change struct {
		w   Window
		k   []byte
		acc *acc
		new bool
	}
	var changes []change
	for _, w := range t.a.Windows(ts) {
		if t.a.closed(w, st) {
			continue
		}
		k := windowKey(w.Start, key)
		v, ok, err := t.txn.Get(t.a.windows, p, k)
		if err != nil {
			return nil, false, err
		}
		ac := &acc{A: make([]aggAcc, len(t.a.cfg.Kinds))}
		if ok {
			if ac, err = t.a.decodeAcc(p, k, v); err != nil {
				return nil, false, err
			}
		}
		if err := t.a.update(ac, src, ts, values); err != nil {
			return nil, false, err
		}
		changes = append(changes, change{w, k, ac, !ok})
	}
	t.observe(tp, src, ts, now, st)
	if len(changes) == 0 {
		return nil, true, nil
	}
	for _, c := range changes {
		b, _ := json.Marshal(c.acc)
		t.txn.Set(t.a.windows, p, c.k, b)
		t.touched.add(p, c.k)
		if c.new {
			tp.added++
		}
		if t.a.cfg.Update {
			updated = append(updated, t.a.result(p, key, c.w, c.acc))
		}
	}
	return updated, false, nil
}

// aggKind is an aggregation's kind (AggregateConfig.Kinds), read once,
// for update's switch on every record.
type aggKind uint8

const (
	aggOther aggKind = iota // no kind topology allows
	aggCount
	aggSum
	aggAvg
	aggMin
	aggMax
	aggFirst
	aggLast
)

var aggKindNames = map[string]aggKind{
	"count": aggCount, "sum": aggSum, "avg": aggAvg, "min": aggMin, "max": aggMax, "first": aggFirst, "last": aggLast,
}

// aggKindsOf reads the kinds of names.
func aggKindsOf(names []string) []aggKind {
	kinds := make([]aggKind, len(names))
	for i, n := range names {
		kinds[i] = aggKindNames[n]
	}
	return kinds
}

// update folds one record of upstream source src into ac.
func (a *Aggregate) update(ac *acc, src string, ts int64, values []any) error {
	if ac.C == 0 {
		ac.T = ts
	}
	ac.C++
	ac.T = max(ac.T, ts)
	for i, kind := range a.kinds {
		g := &ac.A[i]
		var v any
		if i < len(values) {
			v = values[i]
		}
		var err error
		switch kind {
		case aggCount:
			continue
		case aggFirst, aggLast:
			if !g.keeps(kind, src, ts) {
				err = g.setFirstLast(a.cfg.Kinds[i], src, ts, v)
			}
		case aggMin, aggMax:
			err = foldExtreme(g, kind, v)
		default:
			err = foldSum(g, kind, v)
		}
		if err != nil {
			return fmt.Errorf("aggregation %d (%s): %w", i, a.cfg.Kinds[i], err)
		}
	}
	return nil
}

// keeps reports whether the value of a first or last (kind) stays when
// a value of event time ts comes from upstream source src: first keeps
// the earliest event time's, last the latest one's. Of equal times, first
// keeps the least source's and last takes the greatest's, the first and
// the last seen of one source: how the sources' runs interleave (live, or
// a backlog) does not change the pick.
func (g *aggAcc) keeps(kind aggKind, src string, ts int64) bool {
	if g.V == nil {
		return false
	}
	if kind == aggFirst {
		return ts > g.T || ts == g.T && src >= g.U
	}
	return ts < g.T || ts == g.T && src < g.U
}

// setFirstLast makes v, of event time ts from upstream source src, the
// value of a first or last (named kind).
func (g *aggAcc) setFirstLast(kind, src string, ts int64, v any) error {
	b, err := serde.AppendJSON(nil, v, kind)
	if err == nil {
		g.T, g.V, g.U = ts, b, src
	}
	return err
}

// foldExtreme keeps the smallest (min) or largest (max) value, as it
// came (-0.0, 1e+21), not rewritten: the first of equal values stays.
func foldExtreme(g *aggAcc, kind aggKind, v any) error {
	n, ok, err := toNum(v)
	if err != nil || !ok {
		return err
	}
	if g.N == 0 {
		g.N, g.S = 1, valueText(v, n)
		return nil
	}
	cur, _, err := parseNum(g.S)
	if err != nil {
		return fmt.Errorf("stored %w", err)
	}
	if c := cmp(n, cur); (kind == aggMin && c < 0) || (kind == aggMax && c > 0) {
		g.S = valueText(v, n)
	}
	g.N++
	return nil
}

// foldSum adds v, unless null, to the running sum of a sum or an avg.
func foldSum(g *aggAcc, kind aggKind, v any) error {
	n, ok, err := toNum(v)
	if err != nil || !ok {
		return err
	}
	if g.N == 0 {
		g.N, g.S = 1, n.text()
		return nil
	}
	cur, _, err := parseNum(g.S)
	if err != nil {
		return fmt.Errorf("stored %w", err)
	}
	switch kind {
	case aggSum:
		if cur, err = add(cur, n); err != nil {
			return err
		}
	case aggAvg:
		// An average is written as a decimal whatever its values: its
		// running sum goes on exactly past the int64 range (stored as
		// decimal text) where a sum's own result could not be written
		// as an int.
		cur = addExact(cur, n)
	}
	g.N++
	g.S = cur.text()
	return nil
}

// result renders ac.
func (a *Aggregate) result(p int32, key []byte, w Window, ac *acc) Result {
	r := Result{Partition: p, Key: key, Window: w, Count: ac.C, MaxTime: ac.T, Values: make([]json.RawMessage, len(a.cfg.Kinds))}
	null := json.RawMessage("null")
	for i, kind := range a.cfg.Kinds {
		g := ac.A[i]
		switch {
		case kind == "count":
			r.Values[i] = json.RawMessage(fmt.Sprint(ac.C))
		case kind == "first" || kind == "last":
			r.Values[i] = g.V
		case g.N == 0:
			r.Values[i] = null
		case kind == "avg":
			sum, _, _ := parseNum(g.S)
			s, _ := decimalText(new(big.Rat).Quo(sum.rat(), new(big.Rat).SetInt64(g.N)), AvgPlaces)
			r.Values[i] = json.RawMessage(s)
		default:
			r.Values[i] = json.RawMessage(g.S)
		}
		if r.Values[i] == nil {
			r.Values[i] = null
		}
	}
	return r
}

// Finish ends the transaction's changes before its commit: for each
// partition it touched, windows closed at its stream time are deleted
// (their results returned, in window and key order, with emit final), and
// every window changed is written to the changelog (its accumulator, or
// a tombstone), and the stream time if it advanced.
func (t *AggregateTxn) Finish() ([]Result, error) {
	var out []Result
	for _, p := range t.sorted() {
		tp := t.m[p]
		if tp.streamTime == noTime {
			continue
		}
		if t.a.gap > 0 {
			res, err := t.finishSessions(p, tp)
			if err != nil {
				return nil, err
			}
			out = append(out, res...)
			continue
		}
		// Windows with start <= cutoff are closed.
		cutoff := tp.streamTime - t.a.grace - t.a.size
		cand := map[string]bool{}
		err := t.a.windows.Scan(p, nil, windowKey(cutoff+1, nil), func(k, _ []byte) (bool, error) {
			cand[string(k)] = true
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		for k := range t.touched[p] {
			if start, _ := parseWindowKey([]byte(k)); start <= cutoff {
				cand[k] = true
			}
		}
		keys := make([]string, 0, len(cand))
		for k := range cand {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, ok, err := t.txn.Get(t.a.windows, p, []byte(k))
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			start, key := parseWindowKey([]byte(k))
			if !t.a.cfg.Update {
				ac, err := t.a.decodeAcc(p, []byte(k), v)
				if err != nil {
					return nil, err
				}
				out = append(out, t.a.result(p, bytes.Clone(key), Window{start, start + t.a.size}, ac))
			}
			t.txn.Delete(t.a.windows, p, []byte(k))
			t.touched.add(p, []byte(k))
			tp.added--
		}
	}
	t.emitStreamTime(t.emit)
	if err := t.touched.emit(t.txn, t.a.windows, t.emit); err != nil {
		return nil, err
	}
	clear(t.touched)
	clear(t.byKey)
	return out, nil
}

// Commit applies the transaction's changes and moves the checkpoints to
// ends (see txnParts.commit).
func (t *AggregateTxn) Commit(ends map[int32]int64) error {
	clear(t.touched)
	clear(t.byKey)
	return t.commit(ends)
}

// Discard forgets the transaction's changes: it was aborted.
func (t *AggregateTxn) Discard() {
	clear(t.touched)
	clear(t.byKey)
	t.discard()
}

// Restore starts the restore of partition p (see Dedupe.Restore). Done
// counts the partition's windows.
func (a *Aggregate) Restore(p int32, cl ChangelogPartition, now time.Time) (Restorer, error) {
	check := checkWindowKey
	if a.gap > 0 {
		check = checkSessionKey
	}
	return restoreStore(a.db, a.partSet, a.windows, check, p, cl, now)
}

func checkWindowKey(key []byte) error {
	if len(key) < 8 {
		return fmt.Errorf("key %x is no window key", key)
	}
	return nil
}

// windowKey is start (sign bit flipped, big-endian) followed by key.
func windowKey(start int64, key []byte) []byte {
	k := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(key)), uint64(start)^(1<<63))
	return append(k, key...)
}

func parseWindowKey(k []byte) (int64, []byte) {
	if len(k) < 8 {
		return 0, nil
	}
	return int64(binary.BigEndian.Uint64(k[:8]) ^ (1 << 63)), k[8:]
}
