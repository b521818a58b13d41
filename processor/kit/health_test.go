package kit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestBrokerHealth(t *testing.T) {
	meta := kgo.BrokerMetadata{Host: "127.0.0.1", Port: 9092}
	for _, tc := range []struct {
		name    string
		silence time.Duration // since the last good read
		fail    bool          // a read error after it
		want    string        // "" for healthy
	}{
		{"fresh", 0, false, ""},
		{"within limit", 5 * time.Second, true, ""},
		{"silent", 20 * time.Second, false, "last error: none"},
		{"silent with error", 20 * time.Second, true, "broker 127.0.0.1:9092: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewBrokerHealth()
			h.OnBrokerRead(meta, 0, 10, 0, 0, nil)
			h.lastOK.Store(time.Now().Add(-tc.silence).UnixNano())
			if tc.fail {
				h.OnBrokerConnect(meta, 0, nil, errors.New("connection refused"))
			}
			err := h.Check(BrokerSilenceLimit)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check = %v, want an error with %q", err, tc.want)
			}
			h.OnBrokerRead(meta, 0, 10, 0, 0, nil)
			if err := h.Check(BrokerSilenceLimit); err != nil {
				t.Errorf("after a good read: %v", err)
			}
		})
	}
}
