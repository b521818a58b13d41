//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAggregateCrashRestart is the aggregate crash check: order
// events over 60 event-time minutes, keyed by customer (50 customers, 3
// partitions), into 1-minute tumbling windows with count and sum(amount),
// emit final, through a stage killed at random points. The amounts have
// two decimals (1 in 100 is an integer), so the sums are exact decimal
// arithmetic or wrong; event times (the three hours before the test) are
// up to 20 s out of order, within the 30 s grace, so no record is late.
//
// The input is produced with kcat. The stage is killed EXACTLY_AGG_KILLS
// times, each kill one of crashPlan's five kinds (SIGKILL after a random
// delay, three commit failpoints at a random transaction, a crash during
// a full restore). Every kind comes once before any repeats.
// A last run finishes, and closers two hours later close every window.
//
// Input and output are then read read_committed with kcat and loaded into
// Postgres with psql's \copy, and SQL computes the expected windows from
// the input (GROUP BY key, window) and compares: every window's count and
// sum must match exactly, and each window must be emitted once.
//
// Size: EXACTLY_AGG_EVENTS (default 20000), EXACTLY_AGG_KILLS (default
// 6), EXACTLY_AGG_SEED (default: the clock; logged), and
// EXACTLY_AGG_KILL_WINDOW, the largest delay before a SIGKILL (default
// 5s). EXACTLY_AGG_RACE=0 runs the stage as a plain build, as a 1M run
// should: the race detector slows it several times over. The full-size
// command is in performance.md "State at scale".
func TestAggregateCrashRestart(t *testing.T) {
	began := time.Now()
	events := envInt("EXACTLY_AGG_EVENTS", 20000)
	kills := envInt("EXACTLY_AGG_KILLS", 6)
	killWindow := 5 * time.Second
	if d, err := time.ParseDuration(os.Getenv("EXACTLY_AGG_KILL_WINDOW")); err == nil && d > 0 {
		killWindow = d
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("EXACTLY_AGG_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, 15))
	bin := exactlyBin
	if os.Getenv("EXACTLY_AGG_RACE") == "0" {
		bin = buildBin(t, false, "../cmd/exactly")
	}
	t.Logf("aggregate crash: %d events, %d kills, seed %d (EXACTLY_AGG_SEED), stage binary %s", events, kills, seed, bin)

	in, out, dlq, stage := uniqueName("in"), uniqueName("out"), uniqueName("dlq"), uniqueName("agg")
	maxRecords := min(max(events/200, 500), 5000)
	topo := stagesTopology{txnTimeout: "20s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, interval: "100ms", maxRecords: maxRecords,
		transform: `
- aggregate:
    window: { tumbling: 1m }
    time: value.ts
    grace: 30s
    aggregations: { n: count, total: { sum: value.amount } }
    emit: final`,
	}}}.write(t)
	changelog := "exactly-" + stage + "-aggregate-changelog"
	if created := exactlyCmd(t, "topics", "create", "--topology", topo); !strings.Contains(created, changelog) {
		t.Fatalf("topics create did not create %s:\n%s", changelog, created)
	}
	checkChangelogTopic(t, changelog)

	const customers, minute = 50, 60_000
	// Event time runs from three hours ago. A window's result has its
	// largest event time as record timestamp, and the broker deletes
	// records older than the output topic's retention.ms (7 days by
	// default) at its next retention check (every 5 minutes): results with
	// old timestamps would vanish before they are read.
	base := time.Now().Add(-3 * time.Hour).Truncate(time.Minute).UnixMilli()
	produceLines(t, in, func(w *bufio.Writer) {
		for i := range events {
			ts := min(base+int64(i)*60*minute/int64(events)+rng.Int64N(20_000), base+60*minute-1)
			amount := fmt.Sprintf("%d.%02d", rng.IntN(1000), rng.IntN(100))
			if rng.IntN(100) == 0 {
				amount = strconv.Itoa(rng.IntN(1000))
			}
			fmt.Fprintf(w, "c-%d|{\"id\":\"o-%d\",\"ts\":%d,\"amount\":%s}\n", rng.IntN(customers), i, ts, amount)
		}
	})

	stateDir := t.TempDir()
	runArgs := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}
	group := "exactly-" + stage
	fired := crashPlan{bin: bin, args: runArgs, stateDir: stateDir, group: group, in: in, changelog: changelog,
		kills: kills, window: killWindow, maxTxn: 10, events: events, rng: rng}.run(t)

	run := startBin(t, bin, nil, runArgs...)
	// Closers: one record per customer two hours later moves every
	// partition's stream time past the end and grace of all the windows.
	closers := make([][]byte, 0, customers)
	for c := range customers {
		closers = append(closers, fmt.Appendf(nil, `c-%d|{"id":"closer-%d","ts":%d,"amount":0}`, c, c, base+120*minute))
	}
	kcatProduce(t, in, closers)
	waitGroupCaughtUp(t, group, in, 5*time.Minute+time.Duration(events)*time.Millisecond)
	run.stop()
	if !strings.Contains(run.logs.String(), "state restored") {
		t.Errorf("the last run logged no restore:\n%s", tail(run.logs.String(), 30))
	}

	// Postgres computes what the windows must hold from the input as
	// Kafka has it, and compares it with the output.
	schema, emitted := loadForSQL(t, "agg", in, out, int64(events+customers))
	psqlLines(t, fmt.Sprintf(`
CREATE TABLE %[1]s.want AS
  SELECT r->>'key' AS key, (v->>'ts')::bigint - (v->>'ts')::bigint %% 60000 AS start_ms,
         count(*) AS n, sum((v->>'amount')::numeric) AS total, bool_or(v->>'amount' LIKE '%%.%%') AS has_decimal
  FROM (SELECT line::jsonb AS r, (line::jsonb->>'payload')::jsonb AS v FROM %[1]s.input) x
  WHERE v->>'id' NOT LIKE 'closer-%%'
  GROUP BY 1, 2;
CREATE TABLE %[1]s.got AS
  SELECT r->>'key' AS record_key, v->>'key' AS key, (v->'window'->>'start_ms')::bigint AS start_ms,
         (v->'window'->>'end_ms')::bigint AS end_ms, (v->'window'->>'start')::timestamptz AS start_time,
         (v->'results'->>'n')::bigint AS n, (v->'results'->>'total')::numeric AS total, v->'results'->>'total' AS total_text
  FROM (SELECT line::jsonb AS r, (line::jsonb->>'payload')::jsonb AS v FROM %[1]s.output) x;`, schema))
	windows := sqlCount(t, "SELECT count(*) FROM "+schema+".want")
	mismatch := fmt.Sprintf(`FROM %[1]s.want w FULL JOIN %[1]s.got g USING (key, start_ms)
  WHERE w.n IS DISTINCT FROM g.n OR w.total IS DISTINCT FROM g.total OR (w.has_decimal AND g.total_text NOT LIKE '%%.%%')
     OR g.record_key IS DISTINCT FROM g.key OR g.end_ms <> g.start_ms + 60000 OR g.start_time <> to_timestamp(g.start_ms / 1000.0)`, schema)
	mismatches := sqlCount(t, "SELECT count(*) "+mismatch)
	if mismatches != 0 {
		t.Errorf("%d windows differ from SQL's GROUP BY key, window over the input (key, start_ms, want n, total | got n, total):\n%s", mismatches,
			strings.Join(psqlLines(t, "SELECT key, start_ms, w.n, w.total, g.n, g.total_text "+mismatch+" ORDER BY 1, 2 LIMIT 20"), "\n"))
	}
	repeated := sqlCount(t, "SELECT count(*) FROM (SELECT 1 FROM "+schema+".got GROUP BY key, start_ms HAVING count(*) > 1) d")
	if repeated != 0 {
		t.Errorf("%d windows emitted more than once, want each once (emit final)", repeated)
	}
	if emitted != windows {
		t.Errorf("%d window results read from %s, want %d (one per window)", emitted, out, windows)
	}
	if windows < customers*60/2 {
		t.Errorf("only %d windows: the input does not spread over the keys and minutes it should", windows)
	}
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, n)
	}
	// exactly verify: every input is accounted for as aggregated, none
	// lost, and the window results are not taken for orphans.
	rep, code := runVerifyBin(t, bin, topo, "event_id")
	if code != 0 || !rep.OK || len(rep.Stages) != 1 || rep.Stages[0].In == 0 || rep.Stages[0].Aggregated != rep.Stages[0].In || rep.Stages[0].Lost != 0 || rep.Stages[0].Orphans != 0 {
		t.Errorf("exactly verify: exit %d, %+v; want ok, every input aggregated", code, rep.Stages)
	}
	t.Logf("aggregate crash result: %d events, %d windows (%d keys x 60 minutes), %d kills %v, %d mismatches, %d windows emitted more than once, %d results read, wall time %s, seed %d",
		events, windows, customers, kills, fired, mismatches, repeated, emitted, time.Since(began).Round(time.Second), seed)
}

