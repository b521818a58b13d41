//go:build unix

package state

import (
	"os"
	"syscall"
)

// tryLock takes an exclusive flock on f without waiting. The kernel
// releases it when f is closed or its process dies, so a crashed owner
// never leaves the directory locked.
func tryLock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
