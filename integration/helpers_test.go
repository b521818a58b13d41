//go:build integration

// Package integration holds end-to-end tests against a real Apache Kafka
// broker and a real PostgreSQL, started by deploy/local/up.sh. They read
// EXACTLY_BROKERS, PG_DSN and KCAT from the environment (the file that
// up.sh writes); a missing service fails the tests, it never skips them.
//
// Records are produced and read back with kcat (librdkafka), a client that
// shares no code with exactly.
package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor"

	"github.com/exactly-io/exactly/integration/syncbuf"
	"github.com/twmb/franz-go/pkg/kgo"
)

// exactlyBin is the exactly binary, built once by TestMain.
var exactlyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "exactly-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	exactlyBin = filepath.Join(dir, "exactly")
	build := exec.Command("go", "build", "-race", "-o", exactlyBin, "../cmd/exactly")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build exactly:", err)
		os.Exit(1)
	}
	stopProxies, err := startClusterProxies()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stopProxies()
	os.RemoveAll(dir)
	os.Exit(code)
}

// kafkaClient returns a franz-go client on EXACTLY_BROKERS with opts, or
// fails the test; the caller closes it.
func kafkaClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// readCommittedClient is kafkaClient consuming topic from its start with
// isolation.level=read_committed, and opts.
func readCommittedClient(t testing.TB, topic string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return kafkaClient(t, append([]kgo.Opt{kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
}

// writeAbortedGaps writes JSON events {"event_id": KEY} in transactions of
// cl (transactional, with a default produce topic): 300 committed, 100
// aborted, 30 transactions of 7 with every fifth aborted (many markers), 200
// aborted and 300 committed. Committed events are keyed e-0, e-1, ...,
// aborted ones aborted-0, .... It returns how many of each it wrote.
func writeAbortedGaps(t testing.TB, cl *kgo.Client) (committed, aborted int) {
	t.Helper()
	ctx := context.Background()
	writeTxn := func(n int, commit bool) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			id := "e-" + strconv.Itoa(committed)
			if commit {
				committed++
			} else {
				id = "aborted-" + strconv.Itoa(aborted)
				aborted++
			}
			cl.Produce(ctx, &kgo.Record{Key: []byte(id), Value: fmt.Appendf(nil, `{"event_id":%q}`, id)}, nil)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	writeTxn(300, true)
	writeTxn(100, false)
	for i := range 30 {
		writeTxn(7, i%5 != 4)
	}
	writeTxn(200, false)
	writeTxn(300, true)
	return committed, aborted
}

// waitLogged waits up to timeout until p, which must stay alive, has
// logged text at least n times; what says what failed to happen.
func waitLogged(t testing.TB, p *proc, text string, n int, timeout time.Duration, what string) {
	t.Helper()
	eventually(t, timeout, func() bool { p.alive(); return countLines(p.logs.String(), text) >= n },
		func() string { return what })
}

// crashAndRecover runs the stages of topo with failpoint fp at its third
// hit, requires the SIGKILL it causes to come before all events are in out,
// then runs them again until out holds events records and dlq bad (within
// timeout).
func crashAndRecover(t testing.TB, topo, fp, out, dlq string, events, bad int, timeout time.Duration) {
	t.Helper()
	crashing := start(t, []string{failpointEnv + "=" + fp + "@3"}, "run", "--topology", topo, "--instance-id", "it-1")
	_ = crashing.wait(2 * time.Minute)
	if !crashing.killedBySIGKILL() {
		t.Fatalf("want the process killed by SIGKILL at %s@3, got %v", fp, crashing.cmd.ProcessState)
	}
	before := kcatCount(t, out)
	if before >= events {
		t.Fatalf("the crash came after all %d events were out: nothing was tested", before)
	}
	t.Logf("committed before the crash: %d of %d events in %s", before, events, out)

	restarted := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	eventually(t, timeout, func() bool {
		return kcatCount(t, out) >= events && kcatCount(t, dlq) >= bad
	}, func() string {
		return fmt.Sprintf("%s has %d of %d, %s has %d of %d", out, kcatCount(t, out), events, dlq, kcatCount(t, dlq), bad)
	})
	restarted.stop()
}

// brokers returns EXACTLY_BROKERS or fails the test.
var brokers = envVar("EXACTLY_BROKERS")

// envVar returns a function that returns the environment variable name,
// or fails the test: the services, and the env file that names them, come
// from deploy/local/up.sh.
func envVar(name string) func(testing.TB) string {
	return func(t testing.TB) string {
		t.Helper()
		v := os.Getenv(name)
		if v == "" {
			t.Fatalf("%s is not set: start the services with deploy/local/up.sh and source the env file it prints", name)
		}
		return v
	}
}

// kcatBin returns KCAT, or kcat from PATH, or fails the test.
func kcatBin(t testing.TB) string {
	t.Helper()
	if k := os.Getenv("KCAT"); k != "" {
		return k
	}
	return tool(t, "kcat", "deploy/local/up.sh installs it")
}

// tool returns the path of the program name on PATH, or fails the test
// with hint (how to install it): a missing tool fails, never skips.
func tool(t testing.TB, name, hint string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed: %s", name, hint)
	}
	return p
}

// uniqueName returns a topic, stage or table name unique to this run.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%04x", prefix, time.Now().Unix()%100000, rand.N(1<<16))
}

// writeFile writes content to a new file in t's temp dir and returns its path.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// buildBin builds pkg (relative to this directory) into t's temp dir.
func buildBin(t testing.TB, race bool, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// exactlyCmd runs the exactly binary to completion and returns its output.
func exactlyCmd(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(exactlyBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("exactly %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// proc is a running exactly process.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	logs *syncbuf.Buffer
	done chan struct{}
	err  error
}

// start starts exactly with args and extra environment entries (KEY=VALUE).
// The process is killed when the test ends, if still running.
func start(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	if len(args) > 0 && (args[0] == "run" || args[0] == "sink") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--metrics-addr") }) {
		// Parallel tests' processes would all bind the default metrics
		// port; a test that scrapes passes its own --metrics-addr.
		args = append(args, "--metrics-addr=")
	}
	p := &proc{t: t, cmd: exec.Command(exactlyBin, args...), logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("exactly %s logs:\n%s", strings.Join(args, " "), tail(p.logs.String(), 60))
		}
	})
	return p
}

// wait waits for the process to exit, failing the test after timeout.
func (p *proc) wait(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.t.Fatalf("exactly did not exit within %s; logs:\n%s", timeout, tail(p.logs.String(), 60))
		return nil
	}
}

