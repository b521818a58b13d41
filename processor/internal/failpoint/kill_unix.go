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

// StopSelf stops the process with SIGSTOP, as a debugger or a paused
// container would; it returns once the process gets SIGCONT.
func StopSelf() { _ = syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
