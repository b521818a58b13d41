//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record timestamps at the edges of what a Kafka timestamp holds (int64
// Unix ms), written by Kafka's own Java producer (testdata/
// TimestampProducer.java): the Go client reads and writes timestamps
// through int64 nanoseconds, which wrap after 2262-04-11: read that way, a
// pass-through stage would write the year 3000 as 1831 and the year 2300
// as 1715 (on topics that accept any timestamp), silently, and the sink
// would read the year 3000 as 1830-11-23T00:50:52.580896768Z. Every reader
// sees the record's own timestamp: the sink loads it; a
// stage, whose outputs must keep it and cannot, dead-letters the record
// (reason produce) with the exact timestamp in its header. A record
// written without a timestamp (-1, NO_TIMESTAMP) passes the stage with it
// and is a NULL $timestamp in the sink, as Kafka Connect's null timestamp.
func TestRecordTimestampsBeyond2262(t *testing.T) {
	t.Parallel()
	pool := pgPool(t)
	schema := freshSchema(t, pool, "tsedge")
	pgExec(t, pool, "CREATE TABLE "+schema+".events (event_id text PRIMARY KEY, ts timestamptz)")
	in, out, dlq, sdlq := uniqueName("tsedge_in"), uniqueName("tsedge_out"), uniqueName("tsedge_dlq"), uniqueName("tsedge_sdlq")
	anyTime := map[string]string{"message.timestamp.after.max.ms": "9223372036854775807"}
	topo := userTopology(t, []fileTopic{{in, 1, anyTime}, {out, 1, anyTime}, {dlq, 1, nil}, {sdlq, 1, nil}},
		"stages:\n"+jsonStageItem(uniqueName("tsedge"), in, out, dlq, "100ms", 1000)+
			"sinks:\n"+jsonSinkItem(uniqueName("tsedge_sink"), in, sdlq, schema+".events", "", "{ event_id: event_id, ts: $timestamp }", ""))

	want := map[string]int64{
		"y2025": 1735689600000,  // 2025-01-01
		"y2262": 9223372036854,  // the last ms the Go client writes as it is
		"y2300": 10413792000000, // 2300-01-01
		"y3000": 32503680000000, // 3000-01-01
	}
	var lines strings.Builder
	for id, ms := range want {
		lines.WriteString(id + "\t{\"event_id\":\"" + id + "\"}\t" + strconv.FormatInt(ms, 10) + "\n")
	}
	javaProduce(t, in, lines.String())
	// NO_TIMESTAMP: Java's ProducerRecord refuses a negative timestamp;
	// the Go client writes -1 as it is.
	cl := kafkaClient(t)
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: in, Key: []byte("none"), Value: []byte(`{"event_id":"none"}`),
		Timestamp: time.UnixMilli(-1)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := kcatTimestamps(t, in); got["y3000"] != "32503680000000" || got["none"] != "-1" {
		t.Fatalf("the input holds %v, want the timestamps as written", got)
	}

	stage := start(t, nil, "run", "--topology", topo, "--instance-id", "i1")
	sink := startSink(t, topo, "s1")
	eventually(t, 2*time.Minute, func() bool {
		return kcatCount(t, out)+kcatCount(t, dlq) == 5 && pgInt(t, pool, "SELECT count(*) FROM "+schema+".events") == 5
	}, func() string {
		return "the stage and the sink did not handle all 5 records\n" + tail(stage.logs.String(), 10) + tail(sink.logs.String(), 10)
	})
	stage.stop()
	sink.stop()

	// The stage: what it can write keeps its timestamp; what it cannot is
	// a dead letter naming it, with the exact timestamp.
	if got := kcatTimestamps(t, out); len(got) != 3 || got["y2025"] != "1735689600000" || got["y2262"] != "9223372036854" || got["none"] != "-1" {
		t.Errorf("%s holds timestamps %v, want y2025, y2262 and none with their own", out, got)
	}
	dead := map[string]kcatRecord{}
	for _, r := range kcatRead(t, dlq) {
		dead[r.Key] = r
	}
	for _, id := range []string{"y2300", "y3000"} {
		r, ok := dead[id]
		if !ok {
			t.Errorf("no dead letter for %s in %s (holds %v)", id, dlq, dead)
			continue
		}
		if r.Headers["exactly.dlq.reason"] != "produce" || r.Headers["exactly.dlq.source.timestamp"] != strconv.FormatInt(want[id], 10) ||
			!strings.Contains(r.Headers["exactly.dlq.error"], "outside what the Kafka client can write") {
			t.Errorf("dead letter of %s: headers %v, want reason produce, its exact timestamp and the reason", id, r.Headers)
		}
	}
	if len(dead) != 2 {
		t.Errorf("%s holds %d dead letters, want 2", dlq, len(dead))
	}

	// The sink loads every record with its own timestamp.
	got := queryPairs(t, pool, "SELECT event_id, coalesce((extract(epoch FROM ts) * 1000)::bigint::text, 'NULL') FROM "+schema+".events")
	for id, ms := range want {
		if got[id] != strconv.FormatInt(ms, 10) {
			t.Errorf("row %s: ts %s ms, want %d", id, got[id], ms)
		}
	}
	if got["none"] != "NULL" {
		t.Errorf("row none (no timestamp): ts %s, want NULL", got["none"])
	}
	if n := kcatCount(t, sdlq); n != 0 {
		t.Errorf("the sink dead-lettered %d records, want 0", n)
	}
}

// javaProduce writes lines (key TAB value TAB timestamp ms) to topic with
// Kafka's Java producer.
func javaProduce(t testing.TB, topic, lines string) {
	t.Helper()
	libs := os.Getenv("KAFKA_LIBS")
	if libs == "" {
		t.Fatal("KAFKA_LIBS is not set: source the env file of deploy/local/up.sh")
	}
	src, err := filepath.Abs("testdata/TimestampProducer.java")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", "-Xmx128m", "-cp", libs+"/*", src, brokers(t), topic)
	cmd.Stdin = strings.NewReader(lines)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("java producer: %v\n%s", err, out)
	}
}

// kcatTimestamps reads topic read_committed with kcat and returns each
// record's timestamp (ms, as kcat prints it) by key.
func kcatTimestamps(t testing.TB, topic string) map[string]string {
	t.Helper()
	kcat := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, kcatBin(t), append([]string{"-b", kcatBrokers(t)}, args...)...)
	}
	m := map[string]string{}
	for _, line := range kcatConsume(t, kcat, topic, "%k\t%T\n", "") {
		k, ts, _ := strings.Cut(line, "\t")
		m[k] = ts
	}
	return m
}
