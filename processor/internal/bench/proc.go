//go:build integration

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/exactly-io/exactly/integration/opstest"
)

// proc is a measured subprocess: exactly or the Kafka Streams JVM.
type proc struct {
	name     string
	cmd      *exec.Cmd
	log      string
	started  time.Time
	exited   chan struct{}
	err      error
	hwmBytes atomic.Int64 // VmHWM, sampled until the process exits
}

// usage is what getrusage says of a child that has exited.
type usage struct {
	PeakRSSMiB float64
	CPUSeconds float64
}

func startProc(logDir, name string, env []string, bin string, args ...string) (*proc, error) {
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, started: time.Now(), exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	go p.sampleHWM()
	return p, nil
}

// sampleHWM reads the child's VmHWM from /proc/PID/status until it exits.
// VmHWM is the peak RSS of the process's own address space.
// getrusage's ru_maxrss is not: Go starts children with
// clone(CLONE_VM|CLONE_VFORK), and exec carries the parent's resident set
// at that moment into the child's maxrss, so every child would report at
// least the harness's own size.
func (p *proc) sampleHWM() {
	for {
		p.readHWMNow()
		select {
		case <-p.exited:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM, waits up to 30 s, then SIGKILL, and returns the
// child's resource usage: its peak RSS (VmHWM, read just before the
// signal and sampled before that) and its CPU time (getrusage).
func (p *proc) stop() (usage, error) {
	select {
	case <-p.exited:
	default:
		p.readHWMNow()
	}
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	u := usage{PeakRSSMiB: float64(p.hwmBytes.Load()) / (1 << 20)}
	if ps := p.cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			u.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
	}
	return u, p.err
}

func (p *proc) readHWMNow() {
	if hwm := opstest.VMStatus(p.cmd.Process.Pid).VmHWM; int64(hwm) > p.hwmBytes.Load() {
		p.hwmBytes.Store(int64(hwm))
	}
}

// failure describes a child that exited early.
func (p *proc) failure() error {
	return fmt.Errorf("%s exited early (%v); see %s", p.name, p.err, p.log)
}
