package kit

import (
	"fmt"
	"net"
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
// response from a broker, and the last connection or read error, for
// readiness. Add it to a client with kgo.WithHooks; read it from any
// goroutine. The zero value is not usable: use NewBrokerHealth.
type BrokerHealth struct {
	lastOK  atomic.Int64 // Unix nanoseconds
	lastErr atomic.Pointer[string]
}

var (
	_ kgo.HookBrokerRead    = (*BrokerHealth)(nil)
	_ kgo.HookBrokerConnect = (*BrokerHealth)(nil)
)

// NewBrokerHealth returns a BrokerHealth whose silence starts now.
func NewBrokerHealth() *BrokerHealth {
	h := &BrokerHealth{}
	h.lastOK.Store(time.Now().UnixNano())
	return h
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (h *BrokerHealth) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		h.lastOK.Store(time.Now().UnixNano())
		return
	}
	h.fail(meta, err)
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (h *BrokerHealth) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.fail(meta, err)
	}
}

func (h *BrokerHealth) fail(meta kgo.BrokerMetadata, err error) {
	msg := fmt.Sprintf("broker %s: %v", net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), err)
	h.lastErr.Store(&msg)
}

// Check returns nil if a broker answered within limit, else an error that
// says for how long none has, and the last error seen.
func (h *BrokerHealth) Check(limit time.Duration) error {
	silent := time.Since(time.Unix(0, h.lastOK.Load()))
	if silent <= limit {
		return nil
	}
	last := "none"
	if p := h.lastErr.Load(); p != nil {
		last = *p
	}
	return fmt.Errorf("no answer from any kafka broker for %s (limit %s); last error: %s", silent.Round(time.Second), limit, last)
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
