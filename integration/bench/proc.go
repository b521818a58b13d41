//go:build integration

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is a measured subprocess: exactly or the Kafka Streams JVM.
type proc struct {
	name    string
	cmd     *exec.Cmd
	log     string
	started time.Time
	exited  chan struct{}
	err     error
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
	return p, nil
}

// stop sends SIGTERM, waits up to 30 s, then SIGKILL, and returns the
// child's resource usage. Its peak RSS is ru_maxrss, the high-water mark
// of its resident set (the same number as VmHWM in /proc/PID/status).
func (p *proc) stop() (usage, error) {
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
	var u usage
	if ps := p.cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			u.PeakRSSMiB = float64(ru.Maxrss) / 1024 // KiB on Linux
			u.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
	}
	return u, p.err
}

// failure describes a child that exited early.
func (p *proc) failure() error {
	return fmt.Errorf("%s exited early (%v); see %s", p.name, p.err, p.log)
}
