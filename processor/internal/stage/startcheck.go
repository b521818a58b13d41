package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/serde"
)

// checkStart checks, once before the first session, what only the broker
// can tell about the stage's configuration: that its input, output and
// dead-letter topics exist, and that its transaction timeout and session
// timeout are within the broker's limits. A misconfiguration is a
// *fault.ConfigError (Run returns it: the same file fails again); a request
// that fails (a broker not up yet) is retried with backoff, the stage not
// ready meanwhile. Limits the broker does not let the stage read (no
// DescribeConfigs ACL) are logged and skipped.
func (s *Stage) checkStart(ctx context.Context, adm *kadm.Client) error {
	backoff := backoff.NewBackoff(100*time.Millisecond, 5*time.Second)
	for {
		err := s.checkTopics(ctx, adm)
		if err == nil {
			err = s.checkChangelog(ctx, adm)
		}
		if err == nil {
			err = s.checkLimits(ctx, adm)
		}
		if err == nil {
			err = s.checkRegistry(ctx)
		}
		if err == nil || kafkaconn.IsFatal(err) {
			s.ready.Fail(nil)
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		s.ready.Fail(err)
		wait := backoff.Next()
		s.log.Warn("start check failed; retrying", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// checkRegistry is checkStart's look at the schema registries of the
// input and output codecs (serde.CheckRegistry): an output schema that the
// subject refuses, or credentials that the registry refuses, stop the
// stage now (serde.ErrRegistryRefused, fatal) instead of at its first
// record. A registry that does not answer is logged and left to the
// records, which wait for it (ErrTransient): the stage starts as before.
func (s *Stage) checkRegistry(ctx context.Context) error {
	for _, c := range []struct {
		role  string
		codec serde.Codec
	}{{"input", s.in}, {"output", s.out}} {
		err := serde.CheckRegistry(ctx, c.codec)
		switch {
		case serde.IsRegistryRefused(err):
			return &fault.ConfigError{Err: fmt.Errorf("%s registry: %w", c.role, err)}
		case err != nil:
			s.log.Warn("schema registry check failed; records wait for the registry", "role", c.role, "err", err)
		}
	}
	return nil
}

// checkTopics is checkStart's look at the topics.
func (s *Stage) checkTopics(ctx context.Context, adm *kadm.Client) error {
	o := s.cfg.Origin
	return reader.CheckTopicsExist(ctx, adm, o,
		reader.NeededTopic{Role: "input", Name: s.cfg.Input, Field: o.Field("input.topic")},
		reader.NeededTopic{Role: "output", Name: s.cfg.Output, Field: o.Field("output.topic")},
		reader.NeededTopic{Role: "dead-letter", Name: s.cfg.DeadLetter, Field: o.Field("dead_letter.topic")},
	)
}

// checkLimits is checkStart's look at the broker's timeout limits. Only
// a transport error is returned unwrapped, for a retry; unreadable
// configs are a warning.
func (s *Stage) checkLimits(ctx context.Context, adm *kadm.Client) error {
	lim, err := reader.ReadBrokerLimits(ctx, adm)
	if err != nil {
		reader.WarnLimitsUnread(s.log, err)
		return nil
	}
	var errs []error
	if s.cfg.Guarantee == ExactlyOnce {
		errs = append(errs, lim.CheckTransactionTimeout(s.cfg.TransactionTimeout, s.cfg.Origin.Abs("kafka.transaction_timeout")))
	}
	errs = append(errs, lim.CheckSessionTimeout(s.cfg.SessionTimeout, s.cfg.Origin.Field("session_timeout")))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("start check: %w", err)
	}
	return nil
}
