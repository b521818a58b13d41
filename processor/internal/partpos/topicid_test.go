package partpos_test

import (
	"testing"

	"github.com/exactly-io/exactly/processor/internal/partpos"
)

func TestCommitMetadataRoundTrip(t *testing.T) {
	id := [16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	m := partpos.CommitMetadata(id)
	if m != "exactly/v1 topic_id=deadbeef0102030405060708090a0b0c" {
		t.Fatalf("CommitMetadata = %q", m)
	}
	got, ok := partpos.ParseCommitMetadata(m)
	if !ok || got != id {
		t.Fatalf("ParseCommitMetadata(%q) = %x, %v", m, got, ok)
	}
	for _, bad := range []string{"", "member-1", "exactly/v1 topic_id=zz", "exactly/v1 topic_id=deadbeef", "exactly/v2 topic_id=deadbeef0102030405060708090a0b0c"} {
		if _, ok := partpos.ParseCommitMetadata(bad); ok {
			t.Errorf("ParseCommitMetadata(%q) ok, want not ours", bad)
		}
	}
}

func TestStartAt(t *testing.T) {
	a, b := [16]byte{1}, [16]byte{2}
	now := partpos.PartitionState{TopicID: a, LogStart: 10, HighWatermark: 100}
	tests := []struct {
		name       string
		stored     partpos.StoredPosition
		now        partpos.PartitionState
		want       int64
		wantReason string
	}{
		{"same id, inside the log", partpos.StoredPosition{Offset: 50, TopicID: a}, now, 50, ""},
		{"same id, at the end", partpos.StoredPosition{Offset: 100, TopicID: a}, now, 100, ""},
		{"same id, at the log start", partpos.StoredPosition{Offset: 10, TopicID: a}, now, 10, ""},
		{"no id, inside the log", partpos.StoredPosition{Offset: 50}, now, 50, ""},
		{"new id, offset inside the new log", partpos.StoredPosition{Offset: 50, TopicID: b}, now, 10, partpos.RecreatedNewID},
		{"new id, offset above the new end", partpos.StoredPosition{Offset: 500, TopicID: b}, now, 10, partpos.RecreatedNewID},
		{"new id, offset 0", partpos.StoredPosition{Offset: 0, TopicID: b}, partpos.PartitionState{TopicID: a}, 0, partpos.RecreatedNewID},
		{"no id, above the end", partpos.StoredPosition{Offset: 101}, now, 10, partpos.RecreatedAboveEnd},
		{"same id, above the end: the stage resumes at the end", partpos.StoredPosition{Offset: 101, TopicID: a}, now, 100, partpos.LogTruncated},
		{"same id, far above the end: the stage resumes at the end", partpos.StoredPosition{Offset: 1000, TopicID: a}, now, 100, partpos.LogTruncated},
		{"same id, below the log start", partpos.StoredPosition{Offset: 3, TopicID: a}, now, 10, partpos.RetentionPassed},
		{"no id, below the log start", partpos.StoredPosition{Offset: 3}, now, 10, partpos.RetentionPassed},
		{"broker id unknown, stored id kept", partpos.StoredPosition{Offset: 50, TopicID: b}, partpos.PartitionState{LogStart: 10, HighWatermark: 100}, 50, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := partpos.StartAt(tc.stored, tc.now)
			if got != tc.want || reason != tc.wantReason {
				t.Fatalf("StartAt(%+v, %+v) = %d, %q; want %d, %q", tc.stored, tc.now, got, reason, tc.want, tc.wantReason)
			}
		})
	}
}
