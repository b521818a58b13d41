//go:build integration

package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/integration/internal/tcpproxy"
	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

// Fault modes of a kafkaFaults dialer.
const (
	faultNone     = iota
	faultConsumer // fetch, produce, group and transaction requests fail; metadata and offset look-ups answer
	faultAll      // no connection at all
)

// consumerRequests are the API keys faultConsumer refuses: what a stage
// needs to fetch, produce, stay in its group and commit (Produce, Fetch,
// OffsetCommit, JoinGroup, Heartbeat, LeaveGroup, SyncGroup,
// InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
// TxnOffsetCommit, ConsumerGroupHeartbeat). ListOffsets, Metadata,
// FindCoordinator and OffsetFetch answer, as a partition leader does while
// a stage's coordinator is cut off.
var consumerRequests = map[int16]bool{0: true, 1: true, 8: true, 11: true, 12: true, 13: true, 14: true,
	22: true, 24: true, 25: true, 26: true, 28: true, 68: true}

// kafkaFaults is a kgo.Dialer whose connections fail by mode: a client
// built on it sees the broker refuse it, while the broker itself, and
// every other client, is fine. franz-go writes each request in one Write
// (size, API key, ...), so a request is refused by its key.
type kafkaFaults struct {
	mu    sync.Mutex
	mode  int
	conns map[*faultConn]bool
}

func (k *kafkaFaults) set(mode int) {
	k.mu.Lock()
	k.mode = mode
	conns := k.conns
	k.conns = map[*faultConn]bool{}
	k.mu.Unlock()
	if mode != faultNone {
		for c := range conns {
			_ = c.Conn.Close()
		}
	}
}

func (k *kafkaFaults) refuses(key int16) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mode == faultAll || k.mode == faultConsumer && consumerRequests[key]
}

func (k *kafkaFaults) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	k.mu.Lock()
	all := k.mode == faultAll
	k.mu.Unlock()
	if all {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	fc := &faultConn{Conn: c, k: k}
	k.mu.Lock()
	if k.conns == nil {
		k.conns = map[*faultConn]bool{}
	}
	k.conns[fc] = true
	k.mu.Unlock()
	return fc, nil
}

type faultConn struct {
	net.Conn
	k *kafkaFaults
}

func (c *faultConn) Write(b []byte) (int, error) {
	if len(b) >= 6 && c.k.refuses(int16(binary.BigEndian.Uint16(b[4:6]))) {
		_ = c.Conn.Close()
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Write(b)
}

// shortRules writes the shipped alert rules with their waits made short
// for a test: every for: 5s, every range 20s, and the 30 s thresholds of
// time since the last commit and of the lag's age 10 s. The expressions
// are the shipped ones otherwise.
func shortRules(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ re, to string }{
		{`for: \d+m`, "for: 5s"},
		{`\[\d+m\]`, "[20s]"},
		{`\) > 30\b`, ") > 10"},
		{`_seconds > 30\b`, "_seconds > 10"},
	} {
		re := regexp.MustCompile(r.re)
		if !re.Match(text) {
			t.Fatalf("alerts.yaml: nothing matches %s", r.re)
		}
		text = re.ReplaceAll(text, []byte(r.to))
	}
	path := filepath.Join(t.TempDir(), "alerts.yaml")
	if err := os.WriteFile(path, text, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runFaultyEngine runs an engine of f's stages or sinks (opts select
// them), as instance stall-1, with every Kafka connection through a
// kafkaFaults dialer in mode from the start, and serves its endpoints on a
// free address. The engine stops when the test ends.
func runFaultyEngine(t *testing.T, f *topology.File, mode int, opts ...processor.Option) (*kafkaFaults, string, *http.Server) {
	t.Helper()
	faults := &kafkaFaults{mode: mode}
	opts = append(opts, processor.InstanceID("stall-1"), processor.WithRegistry(prometheus.NewRegistry()),
		processor.StateDir(t.TempDir()), processor.WithKafkaOptions(kgo.Dialer(faults.Dial)))
	eng, err := processor.New(f, opts...)
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	srv := &http.Server{Addr: addr, Handler: eng.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.ListenAndServe() }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() {
		faults.set(faultNone)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
		_ = srv.Close()
	})
	return faults, addr, srv
}

// feedJSON writes 100 JSON records a second to topic, from a client of its
// own, until the returned function is called.
func feedJSON(t *testing.T, topic string) (stop func()) {
	t.Helper()
	prod := kafkaClient(t, kgo.DefaultProduceTopic(topic))
	ctx, cancel := context.WithCancel(context.Background())
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			for j := range 10 {
				prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "e-%d-%d", i, j), Value: fmt.Appendf(nil, `{"event_id":"e-%d-%d","n":%d}`, i, j, j)}, nil)
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-fed; prod.Close() }
}

