//go:build unix

package failpoint

import (
	"os"
	"syscall"
)

// KillSelf ends the process at once with SIGKILL: no deferred function, no
// flush, no LeaveGroup, no EndTxn. It is the default crash action.
func KillSelf() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL is not deliverable late; never return
}
