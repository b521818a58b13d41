//go:build integration

package integration

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor"
)

// TestAggregateSessionsCrashRestart checks session windows against SQL,
// with emit final and emit update: page views of 40 users (some busy, most sparse: user i is picked with
// weight 1/(i+1)) over 3 partitions, into session windows of gap 30 s
// with count, sum(amount), min and max, through a stage killed at random
// points. Event times step by up to 2 s and are up to
// 15 s out of order, within the 20 s grace, so no record is late, and
// out-of-order records bridge sessions.
//
// The stage is killed EXACTLY_SESSION_KILLS times (default 5), each kill
// one of crashPlan's five kinds, every kind once. A last run finishes, and closers five
// minutes later close every session.
//
// Input and output are read read_committed with kcat and loaded into
// Postgres with psql's \copy. SQL computes the sessions from the input
// (LAG(ts) over each key by time: more than the gap starts a session) and
// compares: every session's bounds, count, sum, min and max must match.
// With emit final each session is written once. With emit update the
// sessions are, per key and start, the last result unless it is a
// retraction; every record writes one result that is not a retraction.
// Size: EXACTLY_SESSION_EVENTS
// (default 10000), EXACTLY_SESSION_SEED (default: the clock; logged).
func TestAggregateSessionsCrashRestart(t *testing.T) {
	for _, emit := range []string{"final", "update"} {
		t.Run(emit, func(t *testing.T) { sessionsCrashRestart(t, emit) })
	}
}