// killedBySIGKILL reports whether the process ended by SIGKILL.
func (p *proc) killedBySIGKILL() bool {
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// stop sends SIGTERM and requires a clean exit (status 0).
func (p *proc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.wait(60 * time.Second); err != nil {
		p.t.Fatalf("exactly exited with %v after SIGTERM; logs:\n%s", err, tail(p.logs.String(), 60))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// eventually polls cond every interval until it returns true, failing the
// test with what() after timeout.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %s", timeout, what())
		}
		time.Sleep(100 * time.Millisecond) // polling interval of an external condition
	}
}

// kcatProduce writes lines of "key|value" to topic with kcat. A line with
// an empty value produces a null value (a tombstone), by kcat's -Z.
func kcatProduce(t testing.TB, topic string, lines [][]byte) {
	t.Helper()
	kcatProduceArgs(t, topic, lines, "-Z")
}

// kcatProduceArgs writes "key|value" lines to topic with kcat and extra
// librdkafka arguments.
func kcatProduceArgs(t testing.TB, topic string, lines [][]byte, extra ...string) {
	t.Helper()
	kcatPut(t, kcatBrokers(t), topic, kcatLines(lines), extra...)
}

// kcatProducePartition writes "key|value" lines to one partition of topic.
func kcatProducePartition(t testing.TB, topic string, partition int, lines [][]byte) {
	t.Helper()
	kcatPut(t, brokers(t), topic, kcatLines(lines), "-p", strconv.Itoa(partition))
}

// kcatLines is lines as kcat -P reads them, one a line.
func kcatLines(lines [][]byte) io.Reader {
	var in bytes.Buffer
	for _, l := range lines {
		in.Write(l)
		in.WriteByte('\n')
	}
	return &in
}

