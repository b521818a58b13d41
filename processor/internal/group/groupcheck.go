package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/exactly-io/exactly/processor/internal/fault"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Roles of a consumer in a group. The group consumer of each role sends
// client.id RoleClientID(kafka.client_id, role), so that CheckGroup can
// tell a stage from a sink in one group: their group IDs and static
// member IDs can coincide (stage "sink-x" and sink "x" both use group
// exactly-sink-x and, with one --instance-id, one group.instance.id).
const (
	RoleStage = "stage"
	RoleSink  = "sink"
)

// RoleClientID returns the client.id of role's group consumer:
// clientID + "-" + role, e.g. "exactly-stage".
func RoleClientID(clientID, role string) string { return clientID + "-" + role }

// roleOf returns the role that clientID ends with, or "" for a client
// of another program or of a version before roles.
func roleOf(clientID string) string {
	for _, r := range []string{RoleStage, RoleSink} {
		if strings.HasSuffix(clientID, "-"+r) {
			return r
		}
	}
	return ""
}

// GroupMember is one live member of a consumer group, as DescribeGroups
// returns it.
type GroupMember struct {
	MemberID, InstanceID, ClientID, Host string
	// Topics are the topics it subscribes to (ConsumerMemberMetadata),
	// nil if its protocol is not "consumer".
	Topics   []string
	Consumer bool
}

// GroupSelf is the consumer about to join a group: a stage or a sink
// (Role) reading Topic as static member InstanceID of Group.
type GroupSelf struct{ Group, InstanceID, Role, Topic string }

// CheckGroup describes self.Group and returns an error wrapping a
// *GroupClashError (and a *ConfigError: fatal) if a live member cannot
// share the group with self (see CheckMembers). Call it before joining:
// once joined, two consumers of one group split its partitions, and two
// with one group.instance.id fence each other (FENCED_INSTANCE_ID, see
// FencedError). A group with no live member passes. Describe errors are
// returned as they are, for the caller's retry.
func CheckGroup(ctx context.Context, adm *kadm.Client, self GroupSelf) error {
	described, err := adm.DescribeGroups(ctx, self.Group)
	if err != nil {
		return fmt.Errorf("describe consumer group %s: %w", self.Group, err)
	}
	g, ok := described[self.Group]
	if !ok {
		return nil
	}
	if errors.Is(g.Err, kerr.GroupIDNotFound) {
		// A group that never had a member (DescribeGroups v6+, KIP-1043).
		return nil
	}
	if g.Err != nil {
		return fmt.Errorf("describe consumer group %s: %w", self.Group, g.Err)
	}
	members := make([]GroupMember, 0, len(g.Members))
	for _, m := range g.Members {
		gm := GroupMember{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
		if m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		if c, ok := m.Join.AsConsumer(); ok && (g.ProtocolType == "consumer" || g.ProtocolType == "") {
			gm.Consumer, gm.Topics = true, c.Topics
		}
		members = append(members, gm)
	}
	return CheckMembers(self, members)
}

// CheckMembers returns a *ConfigError wrapping a *GroupClashError for the
// first member that cannot share self.Group with self:
//   - one that is not a Kafka consumer (its protocol type is not
//     "consumer": a Connect worker, say);
//   - one that subscribes to any topic but self.Topic;
//   - one whose client.id names the other role (RoleClientID).
//
// A member with self's own group.instance.id that passes is this
// instance's predecessor, which the join replaces (KIP-345). A member
// whose role is unknown (another program, an older version) is judged by
// its topics alone.
func CheckMembers(self GroupSelf, members []GroupMember) error {
	for _, m := range members {
		var reason string
		switch role := roleOf(m.ClientID); {
		case !m.Consumer:
			reason = "it is not a Kafka consumer"
		case len(m.Topics) == 0 && (role == "" || role == self.Role):
			// No subscription to judge: the group is rebalancing
			// (DescribeGroups then answers without the members'
			// metadata). Nothing says it is another consumer.
			continue
		case !slices.Equal(m.Topics, []string{self.Topic}):
			reason = fmt.Sprintf("it consumes topics %v, this %s consumes %s", m.Topics, self.Role, self.Topic)
		case role != "" && role != self.Role:
			reason = fmt.Sprintf("it is a %s, this is a %s (both consume %s)", role, self.Role, self.Topic)
		default:
			continue
		}
		return &fault.ConfigError{Err: &GroupClashError{Group: self.Group, Member: m, Reason: reason}}
	}
	return nil
}