func sessionsCrashRestart(t *testing.T, emit string) {
	began := time.Now()
	events := envInt("EXACTLY_SESSION_EVENTS", 10000)
	kills := envInt("EXACTLY_SESSION_KILLS", 5)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("EXACTLY_SESSION_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, 30))
	bin := exactlyBin
	t.Logf("session windows crash, emit %s: %d events, %d kills, seed %d (EXACTLY_SESSION_SEED)", emit, events, kills, seed)

	const gap, users = 30_000, 40
	in, out, dlq, stage := uniqueName("in"), uniqueName("out"), uniqueName("dlq"), uniqueName("sess")
	topo := stagesTopology{txnTimeout: "20s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, interval: "100ms", maxRecords: 500,
		transform: `
- aggregate:
    window: { session: { gap: 30s } }
    time: value.ts
    grace: 20s
    aggregations: { n: count, total: { sum: value.amount }, lo: { min: value.amount }, hi: { max: value.amount } }
    emit: ` + emit,
	}}}.write(t)
	changelog := "exactly-" + stage + "-aggregate-changelog"
	if created := exactlyCmd(t, "topics", "create", "--topology", topo); !strings.Contains(created, changelog) {
		t.Fatalf("topics create did not create %s:\n%s", changelog, created)
	}

	// Event time ends about half an hour ago, a second a record: a
	// result's timestamp is its last event time, which the broker refuses
	// an hour ahead of its clock (message.timestamp.after.max.ms) and
	// deletes once older than retention.ms.
	base := time.Now().Add(-time.Duration(events)*time.Second - 30*time.Minute).Truncate(time.Minute).UnixMilli()
	var weights []float64
	var total float64
	for i := range users {
		weights = append(weights, 1/float64(i+1))
		total += weights[i]
	}
	pick := func() int {
		x := rng.Float64() * total
		for i, w := range weights {
			if x -= w; x < 0 {
				return i
			}
		}
		return users - 1
	}
	clock := base + 15_000
	produceLines(t, in, func(w *bufio.Writer) {
		for i := range events {
			clock += rng.Int64N(2_000)
			ts := clock - rng.Int64N(15_000)
			fmt.Fprintf(w, "u-%d|{\"id\":\"v-%d\",\"ts\":%d,\"amount\":%d.%02d}\n", pick(), i, ts, rng.IntN(1000)-500, rng.IntN(100))
		}
	})

	stateDir := t.TempDir()
	runArgs := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}
	group := "exactly-" + stage
	fired := crashPlan{bin: bin, args: runArgs, stateDir: stateDir, group: group, in: in, changelog: changelog,
		kills: kills, window: 1500 * time.Millisecond, maxTxn: 5, events: events, rng: rng}.run(t)

	run := startBin(t, bin, nil, runArgs...)
	// Closers five minutes later close every session (gap + grace is 50 s).
	closers := make([][]byte, 0, users)
	for u := range users {
		closers = append(closers, fmt.Appendf(nil, `u-%d|{"id":"closer-%d","ts":%d,"amount":0}`, u, u, clock+5*time.Minute.Milliseconds()))
	}
	kcatProduce(t, in, closers)
	waitGroupCaughtUp(t, group, in, 5*time.Minute)
	run.stop()

	schema, emitted := loadForSQL(t, "sess", in, out, int64(events+users))
	psqlLines(t, fmt.Sprintf(`
CREATE TABLE %[1]s.ev AS
  SELECT r->>'key' AS key, (v->>'ts')::bigint AS ts, (v->>'amount')::numeric AS amount
  FROM (SELECT line::jsonb AS r, (line::jsonb->>'payload')::jsonb AS v FROM %[1]s.input) x
  WHERE v->>'id' NOT LIKE 'closer-%%';
CREATE TABLE %[1]s.want AS
  WITH m AS (
    SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY key ORDER BY ts) <= %[2]d THEN 0 ELSE 1 END AS starts
    FROM %[1]s.ev),
  s AS (
    SELECT *, sum(starts) OVER (PARTITION BY key ORDER BY ts ROWS UNBOUNDED PRECEDING) AS session FROM m)
  SELECT key, min(ts) AS start_ms, max(ts) AS end_ms, count(*) AS n, sum(amount) AS total, min(amount) AS lo, max(amount) AS hi
  FROM s GROUP BY key, session;
CREATE TABLE %[1]s.results AS
  SELECT (r->>'partition')::int AS partition, (r->>'offset')::bigint AS "offset", v->'results' = 'null'::jsonb AS retract,
         r->>'key' AS record_key, v->>'key' AS key, (v->'window'->>'start_ms')::bigint AS start_ms,
         (v->'window'->>'end_ms')::bigint AS end_ms, (v->'window'->>'end')::timestamptz AS end_time,
         (v->'results'->>'n')::bigint AS n, (v->'results'->>'total')::numeric AS total,
         (v->'results'->>'lo')::numeric AS lo, (v->'results'->>'hi')::numeric AS hi, (r->>'ts')::bigint AS record_ts
  FROM (SELECT line::jsonb AS r, (line::jsonb->>'payload')::jsonb AS v FROM %[1]s.output) x;
-- The sessions written: with emit update, per key and start the last
-- result unless it is a retraction, and not the closers' own.
CREATE TABLE %[1]s.got AS
  SELECT * FROM (SELECT DISTINCT ON (key, start_ms) * FROM %[1]s.results ORDER BY key, start_ms, partition, "offset" DESC) l
  WHERE NOT retract AND start_ms <= %[3]d;`, schema, gap, clock))
	sessions := sqlCount(t, "SELECT count(*) FROM "+schema+".want")
	merged := sqlCount(t, "SELECT count(*) FROM "+schema+".want WHERE n > 1")
	mismatch := fmt.Sprintf(`FROM %[1]s.want w FULL JOIN %[1]s.got g USING (key, start_ms)
  WHERE w.end_ms IS DISTINCT FROM g.end_ms OR w.n IS DISTINCT FROM g.n OR w.total IS DISTINCT FROM g.total
     OR w.lo IS DISTINCT FROM g.lo OR w.hi IS DISTINCT FROM g.hi
     OR g.record_key IS DISTINCT FROM g.key OR g.end_time <> to_timestamp(g.end_ms / 1000.0) OR g.record_ts <> g.end_ms`, schema)
	mismatches := sqlCount(t, "SELECT count(*) "+mismatch)
	if mismatches != 0 {
		t.Errorf("%d sessions differ from SQL's sessions over the input (key, start_ms, want end, n, total | got end, n, total):\n%s", mismatches,
			strings.Join(psqlLines(t, "SELECT key, start_ms, w.end_ms, w.n, w.total, g.end_ms, g.n, g.total "+mismatch+" ORDER BY 1, 2 LIMIT 20"), "\n"))
	}
	var repeated, retractions int64
	switch emit {
	case "final":
		repeated = sqlCount(t, "SELECT count(*) FROM (SELECT 1 FROM "+schema+".results GROUP BY key, start_ms HAVING count(*) > 1) d")
		if repeated != 0 {
			t.Errorf("%d sessions emitted more than once, want each once (emit final)", repeated)
		}
		if emitted != sessions {
			t.Errorf("%d session results read from %s, want %d (one per session)", emitted, out, sessions)
		}
	case "update":
		retractions = sqlCount(t, "SELECT count(*) FROM "+schema+".results WHERE retract")
		if n := emitted - retractions; n != int64(events+users) {
			t.Errorf("%d results that are not retractions, want %d (one per record)", n, events+users)
		}
		if retractions == 0 {
			t.Errorf("no retraction among %d updates: no record moved a session's bounds", emitted)
		}
	}
	if sessions < users || merged < sessions/4 {
		t.Errorf("%d sessions, %d of more than one record: the input does not make the sessions it should", sessions, merged)
	}
	if n := kcatCount(t, dlq); n != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, n)
	}
	// exactly verify: every input is accounted for as aggregated, none
	// lost, and the session results are not taken for orphans.
	rep, code := runVerifyBin(t, bin, topo, "id")
	if code != 0 || !rep.OK || len(rep.Stages) != 1 || rep.Stages[0].In == 0 || rep.Stages[0].Aggregated != rep.Stages[0].In || rep.Stages[0].Lost != 0 || rep.Stages[0].Orphans != 0 {
		t.Errorf("exactly verify: exit %d, ok %v, %s; want ok, every input aggregated", code, rep.OK, verifyStages(rep))
	}
	t.Logf("session windows crash result, emit %s: %d events, %d sessions (%d of several records), %d kills %v, %d mismatches, %d sessions emitted more than once, %d results read (%d retractions), wall time %s, seed %d",
		emit, events, sessions, merged, kills, fired, mismatches, repeated, emitted, retractions, time.Since(began).Round(time.Second), seed)
}

func verifyStages(rep processor.VerifyReport) string {
	var b strings.Builder
	for _, st := range rep.Stages {
		fmt.Fprintf(&b, "%+v ", *st)
	}
	return b.String()
}
