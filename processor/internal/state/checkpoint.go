package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Checkpoint is where one partition of a stateful step's stores stands in
// its changelog partition: the store holds exactly the committed changelog
// records below Offset. It is written in the Pebble batch that applies
// the changes it accounts for (a committed transaction's, or a batch of a
// restore), so the store and its checkpoint never disagree; the changes of
// an aborted transaction are never applied, so never checkpointed.
type Checkpoint struct {
	// TopicID is the changelog topic's ID (KIP-516): a topic deleted and
	// created again under the same name has another.
	TopicID [16]byte
	// Offset is the next changelog offset to read: the end offset after a
	// committed transaction's last changelog record, or where a restore
	// stopped.
	Offset int64
	// Since, Unix ms, is a time before which no tombstone at or after
	// Offset that deletes a key of the store can have been compacted away
	// by then + delete.retention.ms: Kafka keeps a tombstone at least that
	// long after the cleaner first sees it, and the cleaner removes the
	// value a tombstone deletes no later than the tombstone itself.
	Since int64
	// StreamTime (Unix ms, noTime before any record) and Entries are the
	// partition's bookkeeping as of Offset.
	StreamTime, Entries int64
	// Clocks are the partition's source clocks as of Offset (see
	// watermark.go); nil without any.
	Clocks map[string]int64
}

// ChangelogPartition is what a restore learns of a changelog partition
// before reading it.
type ChangelogPartition struct {
	TopicID    [16]byte
	Start, End int64 // log start offset and high watermark
	// DeleteRetention is the topic's delete.retention.ms; 0 when unknown.
	DeleteRetention time.Duration
}

// Check returns nil if a restore may resume from c: the changelog is the
// same topic, still holds every record from c.Offset on, including every
// tombstone, and does not end before it. Otherwise it returns why not
// (ErrCheckpoint), and the store must be rebuilt from the start.
func (c Checkpoint) Check(cl ChangelogPartition, now time.Time) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCheckpoint, fmt.Sprintf(format, args...))
	}
	lost := func(format string, args ...any) error {
		return fmt.Errorf("%w: %w: %s", ErrCheckpoint, ErrStateLost, fmt.Sprintf(format, args...))
	}
	switch {
	case c.TopicID != cl.TopicID:
		return lost("the changelog topic was recreated (topic ID %x, checkpoint of %x)", cl.TopicID, c.TopicID)
	case c.Offset < cl.Start:
		return lost("the changelog starts at offset %d, after the checkpoint's %d (records were deleted)", cl.Start, c.Offset)
	case c.Offset > cl.End:
		return lost("the changelog ends at offset %d, before the checkpoint's %d (it was truncated)", cl.End, c.Offset)
	case cl.DeleteRetention <= 0:
		return bad("the changelog's delete.retention.ms is unknown (tombstones after the checkpoint may be gone)")
	case now.UnixMilli()-c.Since >= cl.DeleteRetention.Milliseconds():
		return bad("the checkpoint is older than the changelog's delete.retention.ms (%s): tombstones after it may be compacted away", cl.DeleteRetention)
	}
	return nil
}

const checkpointLen = 1 + 16 + 4*8

// encode is format version 1, or 2 with source clocks after the fixed
// part (encodeStreamTime's text).
func (c Checkpoint) encode() []byte {
	b := make([]byte, 0, checkpointLen)
	b = append(b, 1) // format version
	b = append(b, c.TopicID[:]...)
	for _, n := range []int64{c.Offset, c.Since, c.StreamTime, c.Entries} {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if len(c.Clocks) > 0 {
		b[0] = 2
		b = append(b, encodeStreamTime(0, c.Clocks)...)
	}
	return b
}

func decodeCheckpoint(b []byte) (Checkpoint, error) {
	if len(b) < checkpointLen || (b[0] != 1 || len(b) != checkpointLen) && b[0] != 2 {
		return Checkpoint{}, fmt.Errorf("bad checkpoint %x", b)
	}
	var c Checkpoint
	copy(c.TopicID[:], b[1:17])
	n := func(i int) int64 { return int64(binary.BigEndian.Uint64(b[17+8*i:])) }
	c.Offset, c.Since, c.StreamTime, c.Entries = n(0), n(1), n(2), n(3)
	if b[0] == 2 {
		_, clocks, err := decodeStreamTime(b[checkpointLen:])
		if err != nil || len(clocks) == 0 {
			return Checkpoint{}, fmt.Errorf("bad checkpoint %x", b)
		}
		c.Clocks = clocks
	}
	return c, nil
}

// checkpointKey is the database key of the checkpoint of partition p of
// the step whose first store is s.
func checkpointKey(s *Store, p int32) []byte {
	k := append([]byte(metaPrefix+"checkpoint\x00"), s.name...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint32(k, uint32(p))
}

// checkpoint returns the checkpoint of partition p of s, if any.
func (s *Store) checkpoint(p int32) (c Checkpoint, ok bool, err error) {
	err = s.db.use(func() error {
		v, closer, err := s.db.db.Get(checkpointKey(s, p))
		if errors.Is(err, pebble.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		defer closer.Close()
		c, err = decodeCheckpoint(v)
		ok = err == nil
		return nil // a bad checkpoint is no checkpoint
	})
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("state %s: read checkpoint of partition %d: %w", s.name, p, err)
	}
	return c, ok, nil
}

// setCheckpoint writes c as the checkpoint of partition p of s in b.
func (b *Batch) setCheckpoint(s *Store, p int32, c Checkpoint) {
	_ = b.b.Set(checkpointKey(s, p), c.encode(), nil)
}
