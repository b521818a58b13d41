package stage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/stage"
)

// produceEvents writes the events e-from to e-<to-1>.
func produceEvents(t *testing.T, seeds []string, from, to int) {
	t.Helper()
	cl := newClient(t, seeds)
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		recs = append(recs, &kgo.Record{Topic: inTopic, Key: fmt.Appendf(nil, "%d", i), Value: fmt.Appendf(nil, `{"event_id":"e-%d"}`, i)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// joinAs joins the stage's consumer group under the stage's own
// group.instance.id (KIP-345), which fences the running stage. With a
// watch, the intruder leaves for good once it is fenced in turn; without,
// it rejoins after each fence as franz-go does. It commits nothing.
func joinAs(t *testing.T, seeds []string, watch *group.FenceWatch) {
	t.Helper()
	cfg := stage.Config{Stage: "clean", InstanceID: "i1"}
	opts := []kgo.Opt{kgo.ConsumerGroup(cfg.Group()), kgo.InstanceID(cfg.TransactionalID()), kgo.ConsumeTopics(inTopic),
		kgo.DisableAutoCommit(), kgo.HeartbeatInterval(100 * time.Millisecond)}
	if watch != nil {
		opts = append(opts, kgo.WithHooks(watch))
	}
	cl := newClient(t, seeds, opts...)
	if watch != nil {
		watch.Attach(cl)
	}
	go func() {
		for cl.Context().Err() == nil {
			cl.PollFetches(cl.Context())
		}
	}()
}

// A fence can be spurious (a group coordinator that moved, see
// group.FenceHistory): a stage fenced once rejoins with a new session, takes
// its place back (fencing the intruder, which then goes away) and goes on
// processing, each event once.
func TestStageRejoinsAfterOneFence(t *testing.T) {
	seeds := newCluster(t)
	produceEvents(t, seeds, 0, 100)
	s := newStage(t, seeds)
	stop, done := runInBackground(t, s)
	var once sync.Once
	defer once.Do(stop)
	awaitStats(t, s, done, func(st stage.Stats) bool { return st.Produced >= 100 })

	intruder := group.NewFenceWatch("exactly-clean", "exactly-clean-i1", nil)
	joinAs(t, seeds, intruder)
	deadline := time.Now().Add(30 * time.Second)
	for intruder.Err() == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the stage never took its group.instance.id back; stats %+v", s.Stats())
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the stage stopped after one fence: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	produceEvents(t, seeds, 100, 300)
	awaitStats(t, s, done, func(st stage.Stats) bool { return st.Produced >= 300 })
	if st := s.Stats(); st.Rebuilds < 1 {
		t.Errorf("stats %+v: the fence rebuilt no session", st)
	}
	once.Do(stop)
	checkOutputsOnce(t, seeds, 300)
}

// Two live instances under one group.instance.id and transactional ID
// (one --instance-id given twice, or a restart started before the old
// process stopped) fence each other in turn, each with a new session:
// the older one, fenced first (by the group or through its producer), stops
// with a *group.FencedError at its second fence within
// group.FenceRejoinWindow, the newer one goes on, and each event is output
// once.
func TestStageStopsWhenFencedTwice(t *testing.T) {
	seeds := newCluster(t)
	produceEvents(t, seeds, 0, 10)
	older := newStage(t, seeds)
	_, doneOlder := runInBackground(t, older)
	awaitStats(t, older, doneOlder, func(st stage.Stats) bool { return st.Produced >= 10 })
	newer := newStage(t, seeds)
	stopNewer, doneNewer := runInBackground(t, newer)
	var once sync.Once
	defer once.Do(stopNewer)
	select {
	case err := <-doneOlder:
		var fenced *group.FencedError
		if !errors.As(err, &fenced) || fenced.Group != "exactly-clean" || fenced.InstanceID != "exactly-clean-i1" {
			t.Fatalf("Run = %v, want a *group.FencedError of exactly-clean, exactly-clean-i1", err)
		}
	case err := <-doneNewer:
		doneNewer <- err
		t.Fatalf("the newer instance stopped (%v); the older one runs on", err)
	case <-time.After(45 * time.Second):
		t.Fatalf("neither stage stopped; stats %+v and %+v", older.Stats(), newer.Stats())
	}
	if st := older.Stats(); st.Rebuilds < 1 {
		t.Errorf("stats %+v: the older stage stopped at its first fence", st)
	}
	produceEvents(t, seeds, 10, 110)
	awaitStats(t, newer, doneNewer, func(stage.Stats) bool { return len(drain(t, seeds, outTopic)) >= 110 })
	once.Do(stopNewer)
	checkOutputsOnce(t, seeds, 110)
}

// awaitStats waits up to 30 s for done(stats) while Run runs; Run's end
// fails the test.
func awaitStats(t *testing.T, s *stage.Stage, runDone chan error, done func(stage.Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !done(s.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: stats %+v", s.Stats())
		}
		select {
		case err := <-runDone: // nil when runDone is: never ready
			runDone <- err
			t.Fatalf("Run ended: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
