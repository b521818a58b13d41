package group

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// LeaveStaticGroup removes the static member instanceID from group
// (KIP-345 LeaveGroup by group.instance.id), with a client built from
// opts, so that the group rebalances now rather than after the session
// timeout: a static member does not leave on Close. Failures are logged,
// not returned: the session timeout then does the same, later.
func LeaveStaticGroup(ctx context.Context, log *slog.Logger, group, instanceID string, opts ...kgo.Opt) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		log.Warn("leave group", "group", group, "err", err)
		return
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instanceID).Reason("shutdown"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		log.Warn("leave group; the group rebalances after the session timeout instead", "group", group, "err", err)
		return
	}
	log.Info("left group", "group", group)
}
