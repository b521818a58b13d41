package main

// The stage mode: the peak RSS of a real `exactly run` process with a
// dedupe step, rather than of the state code alone.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/exactly-io/exactly/integration/opstest"
	"github.com/exactly-io/exactly/integration/syncbuf"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stageBench is one run of the stage mode.
type stageBench struct {
	opts    []kgo.Opt
	adm     *kadm.Client
	bin     string // the exactly binary
	topo    string
	dir     string
	state   string // --state-dir
	stage   string
	in      string
	n       int
	resend  int
	timeout time.Duration
}

// stageMode produces n distinct IDs to the input topic of a one-stage
// topology whose only step is a dedupe, then runs `exactly run` three
// times and reads each process's VmHWM from /proc/<pid>/status:
//
//  1. fill: the stage consumes the n IDs, and is stopped once its group
//     has committed them all;
//  2. restore: the state dir is deleted, and the stage restores the whole
//     changelog; resend IDs already seen are then produced again, and the
//     stage must drop every one;
//  3. restart: the same state dir, with its checkpoints, as after a clean
//     stop; resend more seen IDs, all dropped.
func stageMode(ctx context.Context, opts []kgo.Opt, brokers, bin string, n, resend int, dir string, keep bool, timeout time.Duration) error {
	if bin == "" {
		return errors.New("-mode stage needs -exactly, the exactly binary (go build -o /tmp/exactly ./cmd/exactly)")
	}
	if resend < 1 || 2*resend > n {
		return fmt.Errorf("-resend %d: want 1 to n/2 (each restart phase resends its own seen IDs)", resend)
	}
	dir, cleanup, err := workDir(dir, "statebench-stage-", keep)
	if err != nil {
		return err
	}
	defer cleanup()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	tag := strconv.FormatInt(time.Now().Unix()%1_000_000, 10)
	b := &stageBench{opts: opts, adm: kadm.NewClient(cl), bin: bin, dir: dir, state: filepath.Join(dir, "state"),
		stage: "statebench" + tag, in: "statebench-" + tag + "-in", n: n, resend: resend, timeout: timeout}
	out, dlq := "statebench-"+tag+"-out", "statebench-"+tag+"-dlq"
	changelog := "exactly-" + b.stage + "-dedupe-changelog"
	b.topo = filepath.Join(dir, "topology.yaml")
	if err := os.WriteFile(b.topo, fmt.Appendf(nil, `version: 1
kafka:
  brokers: [%q]
topics:
  - { name: %s, partitions: %d }
  - { name: %s, partitions: %d }
  - { name: %s, partitions: 1 }
stages:
  - name: %s
    input: { topic: %s }
    output: { topic: %s }
    dead_letter: { topic: %s }
    transform:
      - dedupe: { id: value.id, retention: 7d }
`, brokers, b.in, partitions, out, partitions, dlq, b.stage, b.in, out, dlq), 0o644); err != nil {
		return err
	}
	if msg, err := exec.CommandContext(ctx, bin, "topics", "create", "--topology", b.topo).CombinedOutput(); err != nil {
		return fmt.Errorf("exactly topics create: %w\n%s", err, msg)
	}
	if !keep {
		defer func() {
			ctx := context.Background()
			_, _ = b.adm.DeleteTopics(ctx, b.in, out, dlq, changelog)
			_, _ = b.adm.DeleteGroup(ctx, "exactly-"+b.stage)
		}()
	}
	fmt.Printf("statebench stage: %d distinct IDs, stage %s (dedupe, %d partitions), %s, dir %s\n", n, b.stage, partitions, bin, dir)

	t0 := time.Now()
	if err := b.produce(ctx, 0, n); err != nil {
		return err
	}
	fmt.Printf("input:   %d records produced in %s\n", n, time.Since(t0).Round(time.Millisecond))

	// 1. fill
	p, err := b.start(ctx, "fill")
	if err != nil {
		return err
	}
	defer p.kill()
	if err := b.caughtUp(ctx, p); err != nil {
		return err
	}
	fillTime := time.Since(p.started)
	m, err := p.finish(ctx)
	if err != nil {
		return err
	}
	if m.entries != int64(n) || m.deduplicated != 0 {
		return fmt.Errorf("fill: the stage holds %d IDs and dropped %d, want %d and 0", m.entries, m.deduplicated, n)
	}
	fmt.Printf("fill:    %d IDs in %s (%.0f IDs/s, from process start to every offset committed), VmHWM %s (%s), state dir %s\n",
		n, fillTime.Round(time.Millisecond), float64(n)/fillTime.Seconds(), mib(m.hwm), m.memory(), mib(dirSize(b.state)))

	// 2. full restore, then resent IDs
	if err := os.RemoveAll(b.state); err != nil {
		return err
	}
	if err := b.restartPhase(ctx, "restore", 0); err != nil {
		return err
	}
	// 3. restart with the checkpoints
	return b.restartPhase(ctx, "restart", resend)
}

