package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// Session windows (AggregateConfig.Gap > 0), as Kafka Streams'
// SessionWindows: per record key, runs of records no more than gap apart
// in event time.
//
// A session is [start, end], both inclusive: its earliest and latest
// event times. A record at time t joins every open session of its key
// whose [start-gap, end+gap] covers t, merging them into one. A session
// closes when stream time passes end+gap+grace.
//
// A record is late when t+grace is before the stream time, unless t is
// inside an open session of its key (it then moves no bound). So a record
// taken never comes within gap of a closed session: a closed session's
// end+gap is before stream time-grace, and distinct sessions of a key are
// more than gap apart.
//
// The store key of a session is the record key's length (4 bytes,
// big-endian), the record key, and start (8 bytes, as in windowKey): a
// key's sessions are one range, by start. The value is the accumulator,
// whose T is end.

// session is one session of a key as a transaction sees it.
type session struct {
	k          string // store key
	start, end int64
	acc        *acc
}

func sessionPrefix(key []byte) []byte {
	b := binary.BigEndian.AppendUint32(make([]byte, 0, 12+len(key)), uint32(len(key)))
	return append(b, key...)
}

func sessionKey(key []byte, start int64) []byte {
	return binary.BigEndian.AppendUint64(sessionPrefix(key), uint64(start)^(1<<63))
}

// parseSessionKey splits a session's store key; ok is false if k is none.
func parseSessionKey(k []byte) (key []byte, start int64, ok bool) {
	if len(k) < 12 {
		return nil, 0, false
	}
	n := int(binary.BigEndian.Uint32(k))
	if len(k) != 12+n {
		return nil, 0, false
	}
	return k[4 : 4+n], int64(binary.BigEndian.Uint64(k[4+n:]) ^ (1 << 63)), true
}

func checkSessionKey(key []byte) error {
	if _, _, ok := parseSessionKey(key); !ok {
		return fmt.Errorf("key %x is no session key", key)
	}
	return nil
}

// sessionClosed reports whether a session ending at end is closed at
// stream time st.
func (a *Aggregate) sessionClosed(end, st int64) bool {
	return st != noTime && end+a.gap+a.grace < st
}

// sessionLate reports whether a record at ts is late at stream time st,
// given its key's sessions.
func (a *Aggregate) sessionLate(ss []session, ts, st int64) bool {
	if st == noTime || ts+a.grace >= st {
		return false
	}
	for _, s := range ss {
		if s.start <= ts && ts <= s.end && !a.sessionClosed(s.end, st) {
			return false
		}
	}
	return true
}

