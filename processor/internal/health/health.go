package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BrokerSilenceLimit is how long a client may go without a single answer
// from any broker before Ready reports it. A healthy consumer hears from a
// broker at least every fetch max wait (5 s) and heartbeat interval (3 s);
// three times the longer of the two is a broker outage, not a slow fetch.
const BrokerSilenceLimit = 15 * time.Second

// BrokerHealth is a franz-go hook that records when a client last read a
// response from a broker, and each broker's last answer and last
// connection or read error, for readiness. Add it to a client with
// kgo.WithHooks; read it from any goroutine. The zero value is not usable:
// use NewBrokerHealth.
type BrokerHealth struct {
	lastOK atomic.Int64 // Unix nanoseconds, any broker

	mu      sync.Mutex
	brokers map[string]*brokerState // by host:port
}

// brokerState is what one broker did last.
type brokerState struct {
	ok, failed time.Time
	since      time.Time // the first failure after the last answer
	err        error
	node       bool      // a broker of the cluster's metadata, not a seed address
	joinSent   time.Time // a join or sync request written and not answered; zero if none
}

var (
	_ kgo.HookBrokerRead    = (*BrokerHealth)(nil)
	_ kgo.HookBrokerConnect = (*BrokerHealth)(nil)
)

// NewBrokerHealth returns a BrokerHealth whose silence starts now.
func NewBrokerHealth() *BrokerHealth {
	h := &BrokerHealth{brokers: map[string]*brokerState{}}
	h.lastOK.Store(time.Now().UnixNano())
	return h
}

// LastAnswer is when a broker last answered, or when h was made if none
// has.
func (h *BrokerHealth) LastAnswer() time.Time { return time.Unix(0, h.lastOK.Load()) }

// OnBrokerRead implements kgo.HookBrokerRead.
func (h *BrokerHealth) OnBrokerRead(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	now := time.Now()
	if err == nil {
		h.lastOK.Store(now.UnixNano())
	}
	if isJoin(key) {
		h.joinRead(meta)
	}
	h.record(meta, now, err)
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h *BrokerHealth) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.record(meta, time.Now(), err)
	}
}

// brokerAddr is the host:port of meta, the key of BrokerHealth.brokers.
func brokerAddr(meta kgo.BrokerMetadata) string {
	return net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
}

// broker returns the state of the broker at addr, new if none; h.mu is
// held.
func (h *BrokerHealth) broker(addr string) *brokerState {
	b := h.brokers[addr]
	if b == nil {
		b = &brokerState{}
		h.brokers[addr] = b
	}
	return b
}

func (h *BrokerHealth) record(meta kgo.BrokerMetadata, at time.Time, err error) {
	addr := brokerAddr(meta)
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.broker(addr)
	b.node = meta.NodeID >= 0
	if err == nil {
		b.ok = at
		return
	}
	if !b.failed.After(b.ok) {
		b.since = at
	}
	b.failed, b.err = at, err
}

// Check returns nil if a broker answered within limit, else an error that
// says for how long none has, the brokers whose last word since was an
// error, and the brokers with no error since their last answer. A client
// asks only the brokers it needs: while it waits on one dead broker (a
// group coordinator it keeps rejoining, a leader it keeps producing to),
// live brokers that it has no request for are silent too, and the error
// must not read as if they were down. A join held by the group
// coordinator (Joining) is an answer under way, not silence.
//
// It also returns an error when one broker of the cluster (not a seed
// address) has failed every connection and request for longer than
// limit and is still being asked (its last failure is within limit): a
// broker the client needs, the leader of one of its partitions say, that
// it cannot reach, though others answer. A broker that failed and is no
// longer asked (its partitions moved) does not count.
func (h *BrokerHealth) Check(limit time.Duration) error {
	silent := time.Since(time.Unix(0, h.lastOK.Load()))
	if _, _, joining := h.Joining(); silent <= limit || joining {
		return h.checkOne(limit)
	}
	h.mu.Lock()
	var failing, quiet []string
	for addr, b := range h.brokers {
		switch {
		case b.failed.After(b.ok):
			failing = append(failing, fmt.Sprintf("broker %s: %v", addr, b.err))
		case !b.ok.IsZero():
			quiet = append(quiet, addr)
		}
	}
	h.mu.Unlock()
	slices.Sort(failing)
	slices.Sort(quiet)
	msg := fmt.Sprintf("no answer from any kafka broker for %s (limit %s); ", silent.Round(time.Second), limit)
	if len(failing) == 0 {
		msg += "last error: none"
	} else {
		msg += "failing: " + strings.Join(failing, "; ")
	}
	if len(quiet) > 0 {
		msg += "; no error from " + strings.Join(quiet, ", ") + " since their last answer (not asked, or a request still waiting)"
	}
	return errors.New(msg)
}

// checkOne is Check's rule for one unreachable broker while others answer.
func (h *BrokerHealth) checkOne(limit time.Duration) error {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	var failing []string
	for addr, b := range h.brokers {
		if b.node && b.failed.After(b.ok) && now.Sub(b.failed) <= limit && b.failed.Sub(b.since) > limit {
			failing = append(failing, fmt.Sprintf("broker %s failing for %s: %v", addr, now.Sub(b.since).Round(time.Second), b.err))
		}
	}
	if len(failing) == 0 {
		return nil
	}
	slices.Sort(failing)
	return fmt.Errorf("kafka broker unreachable while others answer (limit %s): %s", limit, strings.Join(failing, "; "))
}

// StallFactor is N in the readiness rule: a stage whose transaction (or a
// sink whose batch) has been open for N commit intervals, and at least
// StallMin, is not ready.
const (
	StallFactor = 10
	StallMin    = 10 * time.Second
)

