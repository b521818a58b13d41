package stage

import (
	"fmt"
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
// why. It is safe to call from any goroutine, e.g. a /readyz handler.
func (s *Stage) Ready() error {
	if err := s.fencedErr(); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	if errp := s.sessionErr.Load(); errp != nil && *errp != nil && !s.recovered() {
		return fmt.Errorf("stage %s: kafka session failing: %w", s.cfg.Stage, *errp)
	}
	// Unreachable brokers first: they are also why no partitions come.
	if err := s.brokers.Check(health.BrokerSilenceLimit); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	if err := s.member.Check(s.cfg.Group()); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	if s.cfg.Guarantee == ExactlyOnce && !s.producerReady.Load() {
		if at := s.sessionBuilt.Load(); at != 0 && time.Since(time.Unix(0, at)) >= s.stallLimit() {
			return fmt.Errorf("stage %s: the transactional producer has had no producer ID for %s: InitProducerId waits for the transaction coordinator to end this transactional ID's open transaction (an output partition that refuses writes holds it up)",
				s.cfg.Stage, time.Since(time.Unix(0, at)).Round(time.Second))
		}
	}
	if at := s.retrying.Load(); at != 0 && time.Since(time.Unix(0, at)) >= s.stallLimit() {
		var last error
		if errp := s.retryErr.Load(); errp != nil {
			last = *errp
		}
		return fmt.Errorf("stage %s: every transaction for %s aborted and was retried, none committed (the last for: %v)",
			s.cfg.Stage, time.Since(time.Unix(0, at)).Round(time.Second), last)
	}
	what := "transaction"
	if s.cfg.Guarantee == AtLeastOnce {
		what = "batch" // polled, not yet committed: there is no transaction
	}
	if err := health.CheckStall(what, s.txnOpened.Load(), s.cfg.CommitInterval); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	return nil
}

// recovered reports whether the session built after a failure has run
// for the stall limit (health.StallFactor commit intervals, at least
// health.StallMin) since its first assignment without failing. A commit
// clears the failure at once; this covers an idle stage, which commits
// nothing. A fault that recurs at every rebuild (a dead-letter topic
// deleted, say) ends each session well before that, so the stage does
// not flap to ready between rebuilds.
func (s *Stage) recovered() bool {
	up := s.sessionUp.Load()
	return up != 0 && time.Since(time.Unix(0, up)) >= s.stallLimit()
}

// stallLimit is how long a session may go without progress before the
// stage reads as not ready: health.StallFactor commit intervals, at least
// health.StallMin.
func (s *Stage) stallLimit() time.Duration {
	return max(health.StallFactor*s.cfg.CommitInterval, health.StallMin)
}

// partitionsGone forgets the lag of partitions this instance no longer
// owns, so that a scaled-out stage does not report stale lag.
