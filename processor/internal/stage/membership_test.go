package stage_test

import (
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/processor/internal/stage"
)

// A stage whose group coordinator stops answering loses its partitions
// (franz-go's OnPartitionsLost) and polls nothing. No transaction stalls
// and the broker still answers metadata, so only its lost membership
// shows it: /readyz must say so, and the stage must go back to ready and
// process once the coordinator answers again. Seen on a 3-node cluster
// when the cut-off broker was both the output's leader and the group
// coordinator: /readyz stayed ready for 50 s.
func TestStageNotReadyWhileGroupCoordinatorFails(t *testing.T) {
	for _, guarantee := range guarantees {
		t.Run(guarantee, func(t *testing.T) {
			c := newKfake(t)
			seeds := c.ListenAddrs()
			produceEvents(t, seeds, 0, 50)
			// Group requests give up after 2 s instead of franz-go's
			// default 30 s, to keep the test short.
			s := stageOf(t, seeds, guarantee, 20*time.Millisecond, 50, stage.WithKafkaOptions(kgo.RetryTimeout(2*time.Second)))
			stop, done := runInBackground(t, s)
			defer stop()
			awaitStats(t, s, done, func(st stage.Stats) bool { return st.Produced >= 50 && s.Ready() == nil })

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
					// Every one of these responses has a top-level ErrorCode.
					code := kerr.CoordinatorNotAvailable.Code
					resp := kreq.ResponseKind()
					reflect.ValueOf(resp).Elem().FieldByName("ErrorCode").SetInt(int64(code))
					if fc, ok := resp.(*kmsg.FindCoordinatorResponse); ok { // v4+: one answer per key
						for _, k := range kreq.(*kmsg.FindCoordinatorRequest).CoordinatorKeys {
							fc.Coordinators = append(fc.Coordinators, kmsg.FindCoordinatorResponseCoordinator{Key: k, NodeID: -1, ErrorCode: code})
						}
					}
					return resp, nil, true
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
			awaitStats(t, s, done, func(st stage.Stats) bool { return st.Produced >= 80 && s.Ready() == nil })
		})
	}
}

// A stage assigned partitions whose committed offsets it cannot check
// (ListOffsets fails: a partition's leader cut off) consumes nothing, on
// any partition, and rejoins over and over. Each join completes, so
// membership alone does not show it: /readyz must say so at every poll
// until the offsets can be read, then the stage goes on from its commits.
func TestStageNotReadyWhileOffsetsCannotBeChecked(t *testing.T) {
	c := newKfake(t)
	seeds := c.ListenAddrs()
	produceEvents(t, seeds, 0, 30)
	first := stageOf(t, seeds, "", 20*time.Millisecond, 50)
	if err := runUntil(t, first, 30); err != nil {
		t.Fatalf("first run: %v", err)
	}

	var failing atomic.Bool
	failing.Store(true)
	c.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !failing.Load() {
			return nil, nil, false
		}
		req := kreq.(*kmsg.ListOffsetsRequest)
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.ListOffsetsResponseTopic{Topic: rt.Topic}
			for _, rp := range rt.Partitions {
				st.Partitions = append(st.Partitions, kmsg.ListOffsetsResponseTopicPartition{Partition: rp.Partition, ErrorCode: kerr.UnknownServerError.Code})
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	produceEvents(t, seeds, 30, 60)
	s := stageOf(t, seeds, "", 20*time.Millisecond, 50)
	stop, done := runInBackground(t, s)
	defer stop()
	// Poll readiness for 3 s: it must never pass, and must say why.
	var polls int
	var why string
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); polls++ {
		err := s.Ready()
		if err == nil {
			t.Fatalf("ready after %d polls while the committed offsets cannot be checked; stats %+v", polls, s.Stats())
		}
		why = err.Error()
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(why, "not started") {
		t.Errorf("readiness error %q does not say that the partitions are not started", why)
	}
	t.Logf("after %d polls: %s", polls, why)
	if st := s.Stats(); st.Produced != 0 {
		t.Fatalf("produced %d while the offsets could not be checked", st.Produced)
	}
	failing.Store(false)
	awaitStats(t, s, done, func(st stage.Stats) bool { return st.Produced >= 30 && s.Ready() == nil })
}
