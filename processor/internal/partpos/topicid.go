package partpos

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// A stored position belongs to one incarnation of a topic. Kafka gives
// each incarnation a topic ID (KIP-516): a topic deleted and created again
// under the same name gets a new ID and starts again at offset 0. The
// stage keeps the ID in the commit metadata of its group offsets, the sink
// beside its stored positions; StartAt decides where a stage's partition
// starts from what was stored and what the broker has now (the sink
// applies the same rules but one, in pgsink).

// commitMetadataPrefix starts the commit metadata the stage writes. Brokers
// limit metadata to offset.metadata.max.bytes (4096 by default); ours is
// under 60 bytes.
const commitMetadataPrefix = "exactly/v1 topic_id="

// CommitMetadata returns the offset commit metadata that records topic ID
// id (16 bytes): "exactly/v1 topic_id=<32 hex digits>".
func CommitMetadata(id [16]byte) string {
	return commitMetadataPrefix + hex.EncodeToString(id[:])
}

// ParseCommitMetadata returns the topic ID recorded in commit metadata m,
// and false when m was not written by CommitMetadata (empty, written
// before topic IDs were recorded, or by another tool).
func ParseCommitMetadata(m string) (id [16]byte, ok bool) {
	h, found := strings.CutPrefix(m, commitMetadataPrefix)
	if !found || len(h) != 32 {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return id, false
	}
	return id, true
}

// TopicIDString is the text of a topic ID in logs: 32 hex digits, or
// "none" for the zero ID (unknown).
func TopicIDString(id [16]byte) string {
	if id == ([16]byte{}) {
		return "none"
	}
	return hex.EncodeToString(id[:])
}

// Reasons a stored position is not resumed, the reason label of
// exactly_<stage|sink>_topic_recreations_total (RetentionPassed is logged
// only: it is no recreation).
const (
	// RecreatedNewID: the stored topic ID differs from the broker's.
	RecreatedNewID = "topic_id_changed"
	// RecreatedAboveEnd: no stored ID, and the stored offset is above
	// the partition's high watermark: a new incarnation that has not
	// reached it yet.
	RecreatedAboveEnd = "offset_above_high_watermark"
	// LogTruncated: same ID, stored offset above the high watermark: the
	// log lost its tail (an unclean leader election, say). The sink counts
	// it under its own reason label, "truncated".
	LogTruncated = "log_truncated"
	// RetentionPassed: the stored offset is below the log start offset:
	// retention deleted records that were never read.
	RetentionPassed = "below_log_start"
)

// StoredPosition is a position as stored: the next offset to read and the
// topic ID it was stored under (zero when none was stored).
type StoredPosition struct {
	Offset  int64
	TopicID [16]byte
}

// PartitionState is what the broker has now for a partition: its topic's
// ID, its log start offset and its high watermark.
type PartitionState struct {
	TopicID                 [16]byte
	LogStart, HighWatermark int64
}

// StartAt decides where a stage's partition resumes, by the rules of
// operating.md, "Topic identity and start positions":
//   - stored ID differs from the broker's: the topic was recreated; start
//     at the new incarnation's log start (RecreatedNewID);
//   - no stored ID and the offset is above the high watermark: treated
//     as recreated, start at the log start (RecreatedAboveEnd);
//   - same ID and the offset is above the high watermark: the log was
//     truncated; resume at the high watermark (LogTruncated). The sink,
//     whose event-ID keys absorb a re-read, reads such a partition from
//     its log start instead (pgsink's decideStart): records appended
//     after the truncation may lie below the high watermark it sees;
//   - offset below the log start: retention deleted unread records;
//     start at the log start (RetentionPassed);
//   - otherwise resume at the stored offset (reason "").
func StartAt(stored StoredPosition, now PartitionState) (offset int64, reason string) {
	var zero [16]byte
	switch {
	case stored.TopicID != zero && now.TopicID != zero && stored.TopicID != now.TopicID:
		return now.LogStart, RecreatedNewID
	case stored.Offset > now.HighWatermark && stored.TopicID == zero:
		return now.LogStart, RecreatedAboveEnd
	case stored.Offset > now.HighWatermark:
		return now.HighWatermark, LogTruncated
	case stored.Offset < now.LogStart:
		return now.LogStart, RetentionPassed
	}
	return stored.Offset, ""
}

// TopicChangedError is an input topic whose ID is no longer the one a
// client was consuming: deleted, or deleted and created again.
type TopicChangedError struct {
	Topic    string
	Old, New [16]byte // New is zero when the topic is gone
}

func (e *TopicChangedError) Error() string {
	if e.New == ([16]byte{}) {
		return fmt.Sprintf("input topic %s was deleted (topic ID %s); waiting for it to be created again", e.Topic, TopicIDString(e.Old))
	}
	return fmt.Sprintf("input topic %s was recreated: topic ID %s, now %s", e.Topic, TopicIDString(e.Old), TopicIDString(e.New))
}
