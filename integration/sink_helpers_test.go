//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
)

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

// sinkSpec is the one sink of a generated topology file. in has 3
// partitions, dlq 1. The table is <schema>.events, positions
// <schema>.positions.
type sinkSpec struct {
	name, in, dlq, schema string
	interval              string
	maxRecords            int
	sessionTimeout        string // "" for the default
	columns               string // flow mapping; default event_id and body
}

func (s sinkSpec) table() string     { return s.schema + ".events" }
func (s sinkSpec) positions() string { return s.schema + ".positions" }

// newSinkSpec returns a spec with unique names.
func newSinkSpec(prefix string) sinkSpec {
	return sinkSpec{
		name: uniqueName(prefix), in: uniqueName(prefix + "_in"), dlq: uniqueName(prefix + "_dlq"),
		schema: uniqueName("it_" + prefix), interval: "50ms", maxRecords: 1000,
	}
}

// sinkTopology writes the topology of s, creates its topics and returns
// the file's path.
func sinkTopology(t testing.TB, s sinkSpec) string {
	t.Helper()
	cols := s.columns
	if cols == "" {
		cols = "{ event_id: event_id, body: $value }"
	}
	b := sinkYAMLHead(t, s, 3, cols)
	fmt.Fprintf(b, "    commit: { interval: %s, max_records: %d }\n", s.interval, s.maxRecords)
	if s.sessionTimeout != "" {
		fmt.Fprintf(b, "    session_timeout: %s\n", s.sessionTimeout)
	}
	return writeSinkTopology(t, s, "topology.yaml", b.String())
}

// writeSinkTopology writes text, a topology file of s, to a file named
// file, creates its topics and returns the file's path. s's schema is
// dropped when the test passes.
func writeSinkTopology(t testing.TB, s sinkSpec, file, text string) string {
	t.Helper()
	path := writeFile(t, file, text)
	exactlyCmd(t, "topics", "create", path)
	pool := pgPool(t)
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.schema}.Sanitize()+" CASCADE")
		}
	})
	return path
}

