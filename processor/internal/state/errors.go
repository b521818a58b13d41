package state

import (
	"errors"
	"fmt"
)

// ErrNotRestored is the error of a dedupe lookup in a partition whose store
// is not restored (not assigned, or revoked meanwhile): the record must not
// be processed, and its transaction must abort.
var ErrNotRestored = errors.New("partition state is not restored")

// ErrClosed is the error of a use of a closed DB.
var ErrClosed = errors.New("state store is closed")

// ErrNoChangelogPartition is the error of a changelog topic without a
// partition that the input topic has.
var ErrNoChangelogPartition = errors.New("changelog topic has no such partition")

// ErrOverflow is the error of a sum of integers beyond int64: the record
// that would overflow it is a dead letter, never wrapped.
var ErrOverflow = errors.New("sum overflows a 64-bit integer (int64)")

// ErrNotNumber is the error of a sum, min, max or avg of a value that is
// not a number.
var ErrNotNumber = errors.New("not a number")

// ErrLocked is the error of opening a state directory that another process
// holds: two instances must never share one.
var ErrLocked = errors.New("state directory is in use by another process")

// ErrCheckpoint is the error (wrapped with the reason) of a checkpoint that
// does not match its changelog partition: the store is rebuilt from the
// changelog's start.
var ErrCheckpoint = errors.New("checkpoint not usable")

// ErrStateLost is, beside ErrCheckpoint, the error of a checkpoint whose
// changelog no longer holds the state it recorded: the changelog topic was
// recreated (another topic ID), records before the checkpoint were deleted,
// or it was truncated. The rebuilt store lacks that state (a dedupe step
// lets the IDs it held pass again; an aggregate's windows start over).
var ErrStateLost = errors.New("state lost")

// GapError is the error of a changelog read that cannot prove it read
// every record from its start: the partition's log start offset moved past
// Next, the next offset it had to read, so records between were deleted
// unread (DeleteRecords, or retention on a topic not compacted alone). It
// is ErrStateLost: the store lacks what they held.
type GapError struct {
	Topic     string
	Partition int32
	Next      int64
}

func (e *GapError) Error() string {
	return fmt.Sprintf("changelog %s partition %d: records from offset %d on were deleted before the restore read them (the log start offset moved past it)",
		e.Topic, e.Partition, e.Next)
}

// Unwrap makes a GapError ErrStateLost.
func (e *GapError) Unwrap() error { return ErrStateLost }
