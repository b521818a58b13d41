package state

import (
	"os"

	"golang.org/x/sys/windows"
)

// lockOffsetHigh places the locked byte far past the end of the lock file:
// a Windows byte-range lock is mandatory, and a lock on the PID itself
// would keep the next process from reading who holds the directory.
const lockOffsetHigh = 0x7fffffff

// tryLock takes an exclusive LockFileEx lock on f without waiting, as
// flock does on unix: Windows releases it when f's handle is closed or its
// process ends, so a crashed owner never leaves the directory locked.
func tryLock(f *os.File) error {
	ol := windows.Overlapped{OffsetHigh: lockOffsetHigh}
	return windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
}
