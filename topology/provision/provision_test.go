package provision_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/topology/provision"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// newAdmin starts a one-broker kfake cluster with no topics and returns
// it with an admin client of it (topologytest.Admin), both closed when t
// ends.
func newAdmin(t *testing.T) (*kfake.Cluster, *kadm.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, topologytest.Admin(t, c.ListenAddrs()[0])
}

// WaitVisible returns only once the broker's metadata has the topic: it
// keeps polling while the topic is missing, and returns as soon as the
// topic appears.
func TestWaitVisibleWaitsForTheTopic(t *testing.T) {
	c, adm := newAdmin(t)
	var polls atomic.Int32
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range kreq.(*kmsg.MetadataRequest).Topics {
			if tp.Topic != nil && *tp.Topic == "late" {
				polls.Add(1)
			}
		}
		return nil, nil, false // answered as usual
	})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- provision.WaitVisible(ctx, adm, "late")
	}()
	// Several polls find no topic, and WaitVisible has not returned.
	for polls.Load() < 3 {
		select {
		case err := <-done:
			t.Fatalf("WaitVisible returned %v before the topic existed", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if _, err := adm.CreateTopic(context.Background(), 2, 1, nil, "late"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("WaitVisible after the topic was created: %v", err)
	}
}

// A topic that never appears: WaitVisible gives up when its context ends,
// naming the topic.
func TestWaitVisibleGivesUp(t *testing.T) {
	_, adm := newAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := provision.WaitVisible(ctx, adm, "never")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), `"never"`) {
		t.Fatalf("WaitVisible = %v, want a deadline error naming the topic", err)
	}
}