// restartPhase starts the stage on b.state, waits for its restore,
// produces b.resend IDs already seen (from the from-th), requires every
// one dropped, and prints the phase's figures.
func (b *stageBench) restartPhase(ctx context.Context, name string, from int) error {
	p, err := b.start(ctx, name)
	if err != nil {
		return err
	}
	defer p.kill()
	records, took, err := p.restored(ctx, b.timeout)
	if err != nil {
		return err
	}
	ready := time.Since(p.started)
	hwmRestored := p.hwm()
	if err := b.produce(ctx, from, b.resend); err != nil {
		return err
	}
	if err := b.caughtUp(ctx, p); err != nil {
		return err
	}
	m, err := p.finish(ctx)
	if err != nil {
		return err
	}
	// The kernel's per-thread RSS counters are synced lazily, so a later
	// VmHWM can read a little below an earlier one: the phase's peak is
	// the larger.
	m.hwm = max(m.hwm, hwmRestored)
	if m.entries != int64(b.n) || m.deduplicated != int64(b.resend) {
		return fmt.Errorf("%s: the stage holds %d IDs and dropped %d of %d resent IDs, want %d and all", name, m.entries, m.deduplicated, b.resend, b.n)
	}
	switch name {
	case "restore":
		fmt.Printf("restore: full restore of %d changelog records in %s (%.0f entries/s), ready %s after start, VmHWM %s when restored; %d resent IDs all dropped, peak VmHWM %s (%s), state dir %s\n",
			records, took.Round(time.Millisecond), float64(b.n)/took.Seconds(), ready.Round(time.Millisecond), mib(hwmRestored), b.resend, mib(m.hwm), m.memory(), mib(dirSize(b.state)))
	default:
		if records != 0 {
			return fmt.Errorf("restart with valid checkpoints read %d changelog records, want 0", records)
		}
		fmt.Printf("restart: %d changelog records read, ready %s after start, VmHWM %s when restored; %d resent IDs all dropped, peak VmHWM %s (%s)\n",
			records, ready.Round(time.Millisecond), mib(hwmRestored), b.resend, mib(m.hwm), m.memory())
	}
	return nil
}

