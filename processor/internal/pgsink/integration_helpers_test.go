//go:build integration

package pgsink_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchInput creates topics (name: partitions) and writes b.N records to
// in, record i from rec(i), all before the timer starts.
func benchInput(b *testing.B, topics map[string]int32, in string, rec func(i int) *kgo.Record) {
	b.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers(b)), kgo.DefaultProduceTopic(in), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for topic, parts := range topics {
		if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
			b.Fatal(err)
		}
	}
	for i := range b.N {
		cl.Produce(ctx, rec(i), func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchRun resets the timer and runs run (a stage's or a sink's Run) until
// finished reports true, asked every poll; then it stops the timer and run,
// and fails b if run stopped early or with an error. It returns when run
// started and how long it took to finish.
func benchRun(b *testing.B, poll time.Duration, run func(context.Context) error, finished func() bool) (started time.Time, elapsed time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	started = time.Now()
	go func() { done <- run(ctx) }()
	for !finished() {
		select {
		case err := <-done:
			b.Fatalf("stopped before it finished: %v", err)
		case <-time.After(poll):
		}
	}
	elapsed = time.Since(started)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return started, elapsed
}

// brokers returns EXACTLY_BROKERS or fails the test.
var brokers = envVar("EXACTLY_BROKERS")

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

// kcatProduce writes lines of "key|value" to topic with kcat. A line with
// an empty value produces a null value (a tombstone), by kcat's -Z.
func kcatProduce(t testing.TB, topic string, lines [][]byte) {
	t.Helper()
	kcatProduceArgs(t, topic, lines, "-Z")
}

// pgDSN returns PG_DSN or fails the test.
var pgDSN = envVar("PG_DSN")

// pgPool connects to PG_DSN; it is closed when the test ends.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), pgDSN(t))
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
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

// newTopic creates a topic of one partition, named by prefix and unique
// to this run, and returns its name.
func newTopic(t *testing.T, prefix string) string {
	t.Helper()
	topic := uniqueName(prefix)
	if _, err := kadm.NewClient(kafkaClient(t)).CreateTopic(context.Background(), 1, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	return topic
}

// uniqueName returns a topic, stage or table name unique to this run.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%04x", prefix, time.Now().Unix()%100000, rand.N(1<<16))
}

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

// kcatProduceArgs writes "key|value" lines to topic with kcat and extra
// librdkafka arguments.
func kcatProduceArgs(t testing.TB, topic string, lines [][]byte, extra ...string) {
	t.Helper()
	kcatPut(t, kcatBrokers(t), topic, kcatLines(lines), extra...)
}

// kcatBrokers is the bootstrap list for kcat and the test's own clients:
// the direct listeners in the cluster profile, else EXACTLY_BROKERS.
func kcatBrokers(t testing.TB) string {
	t.Helper()
	if clusterOn() {
		return clusterDirect()
	}
	return brokers(t)
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

// clusterDirect is the nodes' INTERNAL listeners, comma separated.
func clusterDirect() string {
	var s []string
	for _, n := range clusterNodes {
		s = append(s, clusterAddr(n, 2))
	}
	return strings.Join(s, ",")
}

func clusterOn() bool { return os.Getenv("EXACTLY_CLUSTER") == "1" }

// clusterPortBase is cluster.sh's CLUSTER_PORT_BASE: node N's client port
// is base+100N, its INTERNAL port base+100N+2, its EXTERNAL port +3.
func clusterPortBase() int {
	if b, err := strconv.Atoi(os.Getenv("CLUSTER_PORT_BASE")); err == nil {
		return b
	}
	return 19092
}

// kcatBin returns KCAT, or kcat from PATH, or fails the test.
func kcatBin(t testing.TB) string {
	t.Helper()
	if k := os.Getenv("KCAT"); k != "" {
		return k
	}
	return tool(t, "kcat", "deploy/local/up.sh installs it")
}
func clusterAddr(node int32, offset int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(clusterPortBase()+100*int(node)+offset))
}

// clusterNodes are the node IDs of cluster.sh.
var clusterNodes = []int32{1, 2, 3}

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

func newSinkSpec(prefix string) sinkSpec {
	return sinkSpec{
		name: uniqueName(prefix), in: uniqueName(prefix + "_in"), dlq: uniqueName(prefix + "_dlq"),
		schema: uniqueName("it_" + prefix), interval: "50ms", maxRecords: 1000,
	}
}

type sinkSpec struct {
	name, in, dlq, schema string
	interval              string
	maxRecords            int
}

func (s sinkSpec) table() string     { return s.schema + ".events" }
func (s sinkSpec) positions() string { return s.schema + ".positions" }
