package health

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// JoinHoldLimit is how long a JoinGroup or SyncGroup request without an
// answer counts as held by its group coordinator, not as silence. The
// coordinator holds a join until every member rejoins or the rebalance
// timeout passes (franz-go's default, 60 s, which exactly keeps), and
// franz-go gives up on the request after that plus its request timeout
// overhead (10 s).
const JoinHoldLimit = 70 * time.Second

var _ kgo.HookBrokerWrite = (*BrokerHealth)(nil)

// isJoin reports whether key is a request the group coordinator holds
// while the group rebalances.
func isJoin(key int16) bool {
	return key == kmsg.JoinGroup.Int16() || key == kmsg.SyncGroup.Int16()
}

// OnBrokerWrite implements kgo.HookBrokerWrite: it records a join or sync
// request sent, which the coordinator may hold for long.
func (h *BrokerHealth) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil || !isJoin(key) {
		return
	}
	addr := brokerAddr(meta)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.broker(addr).joinSent = time.Now()
}

// joinRead records that a join or sync request sent to meta was answered
// or failed.
func (h *BrokerHealth) joinRead(meta kgo.BrokerMetadata) {
	addr := brokerAddr(meta)
	h.mu.Lock()
	defer h.mu.Unlock()
	if b := h.brokers[addr]; b != nil {
		b.joinSent = time.Time{}
	}
}

// Joining returns the broker that holds a join or sync request of the
// client, unanswered for at most JoinHoldLimit, and when it was sent. A
// coordinator holds a join while the group rebalances: the broker is
// answering, slowly, and other brokers are asked nothing meanwhile.
func (h *BrokerHealth) Joining() (addr string, sent time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.joining()
}

// joining is Joining with h.mu held.
func (h *BrokerHealth) joining() (addr string, sent time.Time, ok bool) {
	for a, b := range h.brokers {
		if !b.joinSent.IsZero() && time.Since(b.joinSent) <= JoinHoldLimit && b.joinSent.After(sent) {
			addr, sent, ok = a, b.joinSent, true
		}
	}
	return addr, sent, ok
}