// kcatProduceLines writes the "key|value" lines of file to topic with
// kcat, streamed.
func kcatProduceLines(t testing.TB, topic, file string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kcatPut(t, kcatBrokers(t), topic, f, "-X", "linger.ms=20")
}

// killAt waits until p, started with failpoint kind armed (or "sigkill"),
// has exited, or SIGKILLs it: at deadline, or once the failpoint can no
// longer fire (a restore done, or every input record committed). It
// returns why it killed p, or "" if p exited by itself.
func killAt(t *testing.T, p *proc, kind string, deadline time.Time, group, topic string) string {
	t.Helper()
	tick := time.NewTicker(500 * time.Millisecond) // polls external conditions
	defer tick.Stop()
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	kill := func(why string) string {
		_ = p.cmd.Process.Kill()
		<-p.done
		return why
	}
	for {
		select {
		case <-p.done:
			return ""
		case <-timeout.C:
			return kill("deadline")
		case <-tick.C:
			switch {
			case kind == crashDuringRestore && strings.Contains(p.logs.String(), "state restored"):
				return kill("the restore ended first")
			case (kind == crashBeforeCommit || kind == crashAfterOffsetCommit || kind == crashAfterCommit) && sumOffsets(groupOffsets(t, group, topic)) >= sumOffsets(committedEnds(t, topic)):
				return kill("every input record was committed first")
			}
		}
	}
}

