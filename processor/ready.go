package processor

import (
	"fmt"

	"github.com/exactly-io/exactly/processor/kit"
)

// Ready returns nil when the stage is healthy: it holds an assignment in
// its consumer group (kit.Membership) and was not fenced out of it (kit.FencedError), its last session did not fail, and no transaction has been open
// for longer than kit.StallFactor commit intervals. Otherwise the error says
// why. It is safe to call from any goroutine, e.g. a /readyz handler.
func (s *Stage) Ready() error {
	if err := s.fencedErr(); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	if errp := s.sessionErr.Load(); errp != nil && *errp != nil {
		return fmt.Errorf("stage %s: kafka session failing: %w", s.cfg.Stage, *errp)
	}
	// Unreachable brokers first: they are also why no partitions come.
	if err := s.brokers.Check(kit.BrokerSilenceLimit); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	if err := s.member.Check(s.cfg.Group()); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	what := "transaction"
	if s.cfg.Guarantee == AtLeastOnce {
		what = "batch" // polled, not yet committed: there is no transaction
	}
	if err := kit.CheckStall(what, s.txnOpened.Load(), s.cfg.CommitInterval); err != nil {
		return fmt.Errorf("stage %s: %w", s.cfg.Stage, err)
	}
	return nil
}

// partitionsGone forgets the lag of partitions this instance no longer
// owns, so that a scaled-out stage does not report stale lag.
