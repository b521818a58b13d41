package failpoint

import "os"

// KillSelf ends the process at once with TerminateProcess (os.Process.Kill),
// Windows' nearest to SIGKILL: no deferred function, no flush, no
// LeaveGroup, no EndTxn. It is the default crash action.
func KillSelf() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill() // returns only if TerminateProcess failed
	}
	os.Exit(1) // as abrupt: deferred functions do not run
}

// StopSelf does nothing: Windows has no SIGSTOP, and a pause failpoint
// goes on at once.
func StopSelf() {}
