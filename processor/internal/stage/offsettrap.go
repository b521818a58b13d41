package stage

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/exactly-io/exactly/processor/internal/failpoint"
)

// offsetCommitTrap fires the crash-after-offset-commit failpoint
// (failpoint.CrashAfterOffsetCommit) from inside GroupTransactSession.End, which
// sends TxnOffsetCommit and then EndTxn with no call of ours between
// them: as a kgo hook, it sees the TxnOffsetCommit response of the armed
// transaction and fires there, so EndTxn is never sent.
type offsetCommitTrap struct {
	fire  func(n int) // fires the failpoint of transaction n; may not return
	txn   atomic.Int64
	end   atomic.Pointer[context.CancelFunc]
	fired atomic.Bool
}

// arm makes the next TxnOffsetCommit response fire the failpoint of
// transaction n; cancel ends that transaction's End at once when the
// crash action returns (an in-process crash that only cuts connections).
func (h *offsetCommitTrap) arm(n int, cancel context.CancelFunc) {
	h.end.Store(&cancel)
	h.txn.Store(int64(n))
}

// OnBrokerRead implements kgo.HookBrokerRead.
func (h *offsetCommitTrap) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil || key != kmsg.TxnOffsetCommit.Int16() {
		return
	}
	n := h.txn.Swap(0)
	if n == 0 {
		return
	}
	h.fired.Store(true)
	h.fire(int(n))
	if cancel := h.end.Load(); cancel != nil {
		(*cancel)()
	}
}

var _ kgo.HookBrokerRead = (*offsetCommitTrap)(nil)

// newOffsetCommitTrap returns the trap of s, or nil when s is not an
// exactly-once stage with crash-after-offset-commit armed.
func newOffsetCommitTrap(s *Stage) *offsetCommitTrap {
	if s.cfg.Guarantee != ExactlyOnce {
		return nil
	}
	for _, fp := range s.fp.List {
		if fp.Name == failpoint.CrashAfterOffsetCommit {
			return &offsetCommitTrap{fire: func(n int) { _ = s.fp.Fire(s.log, failpoint.CrashAfterOffsetCommit, n) }}
		}
	}
	return nil
}