// CheckStall returns nil if what (a transaction, a batch) opened at opened,
// in Unix nanoseconds (0: none is open), has been open for at most
// StallFactor commit intervals and StallMin; otherwise an error saying for
// how long it has been open.
func CheckStall(what string, opened int64, commitInterval time.Duration) error {
	if opened == 0 {
		return nil
	}
	limit := max(StallFactor*commitInterval, StallMin)
	if open := time.Since(time.Unix(0, opened)); open > limit {
		return fmt.Errorf("%s open for %s without committing (limit %s)", what, open.Round(time.Second), limit)
	}
	return nil
}

// Membership is whether a group consumer holds its consumer group
// membership, for readiness. A consumer whose group coordinator cannot be
// reached loses its partitions (franz-go calls OnPartitionsLost) and
// polls nothing: no transaction stalls and other brokers still answer, so
// only this shows it. Add Opts to the client's options (its callbacks
// call Starting, Revoked and Lost, and it records the group management
// error, kgo.HookGroupManageError), and call Assigned once the added
// partitions know where to resume (AdjustFetchOffsetsFn). Safe for
// concurrent use; the zero value has not joined yet.
type Membership struct {
	mu      sync.Mutex
	state   memberState
	pending map[int32]bool // assigned partitions not started yet
	lastErr error          // the last group management or start error
}

// memberState is where a Membership stands; partitions pending start
// are counted apart.
type memberState int

const (
	notJoined memberState = iota
	joined
	lost
)

var _ kgo.HookGroupManageError = (*Membership)(nil)

// Opts are the group callbacks that keep m: onAssigned, onRevoked and
// onLost (each may be nil) run first, then m records the change for
// topic's partitions; and m's hook.
func (m *Membership) Opts(topic string, onAssigned, onRevoked, onLost func(context.Context, *kgo.Client, map[string][]int32)) []kgo.Opt {
	then := func(f func(context.Context, *kgo.Client, map[string][]int32), record func([]int32)) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(ctx context.Context, cl *kgo.Client, parts map[string][]int32) {
			if f != nil {
				f(ctx, cl, parts)
			}
			record(parts[topic])
		}
	}
	return []kgo.Opt{
		kgo.WithHooks(m),
		kgo.OnPartitionsAssigned(then(onAssigned, m.Starting)),
		kgo.OnPartitionsRevoked(then(onRevoked, m.Revoked)),
		kgo.OnPartitionsLost(then(onLost, func([]int32) { m.Lost() })),
	}
}

// OnGroupManageError implements kgo.HookGroupManageError: franz-go calls
// it after OnPartitionsLost when a join, sync or heartbeat fails.
func (m *Membership) OnGroupManageError(err error) { m.failed(err) }

// Assigned records a started assignment, possibly empty: the consumer
// holds it and knows where to resume each partition.
func (m *Membership) Assigned() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.assigned()
}

// assigned is Assigned with m.mu held.
func (m *Membership) assigned() {
	clear(m.pending)
	m.lastErr = nil
	m.state = joined
}

// Starting records the partitions of an assignment (those newly added,
// as franz-go's OnPartitionsAssigned gives them) that are not started
// yet: their committed offsets or stored positions are still being read
// and checked (a kgo.AdjustFetchOffsetsFn). Call Assigned once they are,
// StartFailed when that fails (franz-go then joins again), and Revoked
// for partitions taken away meanwhile. With none pending (nothing added,
// or all taken away) the assignment counts as started. A consumer that
// cannot read its offsets, say because a partition's leader is cut off,
// stays not ready: it consumes nothing, though it is a member.
func (m *Membership) Starting(added []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == lost {
		m.state, m.lastErr = notJoined, nil // the group's error, mended by this join
	}
	if m.pending == nil {
		m.pending = map[int32]bool{}
	}
	for _, p := range added {
		m.pending[p] = true
	}
	if len(m.pending) == 0 {
		m.assigned()
	}
}

// Revoked forgets partitions taken away (OnPartitionsRevoked); if they
// were the last not started, the assignment counts as started.
func (m *Membership) Revoked(gone []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pending) == 0 {
		return
	}
	for _, p := range gone {
		delete(m.pending, p)
	}
	if len(m.pending) == 0 {
		m.assigned()
	}
}

// StartFailed records why starting the assigned partitions failed; they
// stay pending, and the consumer not ready, until an assignment starts.
func (m *Membership) StartFailed(err error) { m.failed(err) }

// failed records err as the reason the consumer is not ready.
func (m *Membership) failed(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastErr = err
}

// Lost records that the membership, and with it every partition, is
// gone until the next assignment.
func (m *Membership) Lost() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.pending)
	m.state = lost
}

// Reset forgets the membership, for a new client that has not joined.
func (m *Membership) Reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.pending)
	m.state, m.lastErr = notJoined, nil
}

// Check returns nil once the consumer holds a started assignment in
// group, else an error saying whether it has not joined yet, lost its
// membership or has partitions not started, with the last group or start
// error if there was one.
func (m *Membership) Check(group string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var cause string
	if m.lastErr != nil {
		cause = ": " + m.lastErr.Error()
	}
	switch {
	case m.state == lost:
		return fmt.Errorf("lost its partitions in group %s; rejoining%s", group, cause)
	case len(m.pending) > 0:
		return fmt.Errorf("partitions assigned in group %s but not started: reading where to resume them (committed offsets or stored positions)%s", group, cause)
	case m.state == joined:
		return nil
	}
	return fmt.Errorf("no partitions assigned yet in group %s%s", group, cause)
}
