package processor

import (
	"context"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/kit"
)

// checkGroup refuses to start a session in a consumer group that another
// live consumer uses (kit.CheckGroup): one reading another topic, or a
// sink (stage "sink-x" and sink "x" share group exactly-sink-x). It runs
// before every session, so before the stage is ready.
func (s *Stage) checkGroup(ctx context.Context, adm *kadm.Client) error {
	return kit.CheckGroup(ctx, adm, kit.GroupSelf{
		Group: s.cfg.Group(), InstanceID: s.cfg.TransactionalID(), Role: kit.RoleStage, Topic: s.cfg.Input,
	})
}

// fencedErr returns the *kit.FencedError once a session was fenced out of
// the group (FENCED_INSTANCE_ID), else nil.
func (s *Stage) fencedErr() error {
	if errp := s.fenced.Load(); errp != nil {
		return *errp
	}
	return nil
}
