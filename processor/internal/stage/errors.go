package stage

import "errors"

// ErrNoCommittedOffsets is the resume guard's refusal (see ResumeError):
// the stage's group lost its offsets while the stage's outputs remain.
var ErrNoCommittedOffsets = errors.New("no committed offsets, but outputs exist")

// errTableRecreated and errTablePartitionsAdded are changes of a running
// join's table topic that a new session follows: it restores the table as
// a restart does (tableLayoutError).
var (
	errTableRecreated       = errors.New("the join's table topic was deleted and created again: the table is rebuilt from the new topic, as at a restart")
	errTablePartitionsAdded = errors.New("partitions were added to the global join's table topic: they are restored, as at a restart")
)

// rekeyTable is the way out of a co-partitioned join whose table and
// input no longer share a partition count: partitions added to a topic
// leave the keys already written in their old partitions, so adding as
// many to the other topic does not restore one keying.
const rekeyTable = "adding partitions does not move the keys already written: write the table anew, keyed alike, into a topic created with the input's partition count, and point the join at it, or use mode: global"

// errTableWaitTooLong: a join's table read waited for an open transaction
// on the table until the stage's own transaction would time out.
var errTableWaitTooLong = errors.New("an open transaction on the join's table outlasted the stage's transaction: aborted, its records are polled again")
