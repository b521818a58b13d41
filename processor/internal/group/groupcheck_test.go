package group_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
)

func TestCheckMembers(t *testing.T) {
	stage := group.GroupSelf{Group: "exactly-sink-x", InstanceID: "exactly-sink-x-h1", Role: group.RoleStage, Topic: "in"}
	sink := group.GroupSelf{Group: "exactly-sink-x", InstanceID: "exactly-sink-x-h1", Role: group.RoleSink, Topic: "in"}
	member := func(instance, clientID string, topics ...string) group.GroupMember {
		return group.GroupMember{MemberID: "m-" + instance, InstanceID: instance, ClientID: clientID, Host: "/10.0.0.1", Topics: topics, Consumer: true}
	}
	tests := []struct {
		name    string
		self    group.GroupSelf
		members []group.GroupMember
		want    string // "" for no clash, else a part of the error
	}{
		{"empty group", stage, nil, ""},
		{"own predecessor (a restart)", stage, []group.GroupMember{member("exactly-sink-x-h1", "exactly-stage", "in")}, ""},
		{"another instance of the stage", stage, []group.GroupMember{member("exactly-sink-x-h2", "exactly-stage", "in")}, ""},
		{"a sink's instance of the sink", sink, []group.GroupMember{member("exactly-sink-x-h2", "team-sink", "in")}, ""},
		{"member of an older version (role unknown), same topic", stage, []group.GroupMember{member("exactly-sink-x-h2", "exactly", "in")}, ""},
		{"same instance ID, other topic (same name in two files)", stage,
			[]group.GroupMember{member("exactly-sink-x-h1", "exactly-stage", "other")}, "consumes topics [other], this stage consumes in"},
		{"other instance, other topic", sink,
			[]group.GroupMember{member("exactly-sink-x-h2", "exactly-sink", "in"), member("exactly-sink-x-h3", "exactly-sink", "other")}, "consumes topics [other]"},
		{"member of an older version, other topic", stage, []group.GroupMember{member("h9", "exactly", "other")}, "consumes topics [other]"},
		{"two topics", stage, []group.GroupMember{member("h9", "exactly-stage", "in", "other")}, "consumes topics [in other]"},
		{"a sink in a stage's group", stage, []group.GroupMember{member("exactly-sink-x-h2", "exactly-sink", "in")}, "it is a sink, this is a stage"},
		{"a stage in a sink's group, same instance ID", sink, []group.GroupMember{member("exactly-sink-x-h1", "exactly-stage", "in")}, "it is a stage, this is a sink"},
		{"a member mid-rebalance (no subscription known), same role", sink, []group.GroupMember{member("exactly-sink-x-h2", "exactly-sink")}, ""},
		{"a member mid-rebalance, role unknown", sink, []group.GroupMember{member("exactly-sink-x-h2", "exactly")}, ""},
		{"a member mid-rebalance, the other role", sink, []group.GroupMember{member("exactly-sink-x-h2", "exactly-stage")}, "it consumes topics []"},
		{"not a consumer", sink, []group.GroupMember{{MemberID: "w1", ClientID: "connect-1"}}, "not a Kafka consumer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := group.CheckMembers(tt.self, tt.members)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckMembers = %v, want no clash", err)
				}
				return
			}
			var clash *group.GroupClashError
			if !errors.As(err, &clash) || !kafkaconn.IsFatal(err) {
				t.Fatalf("CheckMembers = %v, want a fatal *GroupClashError", err)
			}
			for _, part := range []string{tt.want, "consumer group exactly-sink-x", "rename one"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q lacks %q", err, part)
				}
			}
		})
	}
}

func TestRoleClientID(t *testing.T) {
	if got := group.RoleClientID("exactly", group.RoleSink); got != "exactly-sink" {
		t.Fatalf("RoleClientID = %q", got)
	}
	// A client.id that ends like a role keeps the role it is given.
	err := group.CheckMembers(group.GroupSelf{Group: "g", Role: group.RoleSink, Topic: "in"},
		[]group.GroupMember{{ClientID: group.RoleClientID("x-stage", group.RoleSink), Topics: []string{"in"}, Consumer: true}})
	if err != nil {
		t.Fatalf("a sink whose client_id ends in -stage: %v", err)
	}
}

func TestAsFenced(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		fenced bool
	}{
		{"nil", nil, false},
		{"other", kerr.RebalanceInProgress, false},
		{"raw", kerr.FencedInstanceID, true},
		{"group session fetch error", &kgo.ErrGroupSession{Err: kerr.FencedInstanceID}, true},
		{"wrapped", fmt.Errorf("commit offsets: %w", kerr.FencedInstanceID), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := group.AsFenced(tt.err, "exactly-a", "exactly-a-h1")
			var fenced *group.FencedError
			if errors.As(got, &fenced) != tt.fenced {
				t.Fatalf("AsFenced(%v) = %v, want fenced %v", tt.err, got, tt.fenced)
			}
			if !tt.fenced {
				if got != tt.err {
					t.Fatalf("AsFenced changed %v to %v", tt.err, got)
				}
				return
			}
			if !kafkaconn.IsFatal(got) || !errors.Is(got, kerr.FencedInstanceID) {
				t.Fatalf("AsFenced(%v) = %v: want fatal and wrapping FENCED_INSTANCE_ID", tt.err, got)
			}
			for _, part := range []string{"exactly-a", "exactly-a-h1", "--instance-id", "sink-<x>"} {
				if !strings.Contains(got.Error(), part) {
					t.Errorf("error %q lacks %q", got, part)
				}
			}
			if again := group.AsFenced(got, "g2", "i2"); again != got {
				t.Errorf("AsFenced wrapped a *FencedError again: %v", again)
			}
		})
	}
}

