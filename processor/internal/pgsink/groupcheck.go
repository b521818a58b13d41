package pgsink

import (
	"context"
	"errors"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
)

// checkGroup refuses to start in a consumer group that another live
// consumer uses (group.CheckGroup): one reading another topic, or a stage
// (stage "sink-x" and sink "x" share group exactly-sink-x). It runs
// before every client the sink starts, so before the sink is ready. A
// clash is a *fault.ConfigError, which s.retry does not retry.
func (s *Sink) checkGroup(ctx context.Context) error {
	err := group.CheckGroup(ctx, s.adm, group.GroupSelf{
		Group: s.cfg.Group(), InstanceID: s.cfg.GroupInstanceID(), Role: group.RoleSink, Topic: s.cfg.Input,
	})
	var cfgErr *fault.ConfigError
	if kafkaconn.IsFatal(err) && !errors.As(err, &cfgErr) {
		// Not authorized to describe the group, say: not retried.
		err = &fault.ConfigError{Err: err}
	}
	return err
}

// onFenced is the group.FenceWatch callback: the group fenced this instance
// (FENCED_INSTANCE_ID), so the loop ends and Run rejoins or stops
// (group.FenceHistory). It runs on franz-go's group
// goroutine and does not block.
func (s *Sink) onFenced(err error) {
	s.fatal.Store(&err)
	s.log.Error("fenced out of the consumer group; ending the client's loop", "group", s.cfg.Group(), "err", err)
	s.endLoop()
}

// endLoop ends the loop of the current Kafka client (Run then reads
// s.fatal). Safe from any goroutine.
func (s *Sink) endLoop() {
	if abort := s.abort.Load(); abort != nil {
		(*abort)()
	}
}

// fencedErr returns the *group.FencedError once the sink was fenced out of
// its group, else nil.
func (s *Sink) fencedErr() error {
	var fenced *group.FencedError
	if errp := s.fatal.Load(); errp != nil && errors.As(*errp, &fenced) {
		return *errp
	}
	return nil
}