// typedSink creates s's schema and its table with the column
// definitions cols ("event_id text PRIMARY KEY, n numeric(10,2), ..."),
// writes s's topology and creates its topics; it returns the pool and the
// topology file.
func typedSink(t testing.TB, s sinkSpec, cols string) (*pgxpool.Pool, string) {
	t.Helper()
	pool := pgPool(t)
	for _, q := range []string{
		"CREATE SCHEMA " + pgx.Identifier{s.schema}.Sanitize(),
		"CREATE TABLE " + s.table() + " (" + cols + ")",
	} {
		if _, err := pool.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	return pool, sinkTopology(t, s)
}

// newTypedSink is typedSink for a new sink spec of prefix whose columns
// map (the file's postgres.columns) is columns.
func newTypedSink(t testing.TB, prefix, columns, cols string) (sinkSpec, *pgxpool.Pool, string) {
	t.Helper()
	s := newSinkSpec(prefix)
	s.columns = columns
	pool, topo := typedSink(t, s, cols)
	return s, pool, topo
}

// typedCell is one record of a typed-column test: the field it sets, its
// JSON value, and what the test wants of it (the column's text for a value
// that fits, a part of the dead-letter error for one that does not).
type typedCell struct{ field, json, want string }

// statementParam is a parameter of the sink's statement ($1), not money
// ($1.23).
var statementParam = regexp.MustCompile(`\$[0-9]+([^0-9.]|$)`)

// checkStoredCells checks that each cell of good was stored as the text
// it wants (stored and dead as loadTypedCells returns them).
func checkStoredCells(t *testing.T, stored map[string]string, dead map[string]kcatJSONRecord, good map[string]typedCell) {
	t.Helper()
	for k, c := range good {
		t.Run(k, func(t *testing.T) {
			if got, ok := stored[k]; !ok || got != c.want {
				t.Errorf("%s=%s: stored %q (present %v), want %q; dead letter %v", c.field, c.json, got, ok, c.want, dead[k].Headers)
			}
		})
	}
}

// checkRefusedCells checks that each cell of bad is a dead letter, never
// a row, with the reason and an error holding the cell's want (or, when
// want is empty, the field's quoted name), in words that name none of
// the sink's internals; reason "" takes any.
func checkRefusedCells(t *testing.T, stored map[string]string, dead map[string]kcatJSONRecord, bad map[string]typedCell, reason string) {
	t.Helper()
	for k, c := range bad {
		t.Run(k, func(t *testing.T) {
			if got, ok := stored[k]; ok {
				t.Fatalf("%s=%s was stored as %q: a value the column cannot hold exactly must be dead-lettered, never rewritten", c.field, c.json, got)
			}
			r, ok := dead[k]
			if !ok {
				t.Fatalf("%s=%s: neither stored nor dead-lettered", c.field, c.json)
			}
			if got := r.Headers[deadletter.HeaderReason]; reason != "" && got != reason {
				t.Errorf("%s=%s: reason %q, want %s", c.field, c.json, got, reason)
			}
			want := c.want
			if want == "" {
				want = fmt.Sprintf("%q", c.field)
			}
			e := r.Headers[deadletter.HeaderError]
			if !strings.Contains(e, want) {
				t.Errorf("%s=%s: dead-letter error %q, want it to contain %q", c.field, c.json, e, want)
			}
			if strings.Contains(e, "staging") || strings.Contains(e, "exactly_refuse") || statementParam.MatchString(e) {
				t.Errorf("dead-letter error %q names the sink's internals", e)
			}
		})
	}
}

// loadTypedCells produces one record a cell to s.in (key k, value
// {"event_id":k, field: json}), runs the sink of topo until each record
// is a row or a dead letter, and returns the text of valExpr (a column or
// a coalesce of columns) by event_id and the dead letters by key.
func loadTypedCells(t testing.TB, pool *pgxpool.Pool, s sinkSpec, topo, valExpr string, cells ...map[string]typedCell) (stored map[string]string, dead map[string]kcatJSONRecord) {
	t.Helper()
	var lines [][]byte
	for _, m := range cells {
		for k, c := range m {
			lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q,%q:%s}`, k, k, c.field, c.json))
		}
	}
	kcatProduce(t, s.in, lines)
	p := startSink(t, topo, "a1")
	eventually(t, time.Minute, func() bool {
		rows, _ := rowStats(t, pool, s.table())
		return rows+kcatCount(t, s.dlq) >= len(lines)
	}, func() string { return fmt.Sprintf("%d dead letters", kcatCount(t, s.dlq)) })
	p.stop()
	dead = map[string]kcatJSONRecord{}
	for _, r := range kcatReadJSON(t, s.dlq) {
		dead[r.Key] = r
	}
	return tableRows(t, pool, s.table(), valExpr), dead
}

// sinkYAMLHead starts the text of a one-sink topology file for s: topics
// s.in with partitions partitions and s.dlq with 1, and the sink reading
// s.in as JSON into its table through the columns map columns, with its
// positions table; the caller adds the sink's further lines.
func sinkYAMLHead(t testing.TB, s sinkSpec, partitions int, columns string) *strings.Builder {
	t.Helper()
	b := &strings.Builder{}
	fmt.Fprintf(b, "version: 1\nkafka:\n  brokers: [%q]\ntopics:\n  - { name: %s, partitions: %d }\n  - { name: %s, partitions: 1 }\n",
		brokers(t), s.in, partitions, s.dlq)
	fmt.Fprintf(b, "sinks:\n  - name: %s\n    input: { topic: %s, format: json }\n    dead_letter: { topic: %s }\n", s.name, s.in, s.dlq)
	fmt.Fprintf(b, "    postgres:\n      dsn: ${PG_DSN}\n      table: %s\n      positions_table: %s\n      event_id: event_id\n      columns: %s\n",
		s.table(), s.positions(), columns)
	return b
}

// startSink runs `exactly sink` for s as instance id.
func startSink(t testing.TB, topo, id string, env ...string) *proc {
	t.Helper()
	return start(t, env, "sink", "--topology", topo, "--instance-id", id, "--log-level", "debug")
}

// events returns n kcat lines key|value for events prefix-0..prefix-(n-1).
func events(prefix string, from, n int) [][]byte {
	lines := make([][]byte, 0, n)
	for i := from; i < from+n; i++ {
		lines = append(lines, fmt.Appendf(nil, `%s-%d|{"event_id":"%s-%d","n":%d,"note":"a:b,c"}`, prefix, i, prefix, i, i))
	}
	return lines
}

// rowStats returns the row count and distinct event ID count of table.
func rowStats(t testing.TB, pool *pgxpool.Pool, table string) (rows, distinct int) {
	t.Helper()
	q := fmt.Sprintf("SELECT count(*), count(DISTINCT event_id) FROM %s", table)
	if err := pool.QueryRow(context.Background(), q).Scan(&rows, &distinct); err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return 0, 0 // the sink has not created it yet
		}
		t.Fatalf("count rows of %s: %v", table, err)
	}
	return rows, distinct
}

// storedPositions returns topic's stored next offsets by partition.
func storedPositions(t testing.TB, pool *pgxpool.Pool, positions, topic string) map[int32]int64 {
	t.Helper()
	out := map[int32]int64{}
	rows, err := pool.Query(context.Background(), fmt.Sprintf("SELECT partition, next_offset FROM %s WHERE topic = $1", positions), topic)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") {
			return out
		}
		t.Fatalf("read positions: %v", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p int32
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			t.Fatal(err)
		}
		out[p] = n
	}
	return out
}

// committedEnds returns each partition's read_committed end (last stable
// offset) of topic.
func committedEnds(t testing.TB, topic string) map[int32]int64 {
	t.Helper()
	cl := kafkaClient(t)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lo, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list committed offsets of %s: %v", topic, err)
	}
	out := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("list committed offsets of %s/%d: %v", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

// positionsAtEnd reports whether every partition's stored position is its
// read_committed end.
func positionsAtEnd(t testing.TB, pool *pgxpool.Pool, s sinkSpec) bool {
	t.Helper()
	return positionsTableAtEnd(t, pool, s.positions(), s.in)
}

// positionsTableAtEnd reports whether the positions table positions holds
// topic's read_committed end for every partition.
func positionsTableAtEnd(t testing.TB, pool *pgxpool.Pool, positions, topic string) bool {
	t.Helper()
	got, want := storedPositions(t, pool, positions, topic), committedEnds(t, topic)
	if len(got) != len(want) {
		return false
	}
	for p, n := range want {
		if got[p] != n {
			return false
		}
	}
	return true
}

// waitSinkDone waits until table holds want rows and every stored position
// is at its partition's read_committed end, then checks for duplicates.
func waitSinkDone(t testing.TB, pool *pgxpool.Pool, s sinkSpec, want int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() bool {
		n, _ := rowStats(t, pool, s.table())
		return n >= want && positionsAtEnd(t, pool, s)
	}, func() string {
		n, _ := rowStats(t, pool, s.table())
		return fmt.Sprintf("%d of %d rows; positions %v, read_committed ends %v", n, want, storedPositions(t, pool, s.positions(), s.in), committedEnds(t, s.in))
	})
	rows, distinct := rowStats(t, pool, s.table())
	if rows != want || distinct != want {
		t.Fatalf("table %s: %d rows, %d distinct event IDs; want %d of each", s.table(), rows, distinct, want)
	}
}

// positionRecorder samples the stored positions of a sink until stopped,
// and reports any position that ever decreased.
type positionRecorder struct {
	background
	samples atomic.Int64
	mu      sync.Mutex
	history map[int32][]int64
	backs   []string
}

func recordPositions(t testing.TB, pool *pgxpool.Pool, s sinkSpec) *positionRecorder {
	r := &positionRecorder{history: map[int32][]int64{}}
	r.background = startBackground(t, 20*time.Millisecond, func() bool {
		rows, err := pool.Query(context.Background(), fmt.Sprintf("SELECT partition, next_offset FROM %s WHERE topic = $1", s.positions()), s.in)
		if err != nil {
			return true // not created yet, or Postgres restarting
		}
		r.mu.Lock()
		for rows.Next() {
			var p int32
			var n int64
			if rows.Scan(&p, &n) != nil {
				continue
			}
			h := r.history[p]
			if len(h) > 0 && n < h[len(h)-1] {
				r.backs = append(r.backs, fmt.Sprintf("partition %d: %d -> %d", p, h[len(h)-1], n))
			}
			if len(h) == 0 || h[len(h)-1] != n {
				r.history[p] = append(h, n)
			}
		}
		r.mu.Unlock()
		rows.Close()
		r.samples.Add(1)
		return true
	})
	return r
}

// background is a goroutine that runs until stop is closed, then closes
// done.
type background struct {
	stop chan struct{}
	done chan struct{}
}

// startBackground calls tick every interval in a goroutine until finish
// is called (at the latest when t ends) or tick returns false.
func startBackground(t testing.TB, interval time.Duration, tick func() bool) background {
	b := background{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-ticker.C:
			}
			if !tick() {
				return
			}
		}
	}()
	t.Cleanup(b.finish)
	return b
}

// finish stops the goroutine, once however often it is called, and waits
// for it to end.
func (b background) finish() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
}

// check stops the recorder and fails t if a position ever decreased.
func (r *positionRecorder) check(t testing.TB) {
	t.Helper()
	r.finish()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.backs) > 0 {
		t.Fatalf("stored positions moved backwards: %s", strings.Join(r.backs, "; "))
	}
	parts := make([]int, 0, len(r.history))
	changes := 0
	for p, h := range r.history {
		parts = append(parts, int(p))
		changes += len(h)
	}
	sort.Ints(parts)
	t.Logf("positions sampled %d times; %d distinct values over partitions %v; never decreased", r.samples.Load(), changes, parts)
}

// producer writes events prefix-N to topic with a kgo client, in the
// background, until stopped; it returns how many it wrote.
type producer struct {
	background
	n   atomic.Int64
	err error
}

func startProducer(t testing.TB, topic, prefix string, perTick int) *producer {
	t.Helper()
	cl := kafkaClient(t, kgo.DefaultProduceTopic(topic))
	t.Cleanup(cl.Close) // after the producer's goroutine ends (cleanups run last first)
	p := &producer{}
	p.background = startBackground(t, 20*time.Millisecond, func() bool {
		var recs []*kgo.Record
		base := int(p.n.Load())
		for i := base; i < base+perTick; i++ {
			id := fmt.Sprintf("%s-%d", prefix, i)
			recs = append(recs, &kgo.Record{Key: []byte(id), Value: fmt.Appendf(nil, `{"event_id":%q,"n":%d}`, id, i)})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cl.ProduceSync(ctx, recs...).FirstErr()
		cancel()
		if err != nil {
			p.err = err
			return false
		}
		p.n.Add(int64(perTick))
		return true
	})
	return p
}

// halt stops the producer and returns how many events it wrote.
func (p *producer) halt(t testing.TB) int {
	t.Helper()
	p.finish()
	if p.err != nil {
		t.Fatalf("producer: %v", p.err)
	}
	return int(p.n.Load())
}

// pgStop stops the local Postgres (fast shutdown), keeping its data.
func pgStop(t testing.TB) { pgCtl(t, "stop", "-m", "fast", "-w", "-t", "60") }

// pgStart starts the local Postgres again on its existing data.
func pgStart(t testing.TB) {
	runDir := os.Getenv("EXACTLY_RUN_DIR")
	if runDir == "" {
		runDir = "/tmp/exactly-local"
	}
	pgCtl(t, "start", "-w", "-t", "60", "-l", filepath.Join(runDir, "pg", "postgres.log"))
}

// pgCtl runs pg_ctl on the local cluster of deploy/local/postgres.sh, as
// its owner. Unlike `postgres.sh start`, which builds a fresh cluster,
// `pg_ctl start` keeps the data: a restart, not a rebuild.
func pgCtl(t testing.TB, args ...string) {
	t.Helper()
	runDir := os.Getenv("EXACTLY_RUN_DIR")
	if runDir == "" {
		runDir = "/tmp/exactly-local"
	}
	data := filepath.Join(runDir, "pg", "data")
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		t.Fatal("pg_ctl not found under /usr/lib/postgresql")
	}
	sort.Strings(bins)
	full := append([]string{bins[len(bins)-1], "-D", data}, args...)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--"}, full...)...)
	} else {
		cmd = exec.Command(full[0], full[1:]...)
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// refuseTrigger returns the DDL (a format, %[1]s the schema) of table, a
// CREATE TABLE of %[1]s.events, with a trigger refuse that runs the
// plpgsql statements raises (each an IF ... RAISE) before each insert or
// update.
func refuseTrigger(table string, raises ...string) string {
	var b strings.Builder
	b.WriteString(table + ";\nCREATE FUNCTION %[1]s.refuse() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n")
	for _, r := range raises {
		b.WriteString("\t" + r + "\n")
	}
	b.WriteString("\tRETURN NEW;\nEND $$;\nCREATE TRIGGER refuse BEFORE INSERT OR UPDATE ON %[1]s.events FOR EACH ROW EXECUTE FUNCTION %[1]s.refuse()")
	return b.String()
}