// firingFor returns whether alertname fires for the series labelled
// label=value, on Prometheus at prom.
func firingFor(t *testing.T, prom, alertname, label, value string) bool {
	n, err := promQuery(t, prom, fmt.Sprintf(`ALERTS{alertname=%q,alertstate="firing",%s=%q}`, alertname, label, value))
	return err == nil && n > 0
}

// A stage that cannot fetch or commit, or reach its broker at all, while
// its input grows: against a real Prometheus evaluating the shipped rules
// (waits shortened), ExactlyStageTransactionOpenTooLong fires for a stage
// cut off entirely, whose lag series stay with their last value while
// their age grows; and for a stage whose fetches and commits fail while
// offset look-ups answer, the lag follows the real lag (read with kadm,
// apart from the stage) and ExactlyStageLagGrowing,
// ExactlyStageTransactionOpenTooLong and ExactlyStageNotReady fire. Once
// the network is back, the stage catches up and the lag reads 0. An
// instance that answers no scrape trips ExactlyInstanceDown.
func TestAlertRulesFireForAStalledStage(t *testing.T) {
	tool(t, "promtool", "deploy/local/up.sh installs it (apt-get install prometheus)")
	in, out, dlq, name := uniqueName("stall_in"), uniqueName("stall_out"), uniqueName("stall_dlq"), uniqueName("stall")
	path := topologyFile(t, []stageSpec{{name, in, out, dlq}}, "100ms", "10s", 500)
	exactlyCmd(t, "topics", "create", path)
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := topology.Parse(path, text, noEnv)
	if err != nil {
		t.Fatal(err)
	}

	faults, addr, srv := runFaultyEngine(t, f, faultNone, processor.Stages(name))
	defer feedJSON(t, in)()

	prom := startPrometheus(t, shortRules(t), addr)
	admCl := kafkaClient(t)
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	st := map[string]string{"stage": name}
	metricLag := func() (float64, int) { return sum(scrape(t, addr), "exactly_stage_consumer_lag_records", st) }
	firing := func(alertname string) bool { return firingFor(t, prom, alertname, "stage", name) }
	caughtUp := func(what string) {
		t.Helper()
		eventually(t, time.Minute, func() bool {
			lag, series := metricLag()
			return series == 3 && lag < 200 && !firing("ExactlyStageTransactionOpenTooLong")
		}, func() string {
			lag, series := metricLag()
			return fmt.Sprintf("%s: lag %v over %d series, want 3 series under 200 and no alert", what, lag, series)
		})
	}
	caughtUp("at start")

	// Cut off entirely: nothing can be read, so the lag keeps its last
	// value, near 0, on every partition, and its age grows.
	faults.set(faultAll)
	cutAt := time.Now()
	eventually(t, 90*time.Second, func() bool { return firing("ExactlyStageTransactionOpenTooLong") },
		func() string {
			return "ExactlyStageTransactionOpenTooLong not firing for a stage cut off from its broker"
		})
	m := scrape(t, addr)
	if _, series := sum(m, "exactly_stage_consumer_lag_records", st); series != 3 {
		t.Errorf("cut off: %d lag series, want 3 (the partitions are still assigned)", series)
	}
	if age, series := sum(m, "exactly_stage_consumer_lag_age_seconds", st); series != 3 || age < 3*10 {
		t.Errorf("cut off for %s: lag age %v over %d series, want 3 series over 10 s", time.Since(cutAt).Round(time.Second), age, series)
	}
	t.Logf("cut off: ExactlyStageTransactionOpenTooLong fired %s after the cut", time.Since(cutAt).Round(time.Second))

	faults.set(faultNone)
	caughtUp("after the cut")

	// Fetches and commits fail; offset look-ups answer. The lag follows
	// the input, as kadm reads it apart from the stage.
	faults.set(faultConsumer)
	stallAt := time.Now()
	group := "exactly-" + name
	realLag := func() int64 {
		ends, err := adm.ListCommittedOffsets(context.Background(), in)
		if err != nil {
			return -1
		}
		committed, err := adm.FetchOffsetsForTopics(context.Background(), group, in)
		if err != nil {
			return -1
		}
		var lag int64
		ends.Each(func(e kadm.ListedOffset) {
			from := int64(0)
			if c, ok := committed.Lookup(in, e.Partition); ok && c.At >= 0 {
				from = c.At
			}
			lag += e.Offset - from
		})
		return lag
	}
	var last, worst float64 // the last lag metric, and its largest shortfall
	want := []string{"ExactlyStageLagGrowing", "ExactlyStageTransactionOpenTooLong", "ExactlyStageNotReady"}
	eventually(t, 90*time.Second, func() bool {
		before := realLag()
		got, series := metricLag()
		after := realLag()
		if series != 3 {
			t.Errorf("stalled: %d lag series, want 3", series)
		}
		if before >= 0 && after >= 0 {
			last, worst = got, max(worst, float64(before)-got)
			// Read every 5 s: behind by at most one interval of input
			// (500 records), and a little more while a read is under way.
			if got > float64(after) || got < float64(before)-700 {
				t.Errorf("stalled for %s: lag metric %v, real lag %d to %d", time.Since(stallAt).Round(time.Second), got, before, after)
			}
		}
		for _, a := range want {
			if !firing(a) {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("not all of %v fire for a stage that cannot fetch or commit", want) })
	t.Logf("stalled: %v fired %s after the stall; lag metric %v at the end, at most %v below the real lag", want, time.Since(stallAt).Round(time.Second), last, worst)
	if last < 1000 {
		t.Errorf("stalled: lag metric %v at the end, want above 1000", last)
	}

	faults.set(faultNone)
	caughtUp("after the stall")

	// An instance that answers no scrape (paused, crashed) has no series
	// left to alert on: ExactlyInstanceDown reads Prometheus's up.
	_ = srv.Close()
	downAt := time.Now()
	eventually(t, time.Minute, func() bool {
		n, err := promQuery(t, prom, `ALERTS{alertname="ExactlyInstanceDown",alertstate="firing"}`)
		return err == nil && n > 0
	}, func() string { return "ExactlyInstanceDown not firing for an instance that answers no scrape" })
	t.Logf("no scrape: ExactlyInstanceDown fired %s after", time.Since(downAt).Round(time.Second))
}

// A stage started while its broker is unreachable never gets a partition,
// so it has no lag series: against a real Prometheus evaluating the
// shipped rules (waits shortened), ExactlyStageTransactionOpenTooLong
// fires all the same, on the time since a broker last answered it. Once
// the network is back, the stage gets its partitions and the alert ends.
func TestAlertRulesFireForAStageStartedDuringAnOutage(t *testing.T) {
	tool(t, "promtool", "deploy/local/up.sh installs it (apt-get install prometheus)")
	in, out, dlq, name := uniqueName("cutstart_in"), uniqueName("cutstart_out"), uniqueName("cutstart_dlq"), uniqueName("cutstart")
	path := topologyFile(t, []stageSpec{{name, in, out, dlq}}, "100ms", "10s", 500)
	exactlyCmd(t, "topics", "create", path)
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := topology.Parse(path, text, noEnv)
	if err != nil {
		t.Fatal(err)
	}

	faults, addr, _ := runFaultyEngine(t, f, faultAll, processor.Stages(name))
	startAt := time.Now()
	prom := startPrometheus(t, shortRules(t), addr)
	st := map[string]string{"stage": name}
	lagSeries := func() int { _, n := sum(scrape(t, addr), "exactly_stage_consumer_lag_records", st); return n }
	firing := func() bool { return firingFor(t, prom, "ExactlyStageTransactionOpenTooLong", "stage", name) }
	eventually(t, 90*time.Second, firing, func() string {
		return "ExactlyStageTransactionOpenTooLong not firing for a stage started while its broker is unreachable"
	})
	if n := lagSeries(); n != 0 {
		t.Errorf("started cut off: %d lag series, want 0 (no partition was ever assigned)", n)
	}
	t.Logf("started cut off: ExactlyStageTransactionOpenTooLong fired %s after the start", time.Since(startAt).Round(time.Second))

	faults.set(faultNone)
	eventually(t, time.Minute, func() bool { return lagSeries() == 3 && !firing() }, func() string {
		return fmt.Sprintf("after the outage: %d lag series, want 3 and no alert", lagSeries())
	})
}

// The same for a sink: started while its broker is unreachable, it has
// no lag series, and ExactlySinkBatchOpenTooLong fires on the time since
// a broker last answered it; once the network is back it ends.
func TestAlertRulesFireForASinkStartedDuringAnOutage(t *testing.T) {
	tool(t, "promtool", "deploy/local/up.sh installs it (apt-get install prometheus)")
	sk := newSinkSpec("cutstartsink")
	path := sinkTopology(t, sk)
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dsn := pgDSN(t)
	f, err := topology.Parse(path, text, func(name string) (string, bool) { return dsn, name == "PG_DSN" })
	if err != nil {
		t.Fatal(err)
	}
	faults, addr, _ := runFaultyEngine(t, f, faultAll, processor.Sinks(sk.name))
	startAt := time.Now()
	prom := startPrometheus(t, shortRules(t), addr)
	lbl := map[string]string{"sink": sk.name}
	lagSeries := func() int { _, n := sum(scrape(t, addr), "exactly_sink_consumer_lag_records", lbl); return n }
	firing := func() bool { return firingFor(t, prom, "ExactlySinkBatchOpenTooLong", "sink", sk.name) }
	eventually(t, 90*time.Second, firing, func() string {
		return "ExactlySinkBatchOpenTooLong not firing for a sink started while its broker is unreachable"
	})
	if n := lagSeries(); n != 0 {
		t.Errorf("started cut off: %d lag series, want 0 (no partition was ever assigned)", n)
	}
	t.Logf("started cut off: ExactlySinkBatchOpenTooLong fired %s after the start", time.Since(startAt).Round(time.Second))

	faults.set(faultNone)
	eventually(t, 90*time.Second, func() bool { return lagSeries() == 3 && !firing() }, func() string {
		return fmt.Sprintf("after the outage: %d lag series, want 3 and no alert", lagSeries())
	})
}

// A sink cut off from its broker, then from Postgres, while its input
// grows: against a real Prometheus evaluating the shipped rules (waits
// shortened), ExactlySinkBatchOpenTooLong fires for the sink cut off from
// Kafka, whose lag series stay; with Postgres cut off, the lag follows
// the real lag (the read_committed ends less the positions stored in
// Postgres) and ExactlySinkLagGrowing, ExactlySinkBatchOpenTooLong and
// ExactlySinkNotReady fire. Once each fault ends, the sink catches up.
func TestAlertRulesFireForAStalledSink(t *testing.T) {
	tool(t, "promtool", "deploy/local/up.sh installs it (apt-get install prometheus)")
	sk := newSinkSpec("stallsink")
	path := sinkTopology(t, sk)
	u, err := url.Parse(pgDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	pgProxy, err := tcpproxy.Listen("127.0.0.1:0", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer pgProxy.Close()
	u.Host = pgProxy.Addr()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := topology.Parse(path, text, func(name string) (string, bool) { return u.String(), name == "PG_DSN" })
	if err != nil {
		t.Fatal(err)
	}
	faults, addr, _ := runFaultyEngine(t, f, faultNone, processor.Sinks(sk.name))
	defer feedJSON(t, sk.in)()
	prom := startPrometheus(t, shortRules(t), addr)
	pool := pgPool(t)
	admCl := kafkaClient(t)
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	lbl := map[string]string{"sink": sk.name}
	metricLag := func() (float64, int) { return sum(scrape(t, addr), "exactly_sink_consumer_lag_records", lbl) }
	firing := func(alertname string) bool { return firingFor(t, prom, alertname, "sink", sk.name) }
	caughtUp := func(what string) {
		t.Helper()
		eventually(t, time.Minute, func() bool {
			lag, series := metricLag()
			return series == 3 && lag < 200 && !firing("ExactlySinkBatchOpenTooLong")
		}, func() string {
			lag, series := metricLag()
			return fmt.Sprintf("%s: lag %v over %d series, want 3 series under 200 and no alert", what, lag, series)
		})
	}
	caughtUp("at start")

	faults.set(faultAll)
	cutAt := time.Now()
	eventually(t, 90*time.Second, func() bool { return firing("ExactlySinkBatchOpenTooLong") && firing("ExactlySinkNotReady") },
		func() string {
			return "ExactlySinkBatchOpenTooLong and ExactlySinkNotReady not both firing for a sink cut off from its broker"
		})
	m := scrape(t, addr)
	if _, series := sum(m, "exactly_sink_consumer_lag_records", lbl); series != 3 {
		t.Errorf("cut off: %d lag series, want 3 (the partitions are still assigned)", series)
	}
	if age, series := sum(m, "exactly_sink_consumer_lag_age_seconds", lbl); series != 3 || age < 3*10 {
		t.Errorf("cut off for %s: lag age %v over %d series, want 3 series over 10 s", time.Since(cutAt).Round(time.Second), age, series)
	}
	t.Logf("kafka cut off: the sink's alerts fired %s after the cut", time.Since(cutAt).Round(time.Second))
	faults.set(faultNone)
	caughtUp("after the kafka cut")

	pgProxy.Cut()
	stallAt := time.Now()
	realLag := func() int64 {
		ends, err := adm.ListCommittedOffsets(context.Background(), sk.in)
		if err != nil {
			return -1
		}
		stored := storedPositions(t, pool, sk.positions(), sk.in)
		var lag int64
		ends.Each(func(e kadm.ListedOffset) { lag += e.Offset - stored[e.Partition] })
		return lag
	}
	var last, worst float64
	want := []string{"ExactlySinkLagGrowing", "ExactlySinkBatchOpenTooLong", "ExactlySinkNotReady"}
	eventually(t, 90*time.Second, func() bool {
		before := realLag()
		got, series := metricLag()
		after := realLag()
		if series != 3 {
			t.Errorf("postgres down: %d lag series, want 3", series)
		}
		if before >= 0 && after >= 0 {
			last, worst = got, max(worst, float64(before)-got)
			// Read every 5 s and at each retry: behind by at most one
			// interval of input (500 records), a little more while a
			// read is under way.
			if got > float64(after) || got < float64(before)-700 {
				t.Errorf("postgres down for %s: lag metric %v, real lag %d to %d", time.Since(stallAt).Round(time.Second), got, before, after)
			}
		}
		for _, a := range want {
			if !firing(a) {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("not all of %v fire for a sink whose database is down", want) })
	t.Logf("postgres down: %v fired %s after the cut; lag metric %v at the end, at most %v below the real lag", want, time.Since(stallAt).Round(time.Second), last, worst)
	if last < 1000 {
		t.Errorf("postgres down: lag metric %v at the end, want above 1000", last)
	}
	pgProxy.Restore()
	caughtUp("after postgres came back")
}
