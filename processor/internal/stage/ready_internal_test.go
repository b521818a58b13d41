package stage

import (
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/fault"
)

// A session whose transactional producer waits for its producer ID
// (InitProducerId, held up while an output partition refuses the markers
// of the predecessor's open transaction) is not ready once the stall
// limit has passed, whether or not a session failed before, and its
// assignment does not start the clock that forgets a past failure:
// otherwise such a session reads as ready after the stall limit (no
// transaction open, the assignment counted as "up") while it outputs
// nothing.
func TestNotReadyWithoutProducerID(t *testing.T) {
	s, err := New(Config{Stage: "s", InstanceID: "i", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq"})
	if err != nil {
		t.Fatal(err)
	}
	s.ready.Member.Assigned()
	long := time.Now().Add(-2 * s.stallLimit()).UnixNano()
	s.sessionBuilt.Store(long)
	if err := s.Ready(); err == nil || !strings.Contains(err.Error(), "no producer ID") {
		t.Fatalf("Ready = %v, want not ready: no producer ID", err)
	}
	// Within the stall limit InitProducerId is just slow.
	s.sessionBuilt.Store(time.Now().UnixNano())
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready = %v right after the session began", err)
	}
	// With it, the session is ready.
	s.sessionBuilt.Store(long)
	s.producerReady.Store(true)
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready = %v with a producer ID", err)
	}
	// A past failure is forgotten only StallLimit after the session could
	// produce, never while it waits for its producer ID.
	failed := fault.NewConfigError("flush: context deadline exceeded")
	s.ready.Rebuilding(failed)
	s.ready.Member.Assigned()
	s.producerReady.Store(false)
	if err := s.Ready(); err == nil {
		t.Fatal("ready with a failed session and no producer ID")
	}
}