// sessionsOf returns the sessions of key in partition p as the
// transaction has them, by start.
func (t *AggregateTxn) sessionsOf(p int32, key []byte) ([]session, error) {
	pre := sessionPrefix(key)
	cand := map[string]bool{}
	// Every key of the range is len(pre)+8 bytes long, below pre+ff×9.
	to := append(bytes.Clone(pre), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	err := t.a.windows.Scan(p, pre, to, func(k, _ []byte) (bool, error) {
		cand[string(k)] = true
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	for k := range t.byKey[p][string(key)] {
		cand[k] = true
	}
	out := make([]session, 0, len(cand))
	for k := range cand {
		ac, ok, err := t.storedAcc(p, []byte(k))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		_, start, _ := parseSessionKey([]byte(k))
		out = append(out, session{k: k, start: start, end: ac.T, acc: ac})
	}
	slices.SortFunc(out, func(x, y session) int { return cmpInt(x.start, y.start) })
	return out, nil
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// decodeAcc reads a stored accumulator.
// storedAcc returns the accumulator of window key k as the transaction
// sees it; false if none is stored.
func (t *AggregateTxn) storedAcc(p int32, k []byte) (*acc, bool, error) {
	v, ok, err := t.txn.Get(t.a.windows, p, k)
	if err != nil || !ok {
		return nil, false, err
	}
	ac, err := t.a.decodeAcc(p, k, v)
	return ac, err == nil, err
}

func (a *Aggregate) decodeAcc(p int32, k, v []byte) (*acc, error) {
	ac := &acc{}
	if err := json.Unmarshal(v, ac); err != nil || len(ac.A) != len(a.cfg.Kinds) {
		return nil, fmt.Errorf("aggregate partition %d: stored window %x: bad accumulator %q", p, k, v)
	}
	return ac, nil
}

// lateSession is LateFrom for session windows.
func (t *AggregateTxn) lateSession(p int32, src string, key []byte, ts int64) (bool, error) {
	tp, err := t.get(p)
	if err != nil {
		return false, err
	}
	st := t.peek(tp, src, ts, t.set.wm.Now().UnixMilli())
	ss, err := t.sessionsOf(p, key)
	if err != nil {
		return false, err
	}
	return t.a.sessionLate(ss, ts, st), nil
}

// addSession is AddFrom for session windows: the record joins (and
// merges) the open sessions of its key it comes within gap of, or starts
// one. With emit update, the results are a retraction of each session
// whose bounds it replaced, then the merged session's result.
func (t *AggregateTxn) addSession(p int32, src string, key []byte, ts int64, values []any) (updated []Result, late bool, err error) {
	tp, err := t.get(p)
	if err != nil {
		return nil, false, err
	}
	now := t.set.wm.Now().UnixMilli()
	st := t.peek(tp, src, ts, now)
	ss, err := t.sessionsOf(p, key)
	if err != nil {
		return nil, false, err
	}
	if t.a.sessionLate(ss, ts, st) {
		t.observe(tp, src, ts, now, st)
		return nil, true, nil
	}
	joined, merged, start, err := t.a.join(ss, src, ts, st, values)
	if err != nil {
		return nil, false, err
	}
	t.observe(tp, src, ts, now, st)
	k := sessionKey(key, start)
	existed := false
	for _, s := range joined {
		if s.k == string(k) {
			existed = true
		} else {
			t.txn.Delete(t.a.windows, p, []byte(s.k))
			t.touchSession(p, key, []byte(s.k))
			tp.added--
		}
		if t.a.cfg.Update && (s.start != start || s.end != merged.T) {
			updated = append(updated, Result{Partition: p, Key: key, Window: Window{s.start, s.end}, Count: s.acc.C, MaxTime: s.acc.T, Retract: true})
		}
	}
	b, _ := json.Marshal(merged)
	t.txn.Set(t.a.windows, p, k, b)
	tp.minEnd = min(tp.minEnd, merged.T)
	t.touchSession(p, key, k)
	if !existed {
		tp.added++
	}
	if t.a.cfg.Update {
		updated = append(updated, t.a.result(p, key, Window{start, merged.T}, merged))
	}
	return updated, false, nil
}

// join returns the open sessions of ss that a record at ts joins, and
// the accumulator and start of the session they and the record make.
func (a *Aggregate) join(ss []session, src string, ts, st int64, values []any) (joined []session, merged *acc, start int64, err error) {
	merged = &acc{A: make([]aggAcc, len(a.cfg.Kinds))}
	start = ts
	for _, s := range ss {
		if s.start-a.gap <= ts && ts <= s.end+a.gap && !a.sessionClosed(s.end, st) {
			joined = append(joined, s)
			start = min(start, s.start)
			if err := a.merge(merged, s.acc); err != nil {
				return nil, nil, 0, err
			}
		}
	}
	if err := a.update(merged, src, ts, values); err != nil {
		return nil, nil, 0, err
	}
	return joined, merged, start, nil
}

// touchSession marks session key k of record key key changed.
func (t *AggregateTxn) touchSession(p int32, key, k []byte) {
	t.touched.add(p, k)
	m := t.byKey[p]
	if m == nil {
		m = map[string]map[string]bool{}
		t.byKey[p] = m
	}
	ks := m[string(key)]
	if ks == nil {
		ks = map[string]bool{}
		m[string(key)] = ks
	}
	ks[string(k)] = true
}

// merge folds accumulator from into into, as if into had seen from's
// records too: every aggregation merges exactly (sums are exact
// decimals; first and last compare event times as update does).
func (a *Aggregate) merge(into, from *acc) error {
	if from.C == 0 {
		return nil
	}
	if into.C == 0 {
		into.T = from.T
	}
	into.C += from.C
	into.T = max(into.T, from.T)
	for i, kind := range a.kinds {
		g, h := &into.A[i], from.A[i]
		var err error
		switch kind {
		case aggCount:
			continue
		case aggFirst, aggLast:
			if h.V != nil && !g.keeps(kind, h.U, h.T) {
				g.T, g.V, g.U = h.T, h.V, h.U
			}
		default:
			err = mergeNum(g, kind, h)
		}
		if err != nil {
			return fmt.Errorf("aggregation %d (%s): %w", i, a.cfg.Kinds[i], err)
		}
	}
	return nil
}

// mergeNum merges the sum, avg, min or max h into g.
func mergeNum(g *aggAcc, kind aggKind, h aggAcc) error {
	if h.N == 0 {
		return nil
	}
	if g.N == 0 {
		g.N, g.S = h.N, h.S
		return nil
	}
	cur, _, err := parseNum(g.S)
	if err != nil {
		return fmt.Errorf("stored %w", err)
	}
	n, _, err := parseNum(h.S)
	if err != nil {
		return fmt.Errorf("stored %w", err)
	}
	switch kind {
	case aggMin, aggMax:
		// Of equal values the earlier session's text stays, as the
		// first of equal values does in foldExtreme.
		if c := cmp(n, cur); (kind == aggMin && c < 0) || (kind == aggMax && c > 0) {
			g.S = h.S
		}
	case aggSum:
		if cur, err = add(cur, n); err != nil {
			return err
		}
		g.S = cur.text()
	case aggAvg:
		g.S = addExact(cur, n).text()
	}
	g.N += h.N
	return nil
}

// finishSessions deletes the sessions of partition p closed at its
// stream time, returning their results with emit final, by end and key.
func (t *AggregateTxn) finishSessions(p int32, tp *txnPart) ([]Result, error) {
	if !tp.advanced {
		// Every committed transaction deleted the sessions closed at its
		// stream time, and a session a record writes is open: with stream
		// time where it was, none more closed.
		return nil, nil
	}
	cand := map[string]bool{}
	// The stored sessions are read only when stream time may close one;
	// those the transaction wrote are its touched keys.
	scan := !tp.endsKnown || t.a.sessionClosed(tp.minEnd, tp.streamTime)
	minEnd := int64(math.MaxInt64)
	if scan {
		err := t.a.windows.Scan(p, nil, nil, func(k, v []byte) (bool, error) {
			var end struct {
				T int64 `json:"t"`
			}
			if err := json.Unmarshal(v, &end); err != nil {
				return false, fmt.Errorf("aggregate partition %d: stored window %x: bad accumulator %q", p, k, v)
			}
			if t.a.sessionClosed(end.T, tp.streamTime) {
				cand[string(k)] = true
			} else {
				minEnd = min(minEnd, end.T)
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	for k := range t.touched[p] {
		cand[k] = true
	}
	keys := make([]string, 0, len(cand))
	for k := range cand {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []Result
	for _, k := range keys {
		ac, ok, err := t.storedAcc(p, []byte(k))
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if !t.a.sessionClosed(ac.T, tp.streamTime) {
			minEnd = min(minEnd, ac.T)
			continue
		}
		key, start, _ := parseSessionKey([]byte(k))
		if !t.a.cfg.Update {
			out = append(out, t.a.result(p, bytes.Clone(key), Window{start, ac.T}, ac))
		}
		t.txn.Delete(t.a.windows, p, []byte(k))
		t.touched.add(p, []byte(k))
		tp.added--
	}
	if scan {
		tp.minEnd, tp.endsKnown = minEnd, true
	}
	// In the order they closed: by end, then key.
	slices.SortStableFunc(out, func(x, y Result) int {
		if c := cmpInt(x.Window.End, y.Window.End); c != 0 {
			return c
		}
		return bytes.Compare(x.Key, y.Key)
	})
	return out, nil
}