func TestFenceWatchIgnoresOtherErrors(t *testing.T) {
	var calls atomic.Int32
	w := group.NewFenceWatch("g", "i", func(error) { calls.Add(1) })
	w.OnGroupManageError(kerr.UnknownMemberID)
	w.OnGroupManageError(kerr.RebalanceInProgress)
	if w.Err() != nil || calls.Load() != 0 {
		t.Fatalf("Err %v, %d calls after non-fence errors", w.Err(), calls.Load())
	}
	w.OnGroupManageError(kerr.FencedInstanceID)
	w.OnGroupManageError(kerr.FencedInstanceID)
	var fenced *group.FencedError
	if !errors.As(w.Err(), &fenced) || fenced.Group != "g" || fenced.InstanceID != "i" || calls.Load() != 1 {
		t.Fatalf("Err %v, %d calls after two fences; want one call and a *FencedError of g, i", w.Err(), calls.Load())
	}
	if (*group.FenceWatch)(nil).Err() != nil {
		t.Fatal("a nil watch reports a fence")
	}
}

// fakeGroupClient joins group on topic as a static member on c, with the
// given client.id and fence watch, and waits until it is assigned.
func fakeGroupClient(t *testing.T, c *kfake.Cluster, group, instance, clientID, topic string, w *group.FenceWatch) *kgo.Client {
	t.Helper()
	assigned := make(chan struct{}, 1)
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ClientID(clientID), kgo.ConsumerGroup(group), kgo.InstanceID(instance),
		kgo.ConsumeTopics(topic), kgo.HeartbeatInterval(100 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		})}
	if w != nil {
		opts = append(opts, kgo.WithHooks(w))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	if w != nil {
		w.Attach(cl)
	}
	t.Cleanup(cl.Close)
	go func() {
		for cl.Context().Err() == nil {
			cl.PollFetches(cl.Context())
		}
	}()
	select {
	case <-assigned:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never assigned in group %s", instance, group)
	}
	return cl
}

func TestCheckGroupAgainstBroker(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	adm, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	fakeGroupClient(t, c, "exactly-sink-x", "exactly-sink-x-h2", group.RoleClientID("exactly", group.RoleSink), "in", nil)
	tests := []struct {
		name string
		self group.GroupSelf
		want string
	}{
		{"another sink instance", group.GroupSelf{Group: "exactly-sink-x", InstanceID: "exactly-sink-x-h1", Role: group.RoleSink, Topic: "in"}, ""},
		{"a stage", group.GroupSelf{Group: "exactly-sink-x", InstanceID: "exactly-sink-x-h1", Role: group.RoleStage, Topic: "in"}, "it is a sink, this is a stage"},
		{"a sink of another topic", group.GroupSelf{Group: "exactly-sink-x", InstanceID: "exactly-sink-x-h2", Role: group.RoleSink, Topic: "other"}, "consumes topics [in], this sink consumes other"},
		{"a group nobody uses", group.GroupSelf{Group: "exactly-y", InstanceID: "exactly-y-h1", Role: group.RoleStage, Topic: "other"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := group.CheckGroup(context.Background(), kadm.NewClient(adm), tt.self)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("CheckGroup = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !kafkaconn.IsFatal(err)):
				t.Fatalf("CheckGroup = %v, want a fatal error containing %q", err, tt.want)
			}
		})
	}
}

// The member a second process with the same group.instance.id replaces is
// fenced: its watch reports it, its client leaves, and the process that
// fenced it stays in the group, unfenced.
func TestFenceWatchStopsTheFencedMember(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fenced := make(chan error, 1)
	old := group.NewFenceWatch("g", "exactly-a-h1", func(err error) { fenced <- err })
	fakeGroupClient(t, c, "g", "exactly-a-h1", "exactly-stage", "in", old)
	newer := group.NewFenceWatch("g", "exactly-a-h1", nil)
	fakeGroupClient(t, c, "g", "exactly-a-h1", "exactly-stage", "in", newer)
	select {
	case err := <-fenced:
		var fe *group.FencedError
		if !errors.As(err, &fe) || fe.Group != "g" || fe.InstanceID != "exactly-a-h1" {
			t.Fatalf("fenced with %v, want a *FencedError of g, exactly-a-h1", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the replaced member was never fenced")
	}
	// Long enough for the fenced client to have rejoined, were it to:
	// franz-go backs off at most 2.5 s after a first error, and the watch
	// holds it 1 s. Its rejoin would fence the newer member.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := newer.Err(); err != nil {
			t.Fatalf("the member that fenced the old one was fenced in turn: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // observing that nothing happens for a while
	}
}

func TestFenceHistoryRejoinsOncePerWindow(t *testing.T) {
	var h group.FenceHistory
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		at   time.Duration
		want bool
	}{
		{0, true}, // first fence: rejoin
		{group.FenceRejoinWindow - time.Second, false}, // again within the window: stop
		{3 * group.FenceRejoinWindow, true},            // long after: rejoin
		{3*group.FenceRejoinWindow + group.FenceRejoinWindow, true},
		{4*group.FenceRejoinWindow + time.Millisecond, false},
	}
	for i, st := range steps {
		if got := h.Rejoin(t0.Add(st.at)); got != st.want {
			t.Fatalf("step %d (fence at +%v): Rejoin = %v, want %v", i, st.at, got, st.want)
		}
	}
}