// produce writes count records {"id": ID} keyed by their ID, IDs from-th
// on, as the fill phase of the store mode makes them.
func (b *stageBench) produce(ctx context.Context, from, count int) error {
	cl, err := kgo.NewClient(append(b.opts, kgo.DefaultProduceTopic(b.in), kgo.ProducerLinger(10*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20), kgo.MaxBufferedRecords(200_000))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var (
		mu   sync.Mutex
		perr error
	)
	for i := from; i < from+count; i++ {
		id := "event-" + strconv.Itoa(i) + "-abcdefghijklmnop"
		cl.Produce(ctx, &kgo.Record{Key: []byte(id), Value: []byte(`{"id":"` + id + `"}`)}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				perr = errors.Join(perr, err)
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return perr
}

// caughtUp waits until the stage's group has committed the end of every
// input partition (written without transactions: its end is its high
// watermark), while p runs.
func (b *stageBench) caughtUp(ctx context.Context, p *stageProc) error {
	deadline := time.Now().Add(b.timeout)
	for {
		ends, err := b.adm.ListEndOffsets(ctx, b.in)
		if err == nil {
			var offs kadm.OffsetResponses
			if offs, err = b.adm.FetchOffsets(ctx, "exactly-"+b.stage); err == nil {
				lag := int64(0)
				ends.Each(func(e kadm.ListedOffset) {
					at := int64(0)
					if c, ok := offs.Lookup(b.in, e.Partition); ok && c.At > 0 {
						at = c.At
					}
					lag += e.Offset - at
				})
				if lag == 0 {
					return nil
				}
			}
		}
		if p.exited() {
			return fmt.Errorf("%s: exactly exited: %s", p.phase, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the stage did not catch up within %s (last error %v)", p.phase, b.timeout, err)
		}
		time.Sleep(time.Second) // polls the broker
	}
}

// start runs `exactly run` for the phase, its logs in <dir>/<phase>.log.
func (b *stageBench) start(ctx context.Context, phase string) (*stageProc, error) {
	addr, err := opstest.Addr()
	if err != nil {
		return nil, err
	}
	p := &stageProc{phase: phase, metrics: "http://" + addr + "/metrics", done: make(chan struct{}), logs: &syncbuf.Buffer{}}
	logFile, err := os.Create(filepath.Join(b.dir, phase+".log"))
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--topology", b.topo, "--instance-id", "bench", "--state-dir", b.state, "--metrics-addr", addr}
	p.cmd = exec.CommandContext(ctx, b.bin, args...)
	p.cmd.Stdout = logFile
	p.cmd.Stderr = &teeBuf{p.logs, logFile}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() { p.err = p.cmd.Wait(); logFile.Close(); close(p.done) }()
	return p, nil
}

// stageProc is a running `exactly run`.
type stageProc struct {
	phase   string
	cmd     *exec.Cmd
	started time.Time
	metrics string
	logs    *syncbuf.Buffer
	done    chan struct{}
	err     error
}

// stageMetrics is what a phase reads of the process before stopping it.
type stageMetrics struct {
	hwm, rss              int64 // bytes, of /proc/<pid>/status
	heapInuse, goSys      float64
	entries, deduplicated int64
}

func (m stageMetrics) memory() string {
	return fmt.Sprintf("VmRSS %s, Go heap in use %s, Go runtime total %s", mib(m.rss), mib(int64(m.heapInuse)), mib(int64(m.goSys)))
}

var restoredLine = regexp.MustCompile(`msg="state restored".* records=(\d+) elapsed=(\S+)`)

// restored waits for the stage's "state restored" log line and returns
// its records and elapsed.
func (p *stageProc) restored(ctx context.Context, timeout time.Duration) (int64, time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for {
		if m := restoredLine.FindStringSubmatch(p.logs.String()); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			d, err := time.ParseDuration(m[2])
			return n, d, err
		}
		if p.exited() {
			return 0, 0, fmt.Errorf("%s: exactly exited before its restore ended: %s", p.phase, p.tail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, 0, fmt.Errorf("%s: no restore within %s: %s", p.phase, timeout, p.tail())
		}
		time.Sleep(200 * time.Millisecond) // polls the process's log
	}
}

// finish reads the process's memory and metrics, then stops it with
// SIGTERM and requires a clean exit.
func (p *stageProc) finish(ctx context.Context) (stageMetrics, error) {
	m := stageMetrics{hwm: p.hwm(), rss: int64(opstest.VMStatus(p.cmd.Process.Pid).VmRSS)}
	vals, err := opstest.Scrape(ctx, p.metrics)
	if err != nil {
		return m, fmt.Errorf("%s: %w", p.phase, err)
	}
	total := func(name string) float64 { v, _ := vals.Sum(name, nil); return v }
	m.heapInuse, m.goSys = total("go_memstats_heap_inuse_bytes"), total("go_memstats_sys_bytes")
	m.entries, m.deduplicated = int64(total("exactly_stage_state_entries")), int64(total("exactly_stage_deduplicated_records_total"))
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		return m, fmt.Errorf("%s: exactly did not stop within 2 minutes of SIGTERM", p.phase)
	}
	if p.err != nil {
		return m, fmt.Errorf("%s: exactly exited with %v after SIGTERM: %s", p.phase, p.err, p.tail())
	}
	return m, nil
}

func (p *stageProc) hwm() int64 { return int64(opstest.VMStatus(p.cmd.Process.Pid).VmHWM) }

func (p *stageProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process if it still runs (an error path).
func (p *stageProc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *stageProc) tail() string {
	s := strings.TrimSpace(p.logs.String())
	if i := strings.LastIndex(s[:max(len(s)-2000, 0)], "\n"); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// teeBuf writes to the buffer and the log file.
type teeBuf struct {
	b *syncbuf.Buffer
	f *os.File
}

func (t *teeBuf) Write(p []byte) (int, error) {
	_, _ = t.b.Write(p)
	return t.f.Write(p)
}
