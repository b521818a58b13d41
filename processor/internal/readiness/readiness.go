// Package readiness is the /readyz rule that stages and sinks share: what
// their loops and consumer groups record, and the order in which Check
// names why one is not ready.
package readiness

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/exactly-io/exactly/processor/internal/health"
)

// Rule is the readiness of one stage or sink. Its exported fields are set
// before the component runs; its methods are safe for concurrent use
// (Check is called from a /readyz handler).
type Rule struct {
	// Name starts every reason: "stage orders", "sink orders-pg".
	Name string
	// Group is the component's consumer group, named in the reasons of
	// its membership.
	Group string
	// CommitInterval sets the stall limit (StallLimit).
	CommitInterval time.Duration
	// Failing words a failure (see Fail): "kafka session failing",
	// "retrying".
	Failing string
	// Open names what can stall: "transaction" or "batch".
	Open string
	// The component's own reasons, each nil if it has none (see Check).
	// Waiting says where an open batch waits, "" if nowhere in
	// particular.
	Fenced, Input, Stuck func() error
	Waiting              func() string
	// Restoring is a restore of state under way, nil if none (or the
	// component has no state): it comes before the Kafka reasons, since
	// a restore runs before the group records the assignment.
	Restoring func() error

	// Brokers and Member are fed by the hooks of the component's Kafka
	// clients. Brokers must be set (health.NewBrokerHealth).
	Brokers *health.BrokerHealth
	Member  health.Membership

	failing atomic.Pointer[error]
	up      atomic.Int64 // Unix nanoseconds the session after a failure was up; 0 before
	opened  atomic.Int64 // Unix nanoseconds the open transaction or batch began; 0 when none
}

// Check returns nil when the component is ready, else the first of these
// reasons, after its Name:
//  1. Fenced: it was fenced out of its consumer group;
//  2. a failure (Fail) that the session built after it has not outrun:
//     run for the stall limit since it was up (Up);
//  3. Input: its input topic is gone;
//  4. Restoring: it is restoring the state of assigned partitions, and
//     what the restore waits for;
//  5. Kafka: it holds no assignment in its group, or no broker answers;
//     both when both, since silent brokers are one reason no partitions
//     come. A join the group coordinator holds (while another member is
//     slow to rejoin) is named as the rebalance it is, not as silence;
//  6. Stuck: the component is stuck for a reason of its own (a producer
//     without its producer ID, transactions that all abort);
//  7. a transaction or batch open for longer than the stall limit, and
//     where it waits (Waiting).
func (r *Rule) Check() error {
	for _, reason := range []func() error{r.Fenced, r.failure, r.Input, r.Restoring, r.kafka, r.Stuck, r.stall} {
		if reason == nil {
			continue
		}
		if err := reason(); err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
	}
	return nil
}

func (r *Rule) failure() error {
	if errp := r.failing.Load(); errp != nil && *errp != nil && !r.recovered() {
		return fmt.Errorf("%s: %w", r.Failing, *errp)
	}
	return nil
}

func (r *Rule) kafka() error {
	memberErr, brokerErr := r.Member.Check(r.Group), r.Brokers.Check(health.BrokerSilenceLimit)
	if addr, sent, ok := r.Brokers.Joining(); memberErr != nil && ok {
		memberErr = fmt.Errorf("%w; the group is rebalancing: waiting to join it, the coordinator (broker %s) has held the join for %s until every member rejoins",
			memberErr, addr, time.Since(sent).Round(time.Second))
	}
	if memberErr != nil && brokerErr != nil {
		return fmt.Errorf("%w; and %w", memberErr, brokerErr)
	}
	if memberErr != nil {
		return memberErr
	}
	return brokerErr
}

func (r *Rule) stall() error {
	err := health.CheckStall(r.Open, r.opened.Load(), r.CommitInterval)
	if err != nil && r.Waiting != nil {
		if w := r.Waiting(); w != "" {
			return fmt.Errorf("%w: %s", err, w)
		}
	}
	return err
}

// StallLimit is how long a transaction or batch may stay open, and a
// session go without progress, before the component reads as not ready:
// health.StallFactor commit intervals, at least health.StallMin.
func (r *Rule) StallLimit() time.Duration {
	return max(health.StallFactor*r.CommitInterval, health.StallMin)
}

// Fail records that the component is failing with err; nil clears it (a
// commit, a call that succeeded).
func (r *Rule) Fail(err error) {
	if err == nil {
		r.failing.Store(nil)
		return
	}
	r.failing.Store(&err)
}

// Up records that the session is up (assigned, and able to produce), if
// it was not already: a failure is forgotten once the session has run for
// the stall limit since. This covers an idle component, which commits
// nothing; a fault that recurs at every rebuild (a dead-letter topic
// deleted, say) ends each session well before that, so the component does
// not flap to ready between rebuilds.
func (r *Rule) Up() { r.up.CompareAndSwap(0, time.Now().UnixNano()) }

// Rebuilding records that the session failed with err and is being
// rebuilt: nothing is assigned or open, and the next session is not up.
func (r *Rule) Rebuilding(err error) {
	r.Member.Reset()
	r.opened.Store(0)
	r.up.Store(0)
	r.Fail(err)
}

// Opened records that a transaction or batch began at at.
func (r *Rule) Opened(at time.Time) { r.opened.Store(at.UnixNano()) }

// Closed records that the open transaction or batch ended.
func (r *Rule) Closed() { r.opened.Store(0) }

func (r *Rule) recovered() bool {
	up := r.up.Load()
	return up != 0 && time.Since(time.Unix(0, up)) >= r.StallLimit()
}
