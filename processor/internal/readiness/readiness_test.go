package readiness

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/health"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Check names the first reason in its order, after the component's name,
// and nil once none holds.
func TestCheckOrder(t *testing.T) {
	fenced, gone, stuck := errors.New("fenced"), errors.New("input topic in was deleted"), errors.New("stuck")
	restoring := errors.New("restoring partitions [1]: waiting for an open transaction")
	for _, tc := range []struct {
		name string
		set  func(r *Rule, on map[string]bool)
		want string // "" for ready
	}{
		{"ready", func(*Rule, map[string]bool) {}, ""},
		{"fenced first", func(r *Rule, on map[string]bool) {
			on["fenced"], on["input"], on["stuck"] = true, true, true
			r.Fail(errors.New("boom"))
		}, "stage s: fenced"},
		{"a failure before the input", func(r *Rule, on map[string]bool) {
			on["input"] = true
			r.Fail(errors.New("boom"))
		}, "stage s: kafka session failing: boom"},
		{"a failure cleared", func(r *Rule, _ map[string]bool) {
			r.Fail(errors.New("boom"))
			r.Fail(nil)
		}, ""},
		{"a failure outrun by the session up for the stall limit", func(r *Rule, _ map[string]bool) {
			r.Fail(errors.New("boom"))
			r.up.Store(time.Now().Add(-r.StallLimit()).UnixNano())
		}, ""},
		{"a failure the session has not outrun", func(r *Rule, _ map[string]bool) {
			r.Fail(errors.New("boom"))
			r.Up()
		}, "kafka session failing: boom"},
		{"the input before kafka", func(r *Rule, on map[string]bool) {
			on["input"] = true
			r.Member.Reset()
		}, "stage s: input topic in was deleted"},
		{"a restore before kafka: its assignment is not recorded yet", func(r *Rule, on map[string]bool) {
			on["restoring"] = true
			r.Member.Reset()
		}, "stage s: restoring partitions [1]: waiting for an open transaction"},
		{"a restore while assigned (partitions added)", func(r *Rule, on map[string]bool) {
			on["restoring"] = true
		}, "stage s: restoring partitions [1]"},
		{"the input before a restore", func(r *Rule, on map[string]bool) {
			on["restoring"], on["input"] = true, true
		}, "stage s: input topic in was deleted"},
		{"no assignment before stuck", func(r *Rule, on map[string]bool) {
			on["stuck"] = true
			r.Member.Reset()
		}, "stage s: no partitions assigned yet in group g"},
		{"stuck before a stall", func(r *Rule, on map[string]bool) {
			on["stuck"] = true
			r.Opened(time.Now().Add(-time.Hour))
		}, "stage s: stuck"},
		{"a stall and where it waits", func(r *Rule, on map[string]bool) {
			on["waiting"] = true
			r.Opened(time.Now().Add(-time.Hour))
		}, "stage s: transaction open for 1h0m0s without committing (limit 10s): at COMMIT"},
		{"a stall, waiting nowhere", func(r *Rule, _ map[string]bool) {
			r.Opened(time.Now().Add(-time.Hour))
		}, "stage s: transaction open for 1h0m0s without committing (limit 10s)"},
		{"a closed transaction", func(r *Rule, _ map[string]bool) {
			r.Opened(time.Now().Add(-time.Hour))
			r.Closed()
		}, ""},
		{"rebuilding", func(r *Rule, _ map[string]bool) {
			r.Up()
			r.Opened(time.Now().Add(-time.Hour))
			r.Rebuilding(errors.New("boom"))
		}, "stage s: kafka session failing: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on := map[string]bool{}
			r := &Rule{Name: "stage s", Group: "g", CommitInterval: 100 * time.Millisecond, Failing: "kafka session failing", Open: "transaction",
				Brokers: health.NewBrokerHealth()}
			r.Fenced = func() error { return when(on["fenced"], fenced) }
			r.Input = func() error { return when(on["input"], gone) }
			r.Stuck = func() error { return when(on["stuck"], stuck) }
			r.Restoring = func() error { return when(on["restoring"], restoring) }
			r.Waiting = func() string {
				if on["waiting"] {
					return "at COMMIT"
				}
				return ""
			}
			r.Member.Assigned()
			tc.set(r, on)
			err := r.Check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Check = %v, want ready", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Check = %v, want %q", err, tc.want)
			}
		})
	}
}

// A fenced component's reason wraps the fence, for errors.As.
func TestCheckWraps(t *testing.T) {
	fenced := errors.New("fenced")
	r := &Rule{Name: "sink k", Brokers: health.NewBrokerHealth(), Fenced: func() error { return fenced }}
	if err := r.Check(); !errors.Is(err, fenced) {
		t.Fatalf("Check = %v, want it to wrap %v", err, fenced)
	}
}

func when(on bool, err error) error {
	if on {
		return err
	}
	return nil
}

// TestCheckJoinHeld: a member whose join the group coordinator holds
// (another member is slow to rejoin) reads as waiting for the group's
// rebalance, not as brokers that do not answer.
func TestCheckJoinHeld(t *testing.T) {
	r := &Rule{Name: "stage s", Group: "g", CommitInterval: 100 * time.Millisecond, Brokers: health.NewBrokerHealth()}
	meta := kgo.BrokerMetadata{NodeID: 1, Host: "127.0.0.1", Port: 9092}
	r.Brokers.OnBrokerWrite(meta, kmsg.JoinGroup.Int16(), 10, 0, 0, nil)
	err := r.Check()
	if err == nil || !strings.Contains(err.Error(), "no partitions assigned yet in group g; the group is rebalancing: waiting to join it, the coordinator (broker 127.0.0.1:9092)") {
		t.Fatalf("Check = %v, want the rebalance named", err)
	}
	r.Brokers.OnBrokerRead(meta, kmsg.JoinGroup.Int16(), 10, 0, 0, nil)
	if err := r.Check(); err == nil || strings.Contains(err.Error(), "rebalancing") {
		t.Fatalf("Check after the join's answer = %v, want no partitions assigned yet alone", err)
	}
}