// kcatToPostgres copies every record of topic that kcat reads
// read_committed, as the one-line JSON objects of kcat -J (key, payload,
// partition, offset, ts), into table(line text) with psql's \copy. Neither
// client is one exactly uses. The CSV quote and delimiter are control
// characters that JSON escapes, so each line loads whole. It returns the
// rows in table.
func kcatToPostgres(t *testing.T, topic, table string) int64 {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	kc := exec.Command(kcatBin(t), "-C", "-b", kcatBrokers(t), "-t", topic, "-o", "beginning", "-e", "-q", "-J",
		"-X", "isolation.level=read_committed")
	var kcErr, psOut strings.Builder
	kc.Stdout, kc.Stderr = w, &kcErr
	ps := exec.Command("psql", pgDSN(t), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-c", `\copy `+table+`(line) from pstdin with (format csv, quote e'\x01', delimiter e'\x02')`)
	ps.Stdin, ps.Stdout, ps.Stderr = r, &psOut, &psOut
	if err := kc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := ps.Start(); err != nil {
		t.Fatal(err)
	}
	// The children hold their own ends: psql reads EOF once kcat exits.
	w.Close()
	r.Close()
	kcErrC := make(chan error, 1)
	go func() { kcErrC <- kc.Wait() }()
	psErr := ps.Wait()
	if err := <-kcErrC; err != nil {
		t.Fatalf("kcat read %s: %v\n%s", topic, err, kcErr.String())
	}
	if psErr != nil {
		t.Fatalf("psql \\copy into %s: %v\n%s", table, psErr, psOut.String())
	}
	n, err := strconv.ParseInt(psqlLines(t, "SELECT count(*) FROM "+table)[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func sumOffsets(m map[int32]int64) int64 {
	var n int64
	for _, o := range m {
		n += o
	}
	return n
}
