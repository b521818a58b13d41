package stage_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/stage"
)

// A fault that comes back in every session (the dead-letter topic
// deleted) keeps the stage not ready the whole time, also between two
// rebuilds, when the new session holds its partitions and has not failed
// yet: an assignment does not clear the last failure, so /readyz does not
// flap to ready. Once the fault is gone,
// the next commit makes it ready again.
func TestStageNotReadyBetweenFailingSessions(t *testing.T) {
	c := newKfake(t)
	seeds := c.ListenAddrs()
	produceEvents(t, seeds, 0, 20)
	s := stageOf(t, seeds, stage.ExactlyOnce, 20*time.Millisecond, 50)
	stop, done := runInBackground(t, s)
	defer stop()
	awaitStats(t, s, done, func(st stage.Stats) bool { return st.Produced >= 20 && s.Ready() == nil })

	// The dead-letter topic is deleted: the bad record's dead letter
	// fails in every session, which is rebuilt again and again.
	adm := adminFor(t, seeds)
	if _, err := adm.DeleteTopic(context.Background(), dlqTopic); err != nil {
		t.Fatal(err)
	}
	bad := newClient(t, seeds)
	if err := bad.ProduceSync(context.Background(), &kgo.Record{Topic: inTopic, Partition: 0, Value: []byte(`{"event_id":`)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rebuilds := s.Stats().Rebuilds
	awaitStats(t, s, done, func(st stage.Stats) bool { return st.Rebuilds >= rebuilds+1 })
	// From the first failure on, polled often across several rebuilds:
	// never ready.
	for time.Sleep(time.Millisecond); s.Stats().Rebuilds < rebuilds+4; time.Sleep(2 * time.Millisecond) {
		if err := s.Ready(); err == nil {
			t.Fatalf("ready after %d failed sessions, while every dead letter fails", s.Stats().Rebuilds-rebuilds)
		}
		select {
		case err := <-done:
			t.Fatalf("stage stopped: %v", err)
		default:
		}
	}
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, dlqTopic); err != nil {
		t.Fatal(err)
	}
	awaitStats(t, s, done, func(st stage.Stats) bool { return st.DeadLettered == 1 && s.Ready() == nil })
}
