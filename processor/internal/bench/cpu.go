//go:build integration

package main

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
)

// cpuShares is the CPU each party used over a measurement window, in
// cores (1.0 = one core busy the whole window).
type cpuShares struct {
	Harness float64 `json:"harness_cores"` // this process: the producer and the reader
	Stage   float64 `json:"stage_cores"`
	Broker  float64 `json:"broker_cores"`
	Machine float64 `json:"machine_cores"` // every process, other users' too
	Cores   int     `json:"cores"`
}

// cpuCost is the CPU each party spent per record, in microseconds, from
// the first record produced to the last one read back: the work, whether
// or not it kept up. The broker's share has its background use (other
// clients of a shared broker), measured just before, taken out.
type cpuCost struct {
	HarnessUs float64 `json:"harness_us"`
	StageUs   float64 `json:"stage_us"`
	BrokerUs  float64 `json:"broker_us"`
	// BrokerIdle is the broker's background use in cores.
	BrokerIdle float64 `json:"broker_idle_cores"`
}

// cores is what the three parties need at rate records/s.
func (c cpuCost) cores(rate float64) float64 {
	return (c.HarnessUs + c.StageUs + c.BrokerUs) * rate / 1e6
}

// cost is the CPU each party spent from a to m per record of n, less the
// broker's background use of idle cores.
func (m cpuMark) cost(a cpuMark, n int, idle float64) cpuCost {
	per := 1e6 / float64(n)
	wall := m.at.Sub(a.at).Seconds()
	return cpuCost{
		HarnessUs:  (m.self - a.self) * per,
		StageUs:    (m.stage - a.stage) * per,
		BrokerUs:   max(0, m.broker-a.broker-idle*wall) * per,
		BrokerIdle: idle,
	}
}

// cpuMark is a snapshot of the CPU counters that cpuShares compares.
type cpuMark struct {
	at                      time.Time
	self, stage, broker     float64 // seconds
	machineBusy, machineAll float64 // jiffies, all CPUs
}

// markCPU reads the counters of this process, the stage (pid) and the
// broker (brokerPID, 0 if unknown).
func markCPU(stage, brokerPID int) cpuMark {
	m := cpuMark{at: time.Now(), self: procCPU(os.Getpid()), stage: procCPU(stage)}
	if brokerPID > 0 {
		m.broker = procCPU(brokerPID)
	}
	m.machineBusy, m.machineAll = machineCPU()
	return m
}

// since is the CPU each party used from a to m.
func (m cpuMark) since(a cpuMark) cpuShares {
	wall := m.at.Sub(a.at).Seconds()
	s := cpuShares{
		Harness: (m.self - a.self) / wall,
		Stage:   (m.stage - a.stage) / wall,
		Broker:  (m.broker - a.broker) / wall,
		Cores:   numCPU(),
	}
	if all := m.machineAll - a.machineAll; all > 0 {
		s.Machine = (m.machineBusy - a.machineBusy) / all * float64(s.Cores)
	}
	return s
}

// procCPU is the user+system CPU time of pid in seconds (procfs,
// /proc/PID/stat), 0 if unknown.
func procCPU(pid int) float64 {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0
	}
	st, err := p.Stat()
	if err != nil {
		return 0
	}
	return st.CPUTime()
}

// machineCPU is the busy and total CPU seconds of all CPUs (procfs,
// /proc/stat): busy is all but idle and iowait.
func machineCPU() (busy, all float64) {
	st, err := procStat()
	if err != nil {
		return 0, 0
	}
	c := st.CPUTotal
	busy = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
	return busy, busy + c.Idle + c.Iowait
}

// numCPU is the number of CPUs /proc/stat lists.
func numCPU() int {
	st, err := procStat()
	if err != nil {
		return 0
	}
	return len(st.CPU)
}

// procStat reads /proc/stat.
func procStat() (procfs.Stat, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return procfs.Stat{}, err
	}
	return fs.Stat()
}

// listenerPID finds the process listening on the TCP address addr
// (host:port) on this machine: the socket's inode in /proc/net/tcp, then
// the process holding it. 0 if not found (a remote broker, or no access).
func listenerPID(addr string) int {
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return 0
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n")[1:] {
			x := strings.Fields(l)
			if len(x) < 10 || x[3] != "0A" { // LISTEN
				continue
			}
			_, p, _ := strings.Cut(x[1], ":")
			if v, err := strconv.ParseInt(p, 16, 32); err == nil && int(v) == port {
				inodes["socket:["+x[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if l, err := os.Readlink(fd); err == nil && inodes[l] {
			pid, _ := strconv.Atoi(strings.Split(fd, "/")[2])
			return pid
		}
	}
	return 0
}
