//go:build integration

package integration

// Helpers of the tests that run whole pipelines: topologies written as a
// user writes them, Kafka's own TopicCommand for deleting,
// re-creating and growing topics, kcat for producing to a chosen
// partition, Postgres schemas and counts, and measures of a process's
// log volume and CPU time.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/procfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fileTopic is one topic of a topology file written by userTopology.
type fileTopic struct {
	name   string
	parts  int
	config map[string]string
}

// userTopology writes a topology file with topics and the YAML of its
// stages and sinks (body, starting with "stages:" or "sinks:"), and
// creates the topics with `exactly topics create`.
func userTopology(t testing.TB, topics []fileTopic, body string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nkafka:\n  brokers: [%q]\n  transaction_timeout: 30s\ntopics:\n", brokers(t))
	for _, tp := range topics {
		fmt.Fprintf(&b, "  - name: %s\n    partitions: %d\n", tp.name, tp.parts)
		if len(tp.config) > 0 {
			b.WriteString("    config:\n")
			for k, v := range tp.config {
				fmt.Fprintf(&b, "      %s: %q\n", k, v)
			}
		}
	}
	b.WriteString(body)
	path := writeFile(t, "topology.yaml", b.String())
	exactlyCmd(t, "validate", path)
	exactlyCmd(t, "topics", "create", path)
	return path
}

// jsonStageItem returns the YAML of one stage (a list item under stages:),
// reading and writing JSON keyed on event_id.
func jsonStageItem(name, in, out, dlq, interval string, maxRecords int) string {
	return stageYAML{
		name: name, in: in, out: out, dlq: dlq,
		format: "json", key: "event_id", interval: interval, maxRecords: maxRecords,
	}.yaml()
}

// jsonSinkItem returns the YAML of one sink (a list item under sinks:). An
// empty positions leaves positions_table out (the default); an empty mode
// leaves mode out (insert).
func jsonSinkItem(name, in, dlq, table, positions, columns, mode string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  - name: %s\n    input: { topic: %s, format: json }\n    dead_letter: { topic: %s }\n", name, in, dlq)
	fmt.Fprintf(&b, "    postgres:\n      dsn: ${PG_DSN}\n      table: %s\n      event_id: event_id\n      columns: %s\n", table, columns)
	if positions != "" {
		fmt.Fprintf(&b, "      positions_table: %s\n", positions)
	}
	if mode != "" {
		fmt.Fprintf(&b, "      mode: %s\n", mode)
	}
	b.WriteString("    commit: { interval: 100ms, max_records: 1000 }\n")
	return b.String()
}

// freshSchema creates a fresh Postgres schema, dropped when the test passes.
func freshSchema(t testing.TB, pool *pgxpool.Pool, prefix string) string {
	t.Helper()
	s := strings.ToLower(uniqueName(prefix))
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+s); err != nil {
		t.Fatalf("create schema %s: %v", s, err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s+" CASCADE")
		}
	})
	return s
}

// pgExec runs SQL statements (set-up: tables, triggers) or fails the test.
func pgExec(t testing.TB, pool *pgxpool.Pool, sql string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql); err != nil {
		t.Fatalf("postgres: %v\n%s", err, sql)
	}
}

// pgInt returns the integer result of a one-value query, or -1 when the
// relation does not exist yet. Other errors (Postgres restarting, say)
// are retried for up to 30 s.
func pgInt(t testing.TB, pool *pgxpool.Pool, q string, args ...any) int64 {
	t.Helper()
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var n int64
		err := pool.QueryRow(context.Background(), q, args...).Scan(&n)
		if err == nil {
			return n
		}
		if strings.Contains(err.Error(), "does not exist") {
			return -1
		}
		lastErr = err
	}
	t.Fatalf("postgres %q: %v", q, lastErr)
	return 0
}

