package stage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/processor/internal/group"
)

// checkGroup refuses to start a session in a consumer group that another
// live consumer uses (group.CheckGroup): one reading another topic, or a
// sink (stage "sink-x" and sink "x" share group exactly-sink-x). It runs
// before every session, so before the stage is ready.
func (s *Stage) checkGroup(ctx context.Context, adm *kadm.Client) error {
	return group.CheckGroup(ctx, adm, group.GroupSelf{
		Group: s.cfg.Group(), InstanceID: s.cfg.TransactionalID(), Role: group.RoleStage, Topic: s.cfg.Input,
	})
}

// fencedErr returns the *group.FencedError once a session was fenced out of
// the group (FENCED_INSTANCE_ID), else nil.
func (s *Stage) fencedErr() error {
	if errp := s.fenced.Load(); errp != nil {
		return *errp
	}
	return nil
}

// afterFence returns the error a session ended with, judged by the
// stage's fence history (group.FenceHistory). A session ends fenced when the
// group fenced its member (a *group.FencedError) or when another producer
// initialized its transactional ID (PRODUCER_FENCED, or
// INVALID_PRODUCER_EPOCH from a broker that bumped the epoch; KIP-98,
// KIP-360). Both mean that another process may run under this instance's
// ID, and both count once per session. A stale producer epoch whose
// transaction the coordinator aborted at its timeout, with no producer
// since (timedOut), is no fence: it comes back as a plain error, and the
// session is rebuilt. The first fence in group.FenceRejoinWindow comes back
// as a plain error, so that Run rebuilds the session; a second comes back
// as a *group.FencedError, which stops Run. The newer of two live processes
// with one ID fences the older one first, so the older one stops first.
// Other errors come back unchanged.
func (s *Stage) afterFence(ctx context.Context, adm *kadm.Client, err error) error {
	var fenced *group.FencedError
	byGroup := errors.As(err, &fenced)
	if !byGroup && !errors.Is(err, kerr.ProducerFenced) && !errors.Is(err, kerr.InvalidProducerEpoch) {
		return err
	}
	var detail string
	if !byGroup {
		var timedOut bool
		if timedOut, detail = s.timedOut(context.WithoutCancel(ctx), adm); timedOut {
			s.log.Warn("the transaction coordinator aborted this instance's transaction after its transaction timeout; no other process took its transactional ID; rebuilding the session",
				"txn_id", s.cfg.TransactionalID(), "timeout", s.cfg.TransactionTimeout, "coordinator", detail,
				"why", "the process was paused or stalled for longer than the transaction timeout", "err", err)
			return fmt.Errorf("transaction aborted by its coordinator at its timeout (%v), rebuilding", err)
		}
		if detail != "" {
			err = fmt.Errorf("%w (%s)", err, detail)
		}
	}
	if !s.fences.Rejoin(time.Now()) {
		if byGroup {
			return err
		}
		return &group.FencedError{Group: s.cfg.Group(), InstanceID: s.cfg.TransactionalID(), Err: err}
	}
	cause := err
	if byGroup {
		cause = fenced.Err
	}
	// Possibly spurious: a group coordinator that moved can fence a
	// member nobody else shares an ID with.
	s.log.Warn("fenced; rejoining with a new session (fenced again within the window, the stage stops)",
		"group", s.cfg.Group(), "instance_id", s.cfg.TransactionalID(), "window", group.FenceRejoinWindow, "err", cause)
	s.fenced.Store(nil)
	return fmt.Errorf("fenced (%v), rejoining", cause)
}
