package health

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestBrokerHealthJoinHeld: a join request the group coordinator holds
// is an answer under way, not silence, until JoinHoldLimit; an answered
// or failed join leaves silence to count again.
func TestBrokerHealthJoinHeld(t *testing.T) {
	meta := kgo.BrokerMetadata{NodeID: 1, Host: "127.0.0.1", Port: 9092}
	join, sync := kmsg.JoinGroup.Int16(), kmsg.SyncGroup.Int16()
	for _, tc := range []struct {
		name    string
		key     int16
		held    time.Duration // since the join was written
		answer  bool          // the join was answered
		joining bool
		want    string // "" for healthy
	}{
		{"join held", join, 28 * time.Second, false, true, ""},
		{"sync held", sync, 28 * time.Second, false, true, ""},
		{"join held past the limit", join, JoinHoldLimit + time.Second, false, false, "no answer from any kafka broker"},
		{"join answered, then silence", join, 28 * time.Second, true, false, "no answer from any kafka broker"},
		{"other request unanswered", kmsg.Fetch.Int16(), 28 * time.Second, false, false, "no answer from any kafka broker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewBrokerHealth()
			h.OnBrokerRead(meta, 0, 10, 0, 0, nil)
			h.OnBrokerWrite(meta, tc.key, 10, 0, 0, nil)
			if tc.answer {
				h.OnBrokerRead(meta, tc.key, 10, 0, 0, errors.New("eof"))
			}
			h.mu.Lock()
			if b := h.brokers["127.0.0.1:9092"]; !b.joinSent.IsZero() {
				b.joinSent = time.Now().Add(-tc.held)
			}
			h.mu.Unlock()
			h.lastOK.Store(time.Now().Add(-28 * time.Second).UnixNano())
			if addr, _, ok := h.Joining(); ok != tc.joining || (ok && addr != "127.0.0.1:9092") {
				t.Errorf("Joining = %q %v, want %v", addr, ok, tc.joining)
			}
			err := h.Check(BrokerSilenceLimit)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check = %v, want an error with %q", err, tc.want)
			}
		})
	}
}