// kafkaTool runs one of Kafka's own command-line tools (class, e.g.
// org.apache.kafka.tools.TopicCommand) from KAFKA_LIBS against
// EXACTLY_BROKERS and returns its output.
func kafkaTool(t testing.TB, class string, args ...string) (string, error) {
	t.Helper()
	libs := os.Getenv("KAFKA_LIBS")
	if libs == "" {
		t.Fatal("KAFKA_LIBS is not set: source the env file of deploy/local/up.sh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := append([]string{"-Xmx256m", "-cp", libs + "/*", class, "--bootstrap-server", brokers(t)}, args...)
	out, err := exec.CommandContext(ctx, "java", full...).CombinedOutput()
	return string(out), err
}

// topicTool runs Kafka's TopicCommand with args.
func topicTool(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return kafkaTool(t, "org.apache.kafka.tools.TopicCommand", args...)
}

// readAdmin returns a kadm client and its close function; used only to
// read (topic IDs, partition counts, group offsets).
func readAdmin(t testing.TB) (*kadm.Client, func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers(t)))
	if err != nil {
		t.Fatal(err)
	}
	return kadm.NewClient(cl), cl.Close
}

// topicInfo returns topic's ID and partition count ("" and 0 when it does
// not exist).
func topicInfo(t testing.TB, topic string) (id string, parts int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm, done := readAdmin(t)
	defer done()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	d, ok := md.Topics[topic]
	if !ok || d.Err != nil {
		return "", 0
	}
	return d.ID.String(), len(d.Partitions)
}

// recreateTopic deletes topic with Kafka's TopicCommand, waits until the
// broker no longer knows it, and creates it again with parts partitions;
// it returns the old and the new topic ID, which must differ.
func recreateTopic(t testing.TB, topic string, parts int) (oldID, newID string) {
	t.Helper()
	oldID, _ = topicInfo(t, topic)
	if out, err := topicTool(t, "--delete", "--topic", topic); err != nil {
		t.Fatalf("TopicCommand --delete %s: %v\n%s", topic, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, topic); return id == "" },
		func() string { return "topic " + topic + " still exists after --delete" })
	// The delete may still be finishing on the broker: retry the create.
	var last string
	eventually(t, time.Minute, func() bool {
		out, err := topicTool(t, "--create", "--topic", topic, "--partitions", strconv.Itoa(parts), "--replication-factor", "1")
		last = out
		return err == nil
	}, func() string { return "TopicCommand --create " + topic + ": " + last })
	eventually(t, 30*time.Second, func() bool { _, n := topicInfo(t, topic); return n == parts },
		func() string { return "topic " + topic + " not back with its partitions" })
	newID, _ = topicInfo(t, topic)
	if newID == oldID || newID == "" {
		t.Fatalf("topic %s: ID %q before, %q after re-creation", topic, oldID, newID)
	}
	t.Logf("topic %s re-created: ID %s -> %s", topic, oldID, newID)
	return oldID, newID
}

// addPartitions grows topic to parts partitions with Kafka's TopicCommand.
func addPartitions(t testing.TB, topic string, parts int) {
	t.Helper()
	if out, err := topicTool(t, "--alter", "--topic", topic, "--partitions", strconv.Itoa(parts)); err != nil {
		t.Fatalf("TopicCommand --alter %s --partitions %d: %v\n%s", topic, parts, err, out)
	}
	eventually(t, 30*time.Second, func() bool { _, n := topicInfo(t, topic); return n == parts },
		func() string { return fmt.Sprintf("topic %s does not have %d partitions", topic, parts) })
}

// eventLines returns n kcat lines key|value for event IDs prefix-from..,
// each value padded with pad bytes of incompressible text when pad > 0
// (producers compress batches, and a broker's max.message.bytes limits
// the compressed batch).
func eventLines(prefix string, from, n, pad int) [][]byte {
	lines := make([][]byte, 0, n)
	rng := rand.New(rand.NewPCG(uint64(len(prefix)), uint64(from)))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		padding := make([]byte, pad)
		for j := range padding {
			padding[j] = alphabet[rng.IntN(len(alphabet))]
		}
		lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":"%s","n":%d,"pad":"%s"}`, id, id, i, padding))
	}
	return lines
}

// groupOffsets returns the committed offsets of group for topic by
// partition (partitions without a commit are absent). A broker error
// (the coordinator moving, say) is retried for up to 30 s.
func groupOffsets(t testing.TB, group, topic string) map[int32]int64 {
	t.Helper()
	adm, done := readAdmin(t)
	defer done()
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		offs, err := adm.FetchOffsets(ctx, group)
		cancel()
		if err == nil {
			err = offs.Error()
		}
		if err != nil {
			lastErr = err
			continue
		}
		out := map[int32]int64{}
		for p, o := range offs[topic] {
			if o.At >= 0 {
				out[p] = o.At
			}
		}
		return out
	}
	t.Fatalf("fetch offsets of group %s: %v", group, lastErr)
	return nil
}

// keyCounts counts the records of topic by key, read_committed with kcat.
func keyCounts(t testing.TB, topic string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, k := range kcatKeys(t, topic) {
		out[k]++
	}
	return out
}

// cpuSeconds returns the user+system CPU time of pid in seconds (procfs,
// /proc/PID/stat), or -1 when the process has exited.
func cpuSeconds(t testing.TB, pid int) float64 {
	t.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		return -1
	}
	st, err := p.Stat()
	if err != nil {
		return -1
	}
	return st.CPUTime()
}

// exited reports whether p has exited, without failing the test.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// statusLag returns `exactly status --json`'s lag of the stage or sink
// name (-1 when it is not in the report).
func statusLag(t testing.TB, topo, name string) int64 {
	t.Helper()
	out, _ := exec.Command(exactlyBin, "status", "--topology", topo, "--json").Output()
	var rep struct {
		Stages, Sinks []struct {
			Name string
			Lag  int64
		}
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	for _, g := range append(rep.Stages, rep.Sinks...) {
		if g.Name == name {
			return g.Lag
		}
	}
	return -1
}

// readFile returns the content of path or fails the test.
func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dbName returns the database of PG_DSN.
func dbName(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(pgDSN(t))
	if err != nil {
		t.Fatalf("PG_DSN is not a URL: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// withUser returns dsn (a URL) with its user replaced by user and no
// password.
func withUser(t testing.TB, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("PG_DSN is not a URL: %v", err)
	}
	u.User = url.User(user)
	return u.String()
}

// deleteTopic deletes topic with Kafka's TopicCommand and waits until the
// broker no longer knows it.
func deleteTopic(t testing.TB, topic string) {
	t.Helper()
	if out, err := topicTool(t, "--delete", "--topic", topic); err != nil {
		t.Fatalf("TopicCommand --delete %s: %v\n%s", topic, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, topic); return id == "" },
		func() string { return "topic " + topic + " still exists after --delete" })
}

// tableCounts returns the row and distinct event ID counts of table (an SQL
// name, quoted as needed); -1 for both while it does not exist.
func tableCounts(t testing.TB, pool *pgxpool.Pool, table string) (rows, distinct int64) {
	t.Helper()
	rows = pgInt(t, pool, "SELECT count(*) FROM "+table)
	if rows < 0 {
		return -1, -1
	}
	return rows, pgInt(t, pool, "SELECT count(DISTINCT event_id) FROM "+table)
}

// waitRows waits until table holds want rows, and requires them distinct.
func waitRows(t testing.TB, pool *pgxpool.Pool, table string, want int64, timeout time.Duration, procs ...*proc) {
	t.Helper()
	eventually(t, timeout, func() bool {
		for _, p := range procs {
			p.alive()
		}
		n, _ := tableCounts(t, pool, table)
		return n >= want
	}, func() string {
		n, _ := tableCounts(t, pool, table)
		return fmt.Sprintf("table %s has %d rows, want %d", table, n, want)
	})
	if n, d := tableCounts(t, pool, table); n != want || d != want {
		t.Errorf("table %s: %d rows, %d distinct event IDs; want %d", table, n, d, want)
	}
}
