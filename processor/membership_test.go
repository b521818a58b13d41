package processor_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/processor"
)

// A stage whose group coordinator stops answering loses its partitions
// (franz-go's OnPartitionsLost) and polls nothing. No transaction stalls
// and the broker still answers metadata, so only its lost membership
// shows it: /readyz must say so, and the stage must go back to ready and
// process once the coordinator answers again. Seen on a 3-node cluster
// when the cut-off broker was both the output's leader and the group
// coordinator: /readyz stayed ready for 50 s.
func TestStageNotReadyWhileGroupCoordinatorFails(t *testing.T) {
	for _, guarantee := range []string{processor.ExactlyOnce, processor.AtLeastOnce} {
		t.Run(guarantee, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, inTopic, outTopic), kfake.SeedTopics(1, dlqTopic))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			seeds := c.ListenAddrs()
			produceEvents(t, seeds, 0, 50)
			// Group requests give up after 2 s instead of franz-go's
			// default 30 s, to keep the test short.
			s := stageOf(t, seeds, guarantee, 20*time.Millisecond, 50, processor.WithKafkaOptions(kgo.RetryTimeout(2*time.Second)))
			stop, done := runInBackground(t, s)
			defer stop()
			awaitStats(t, s, done, func(st processor.Stats) bool { return st.Produced >= 50 && s.Ready() == nil })

			// The coordinator fails every group request of this group
			// from now on, until failing is cleared.
			var failing atomic.Bool
			failing.Store(true)
			for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.FindCoordinator} {
				c.ControlKey(int16(key), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
					c.KeepControl()
					if !failing.Load() {
						return nil, nil, false
					}
					code := kerr.CoordinatorNotAvailable.Code
					switch req := kreq.(type) {
					case *kmsg.HeartbeatRequest:
						resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
						resp.ErrorCode = code
						return resp, nil, true
					case *kmsg.JoinGroupRequest:
						resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
						resp.ErrorCode = code
						return resp, nil, true
					case *kmsg.SyncGroupRequest:
						resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
						resp.ErrorCode = code
						return resp, nil, true
					case *kmsg.FindCoordinatorRequest:
						resp := req.ResponseKind().(*kmsg.FindCoordinatorResponse)
						resp.ErrorCode = code
						for _, k := range req.CoordinatorKeys {
							resp.Coordinators = append(resp.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, NodeID: -1, ErrorCode: code})
						}
						return resp, nil, true
					}
					return nil, nil, false
				})
			}
			var why string
			const limit = 30 * time.Second
			deadline := time.Now().Add(limit)
			for {
				if err := s.Ready(); err != nil && strings.Contains(err.Error(), "group") {
					why = err.Error()
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the stage stayed ready for %s while its group coordinator failed: %v", limit, s.Ready())
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("/readyz while the coordinator fails: %s", why)
			if !strings.Contains(why, s.Config().Group()) {
				t.Errorf("readiness error %q does not name the group %s", why, s.Config().Group())
			}

			failing.Store(false)
			produceEvents(t, seeds, 50, 80)
			awaitStats(t, s, done, func(st processor.Stats) bool { return st.Produced >= 80 && s.Ready() == nil })
		})
	}
}
