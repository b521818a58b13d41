package group

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// AsFenced returns err as a *FencedError of group and instanceID if it is
// (or wraps) FENCED_INSTANCE_ID, and err unchanged otherwise.
func AsFenced(err error, group, instanceID string) error {
	var fenced *FencedError
	if errors.As(err, &fenced) || !errors.Is(err, kerr.FencedInstanceID) {
		return err
	}
	return &FencedError{Group: group, InstanceID: instanceID, Err: err}
}

// fenceHold bounds how long FenceWatch holds franz-go's group management
// loop after a fence, while the client leaves the group: franz-go backs
// off at least 200 ms and then rejoins, and a rejoin under our
// group.instance.id would fence the process that fenced us.
const fenceHold = time.Second

// FenceWatch is a kgo hook (kgo.WithHooks) that watches the group
// management loop of one client for FENCED_INSTANCE_ID, which franz-go
// reports through HookGroupManageError (heartbeat, join or sync) and then
// as a fetch error with topic "" (kgo.ErrGroupSession). On the first
// fence it makes the client leave the group at once, so that franz-go's
// backoff ends in no rejoin, records the error (Err) and calls onFenced
// (from the management goroutine: it must not block on the client).
type FenceWatch struct {
	group, instanceID string
	onFenced          func(error)
	cl                atomic.Pointer[kgo.Client]
	once              sync.Once
	err               atomic.Pointer[error]
}

// NewFenceWatch returns a FenceWatch of instanceID in group; onFenced may
// be nil.
func NewFenceWatch(group, instanceID string, onFenced func(error)) *FenceWatch {
	return &FenceWatch{group: group, instanceID: instanceID, onFenced: onFenced}
}

// Attach names the client the watch is a hook of; the fence handling
// leaves the group with it.
func (w *FenceWatch) Attach(cl *kgo.Client) { w.cl.Store(cl) }

// Err returns the *FencedError once the client was fenced, else nil.
func (w *FenceWatch) Err() error {
	if w == nil {
		return nil
	}
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// OnGroupManageError implements kgo.HookGroupManageError.
func (w *FenceWatch) OnGroupManageError(err error) {
	if !errors.Is(err, kerr.FencedInstanceID) {
		return
	}
	w.once.Do(func() {
		ferr := AsFenced(err, w.group, w.instanceID)
		w.err.Store(&ferr)
		if w.onFenced != nil {
			w.onFenced(ferr)
		}
		if cl := w.cl.Load(); cl != nil {
			// A nil context leaves without waiting (the wait would be
			// for this very goroutine). A static member sends no
			// LeaveGroup; the leave only ends the management loop. A
			// cancelled context would not do: kgo leaves with it.
			//lint:ignore SA1012 nil is kgo's "leave without waiting"
			_ = cl.LeaveGroupContext(nil)
			// The leave runs on another goroutine; the loop's backoff
			// must not end before it has.
			time.Sleep(fenceHold)
		}
	})
}

var _ kgo.HookGroupManageError = (*FenceWatch)(nil)

// FenceRejoinWindow is how long a fence counts against a static member:
// a member fenced once rejoins; fenced again within this window it stops
// (see FenceHistory).
const FenceRejoinWindow = time.Minute

// FenceHistory decides, across the sessions of one stage or sink
// instance, whether a fence (FENCED_INSTANCE_ID) is answered by rejoining
// the group or by stopping.
//
// The broker fences a static member (KIP-345) whose member ID is not the
// one it holds for the group.instance.id. Most often another live process
// joined with that ID, and stopping is right. But a group coordinator that
// moves (a broker killed or restarted) can load the group from
// __consumer_offsets without the member ID of this instance's latest join
// (seen here on a three-broker cluster: a restarted stage was fenced in
// SyncGroup 23 s after its join, with no other process alive), and then
// the fence is spurious. So a first fence is answered by a new session,
// whose JoinGroup with the group.instance.id takes the member's place
// back; if another process holds the ID, its own rejoin fences this one
// again, within the window, and this one stops. While the two alternate,
// neither commits a transaction the other's epoch has fenced (KIP-98:
// they share the transactional ID), and a sink's batches are guarded by
// its stored positions.
//
// The zero value is ready to use; it is safe for concurrent use.
type FenceHistory struct {
	mu   sync.Mutex
	last time.Time
}

// Rejoin records a fence at now and reports whether to rejoin: true
// unless the previous fence was less than FenceRejoinWindow before now.
func (h *FenceHistory) Rejoin(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	rejoin := h.last.IsZero() || now.Sub(h.last) >= FenceRejoinWindow
	h.last = now
	return rejoin
}
