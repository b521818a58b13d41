package stage

import (
	"fmt"
	"strings"
	"time"

	"github.com/exactly-io/exactly/processor/internal/health"
)

// Ready returns nil when the stage is healthy: it holds an assignment in
// its consumer group (health.Membership) and was not fenced out of it
// (group.FencedError), its last session did not fail (or the session built
// after the failure has since committed a transaction, or has run for the
// stall limit without failing), no transaction has been open for longer
// than health.StallFactor commit intervals, and its transactions have not all
// aborted for a fault that may pass (a registry down) for that long. Otherwise the error says
// why (readiness.Rule.Check). It is safe to call from any goroutine, e.g.
// a /readyz handler.
func (s *Stage) Ready() error { return s.ready.Check() }

// initReady sets up the stage's readiness rule.
func (s *Stage) initReady() {
	r := &s.ready
	r.Name, r.Group, r.CommitInterval = "stage "+s.cfg.Stage, s.cfg.Group(), s.cfg.CommitInterval
	r.Failing, r.Open = "kafka session failing", "transaction"
	if s.cfg.Guarantee == AtLeastOnce {
		r.Open = "batch" // polled, not yet committed: there is no transaction
	}
	r.Fenced, r.Stuck, r.Restoring = s.fencedErr, s.stuck, s.restoring.check
	r.Brokers = health.NewBrokerHealth()
}

// stuck says why a stage whose session holds its assignment is not ready
// all the same: its transactional producer has waited for its producer
// ID, or its transactions have all aborted, for the stall limit.
func (s *Stage) stuck() error {
	if ws := s.tableWait.waitsNow(); len(ws) > 0 {
		msg := make([]string, len(ws))
		for i, w := range ws {
			msg[i] = w.String()
		}
		return fmt.Errorf("the join waits for an open transaction on its table before joining the records polled: %s", strings.Join(msg, "; "))
	}
	if s.cfg.Guarantee == ExactlyOnce && !s.producerReady.Load() {
		if at := s.sessionBuilt.Load(); at != 0 && time.Since(time.Unix(0, at)) >= s.stallLimit() {
			return fmt.Errorf("the transactional producer has had no producer ID for %s: InitProducerId waits for the transaction coordinator to end this transactional ID's open transaction (an output partition that refuses writes holds it up)",
				time.Since(time.Unix(0, at)).Round(time.Second))
		}
	}
	if at := s.retrying.Load(); at != 0 && time.Since(time.Unix(0, at)) >= s.stallLimit() {
		var last error
		if errp := s.retryErr.Load(); errp != nil {
			last = *errp
		}
		return fmt.Errorf("every transaction for %s aborted and was retried, none committed (the last for: %v)",
			time.Since(time.Unix(0, at)).Round(time.Second), last)
	}
	return nil
}

// stallLimit is how long a session may go without progress before the
// stage reads as not ready (readiness.Rule.StallLimit).
func (s *Stage) stallLimit() time.Duration { return s.ready.StallLimit() }