// kcatPut runs kcat -P on brokers, idempotent and acks=all, writing the
// "key|value" lines of in to topic, with extra arguments.
func kcatPut(t testing.TB, brokers, topic string, in io.Reader, extra ...string) {
	t.Helper()
	args := append([]string{"-P", "-b", brokers, "-t", topic, "-K", "|", "-X", "enable.idempotence=true", "-X", "acks=all"}, extra...)
	cmd := exec.Command(kcatBin(t), args...)
	cmd.Stdin = in
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce to %s %v: %v\n%s", topic, extra, err, out)
	}
}

// kcatRecord is one record as kcat printed it.
type kcatRecord struct {
	Partition string
	Offset    string
	Key       string
	Headers   map[string]string
	Value     string
}

// kcatRead reads topic from the beginning to its end with
// isolation.level=read_committed, so it stops at each partition's last
// stable offset. Header values must not hold ',' or '=', and values must
// not hold a newline.
func kcatRead(t testing.TB, topic string) []kcatRecord {
	t.Helper()
	kcat := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, kcatBin(t), append([]string{"-b", kcatBrokers(t)}, args...)...)
	}
	var recs []kcatRecord
	for _, line := range kcatConsume(t, kcat, topic, "%p\t%o\t%k\t%h\t%s\n", "") {
		f := strings.SplitN(line, "\t", 5)
		if len(f) != 5 {
			t.Fatalf("kcat read %s: bad line %q", topic, line)
		}
		r := kcatRecord{Partition: f[0], Offset: f[1], Key: f[2], Headers: map[string]string{}, Value: f[4]}
		if f[3] != "" {
			for _, kv := range strings.Split(f[3], ",") {
				k, v, _ := strings.Cut(kv, "=")
				r.Headers[k] = v
			}
		}
		recs = append(recs, r)
	}
	return recs
}

// kcatConsume reads topic read_committed from its beginning to its end
// with the kcat command that kcat returns for its arguments (the
// connection's are its own), and returns its output's lines: one a record
// in format. over names the connection in a failure.
func kcatConsume(t testing.TB, kcat func(ctx context.Context, args ...string) *exec.Cmd, topic, format, over string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := kcat(ctx, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-X", "isolation.level=read_committed", "-f", format)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat read %s%s: %v\n%s", topic, over, err, stderr.String())
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// kcatCount returns how many records kcatRead finds.
func kcatCount(t testing.TB, topic string) int { return len(kcatRead(t, topic)) }

// kcatCountUncommitted counts records with read_uncommitted: it sees the
// records of open transactions too.
func kcatCountUncommitted(t testing.TB, topic string) int {
	t.Helper()
	out, err := exec.Command(kcatBin(t), "-C", "-b", kcatBrokers(t), "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_uncommitted", "-f", "x\n").Output()
	if err != nil {
		t.Fatalf("kcat read_uncommitted %s: %v", topic, err)
	}
	return bytes.Count(out, []byte("\n"))
}

// runVerify runs exactly verify --json on topo, with event IDs in field
// event_id, and returns its report and exit code.
func runVerify(t *testing.T, topo string, args ...string) (processor.VerifyReport, int) {
	t.Helper()
	return runVerifyBin(t, exactlyBin, topo, "event_id", args...)
}

// runVerifyBin is runVerify with another exactly binary and event ID field.
func runVerifyBin(t *testing.T, bin, topo, eventID string, args ...string) (processor.VerifyReport, int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"verify", "--topology", topo, "--event-id", eventID, "--json", "--timeout", "2m"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var rep processor.VerifyReport
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("verify --json (exit %d): %v\n%s\n%s", code, err, raw, stderr.String())
	}
	return rep, code
}

// psqlLines runs query with psql (a client the sink does not use), and
// extra arguments, and returns its unaligned output lines.
func psqlLines(t *testing.T, query string, extra ...string) []string {
	t.Helper()
	out, err := exec.Command("psql", append([]string{pgDSN(t), "-X", "-At", "-c", query}, extra...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v\n%s", query, err, out)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
