package health

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

// TestBrokerHealthOneDeadBroker is the output-leader kill of the cluster
// tests: the killed node was also the group coordinator, and for 17 s the
// client asked nothing of the two live brokers, only rejoined the dead
// coordinator. The error names the failing broker and no live one as
// failing.
func TestBrokerHealthOneDeadBroker(t *testing.T) {
	node := func(port int32) kgo.BrokerMetadata { return kgo.BrokerMetadata{Host: "127.0.0.1", Port: port} }
	for _, tc := range []struct {
		name      string
		failed    []int32
		want      []string
		wantNotIn []string
	}{
		{"one of three fails", []int32{29192},
			[]string{"failing: broker 127.0.0.1:29192: connection reset", "no error from 127.0.0.1:29292, 127.0.0.1:29392 since their last answer"},
			[]string{"broker 127.0.0.1:29292:", "broker 127.0.0.1:29392:"}},
		{"all three fail", []int32{29192, 29292, 29392},
			[]string{"failing: broker 127.0.0.1:29192: connection reset; broker 127.0.0.1:29292: connection reset; broker 127.0.0.1:29392: connection reset"},
			[]string{"no error from"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewBrokerHealth()
			for _, p := range []int32{29192, 29292, 29392} {
				h.OnBrokerRead(node(p), 0, 10, 0, 0, nil)
			}
			for _, p := range tc.failed {
				h.OnBrokerConnect(node(p), 0, nil, errors.New("connection reset"))
			}
			h.lastOK.Store(time.Now().Add(-17 * time.Second).UnixNano())
			err := h.Check(BrokerSilenceLimit)
			if err == nil {
				t.Fatal("Check = nil after 17 s without an answer")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check = %v, want %q in it", err, w)
				}
			}
			for _, w := range tc.wantNotIn {
				if strings.Contains(err.Error(), w) {
					t.Errorf("Check = %v, want no %q in it", err, w)
				}
			}
		})
	}
}

// Membership: not ready before the first assignment, ready with one (even
// an empty one), not ready once lost (naming the group and the group
// error) or while an assignment has not started (with the last failed
// start's error), ready again once one starts; a reset forgets it all.
func TestMembership(t *testing.T) {
	var m Membership
	steps := []struct {
		name string
		do   func()
		want []string // substrings of Check's error; none: ready
	}{
		{"before a join", func() {}, []string{"no partitions assigned yet in group g"}},
		{"an assignment", m.Assigned, nil},
		{"a loss", func() { m.Lost(); m.OnGroupManageError(errors.New("COORDINATOR_NOT_AVAILABLE")) },
			[]string{"lost its partitions in group g", "COORDINATOR_NOT_AVAILABLE"}},
		{"the next join, starting", func() { m.Starting([]int32{0, 1, 2}) }, []string{"not started"}},
		{"a failed start, then the next join", func() { m.StartFailed(errors.New("UNKNOWN_SERVER_ERROR")); m.Starting([]int32{0, 1, 2}) },
			[]string{"not started", "UNKNOWN_SERVER_ERROR"}},
		// A cooperative rebalance takes one away: nothing new is added.
		{"a revoke of one not started", func() { m.Revoked([]int32{2}); m.Starting(nil) }, []string{"not started"}},
		{"a revoke of the others", func() { m.Revoked([]int32{0, 1}) }, nil},
		{"a join adding partitions", func() { m.Starting([]int32{3}) }, []string{"not started"}},
		{"a start", m.Assigned, nil},
		{"a join adding nothing", func() { m.Starting(nil) }, nil},
		{"a reset after a loss", func() { m.Lost(); m.Reset() }, []string{"no partitions assigned yet"}},
	}
	for _, st := range steps {
		st.do()
		err := m.Check("g")
		if len(st.want) == 0 && err != nil {
			t.Fatalf("after %s: %v, want ready", st.name, err)
		}
		for _, w := range st.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Fatalf("after %s: %v, want an error with %q", st.name, err, w)
			}
		}
	}
	if err := m.Check("g"); strings.Contains(err.Error(), "lost") || strings.Contains(err.Error(), "COORDINATOR") {
		t.Fatalf("a reset kept the loss: %v", err)
	}
}

// One broker of the cluster that fails every attempt for longer than the
// limit, while others answer, is reported if the client still asks it;
// not a broker failing briefly, one no longer asked, one that answered
// since, nor a seed address.
func TestBrokerHealthOneUnreachable(t *testing.T) {
	now := time.Now()
	live := kgo.BrokerMetadata{NodeID: 1, Host: "127.0.0.1", Port: 9192}
	cut := kgo.BrokerMetadata{NodeID: 2, Host: "127.0.0.1", Port: 9292}
	seed := kgo.BrokerMetadata{NodeID: -1, Host: "127.0.0.1", Port: 9392}
	refused := errors.New("connection refused")
	for _, tc := range []struct {
		name     string
		broker   kgo.BrokerMetadata
		failures []time.Duration // before now
		okAfter  bool            // an answer after the failures
		want     bool
	}{
		{"failing for 20 s, still asked", cut, []time.Duration{20 * time.Second, 10 * time.Second, time.Second}, false, true},
		{"failing for 10 s", cut, []time.Duration{10 * time.Second, time.Second}, false, false},
		{"no longer asked", cut, []time.Duration{40 * time.Second, 20 * time.Second}, false, false},
		{"answered since", cut, []time.Duration{20 * time.Second, time.Second}, true, false},
		{"a seed address", seed, []time.Duration{20 * time.Second, time.Second}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewBrokerHealth()
			h.OnBrokerRead(live, 0, 10, 0, 0, nil)
			h.record(tc.broker, now.Add(-time.Minute), nil)
			for _, ago := range tc.failures {
				h.record(tc.broker, now.Add(-ago), refused)
			}
			if tc.okAfter {
				h.record(tc.broker, now, nil)
			}
			err := h.Check(BrokerSilenceLimit)
			switch {
			case tc.want && (err == nil || !strings.Contains(err.Error(), "broker 127.0.0.1:9292 failing for 20s: connection refused")):
				t.Errorf("Check = %v, want broker 127.0.0.1:9292 named", err)
			case !tc.want && err != nil:
				t.Errorf("Check = %v, want nil", err)
			}
		})
	}
}
