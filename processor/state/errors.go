package state

import "errors"

// ErrNotRestored is the error of a dedupe lookup in a partition whose store
// is not restored (not assigned, or revoked meanwhile): the record must not
// be processed, and its transaction must abort.
var ErrNotRestored = errors.New("partition state is not restored")

// ErrClosed is the error of a use of a closed DB.
var ErrClosed = errors.New("state store is closed")

// ErrNoChangelogPartition is the error of a changelog topic without a
// partition that the input topic has.
var ErrNoChangelogPartition = errors.New("changelog topic has no such partition")
