package group

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// FencedError is a static member (KIP-345) that the group coordinator
// fenced (FENCED_INSTANCE_ID): most often another live process joined
// group Group with the same group.instance.id InstanceID. A restart of
// this instance fences its predecessor on purpose (a paused or
// partitioned "zombie" must stop), and two processes that both rejoin
// fence each other in turn forever, each processing nothing. A stage or
// sink rejoins after a first fence, which a moved coordinator can send
// spuriously, and returns this error, fatal, at a second one within
// FenceRejoinWindow (see FenceHistory).
type FencedError struct {
	Group, InstanceID string
	Err               error
}

func (e *FencedError) Error() string {
	by := fmt.Sprintf("fenced out of consumer group %s: another process joined it with group.instance.id %s (KIP-345)", e.Group, e.InstanceID)
	if errors.Is(e.Err, kerr.ProducerFenced) || errors.Is(e.Err, kerr.InvalidProducerEpoch) {
		by = fmt.Sprintf("fenced in consumer group %s: another process initialized transactional ID %s (KIP-98)", e.Group, e.InstanceID)
	}
	return fmt.Sprintf("%s and took this instance's place; "+
		"if that process is this instance's restart, this one was a stale copy and stopping is right; otherwise "+
		"two live instances share one --instance-id, or two topology files name a stage or a sink alike, "+
		"or a stage named sink-<x> and a sink named <x> share group exactly-sink-<x>: "+
		"give each running instance its own --instance-id and each stage and sink a name unique across files: %v",
		by, e.Err)
}

func (e *FencedError) Unwrap() error { return e.Err }

// GroupClashError is a live member of consumer group Group that cannot
// share it with the consumer about to join (CheckGroup): it consumes
// other topics, or it is of the other role (a stage in a sink's group, or
// the reverse). Two such consumers would split the topic's partitions
// between them, each silently skipping the other's.
type GroupClashError struct {
	Group  string
	Member GroupMember
	Reason string // what differs, e.g. "it consumes topics [a], this stage consumes b"
}

func (e *GroupClashError) Error() string {
	id := e.Member.MemberID
	if e.Member.InstanceID != "" {
		id = "group.instance.id " + e.Member.InstanceID
	}
	return fmt.Sprintf("consumer group %s is in use by another consumer (%s, client.id %s, host %s): %s; "+
		"a group belongs to one stage or one sink reading one topic: two topology files name a stage or a sink alike, "+
		"or a stage named sink-<x> and a sink named <x> share group exactly-sink-<x>; rename one "+
		"(or, when changing what a stage or sink reads, stop all of its instances first)",
		e.Group, id, e.Member.ClientID, e.Member.Host, e.Reason)
}
