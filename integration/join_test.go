//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// joinCase is the data of TestJoinAsOfEventTime: table versions and orders
// in rounds of event time, each round's table versions committed before
// its orders are produced.
type joinCase struct {
	global                 bool // orders keyed by order ID, the table by customer with 2 partitions
	base                   time.Time
	customers, rounds      int
	versionsPer, ordersPer int
	roundLen               time.Duration
}

// version j of the table: customer j%customers, at a time inside its
// round, every seventh a tombstone; orders see customers c-0..c-(n+4), so
// five never exist.
func (jc joinCase) version(j int) (key string, at time.Time, value []byte) {
	r, k := j/jc.versionsPer, j%jc.versionsPer
	at = jc.base.Add(time.Duration(r)*jc.roundLen + time.Duration(k*997%jc.versionsPer)*jc.roundLen/time.Duration(jc.versionsPer))
	key = "c-" + strconv.Itoa(j*31%jc.customers)
	if j%7 == 3 {
		return key, at, nil
	}
	return key, at, fmt.Appendf(nil, `{"customer":%q,"v":%d}`, key, j)
}

// order i: customer i%(customers+5), at a time inside its round.
func (jc joinCase) order(i int) (key string, at time.Time, value []byte) {
	r, k := i/jc.ordersPer, i%jc.ordersPer
	at = jc.base.Add(time.Duration(r)*jc.roundLen + time.Duration(k*613%jc.ordersPer)*jc.roundLen/time.Duration(jc.ordersPer))
	key = "c-" + strconv.Itoa(i%(jc.customers+5))
	return key, at, fmt.Appendf(nil, `{"order":%d,"customer_id":%q}`, i, key)
}

// produceRound writes round r: its table versions in one transaction to
// table, then its orders to in.
func (jc joinCase) produceRound(t *testing.T, tableCl, ordersCl *kgo.Client, table, in string, r int) {
	t.Helper()
	ctx := context.Background()
	var recs []*kgo.Record
	for j := r * jc.versionsPer; j < (r+1)*jc.versionsPer; j++ {
		k, at, v := jc.version(j)
		recs = append(recs, &kgo.Record{Topic: table, Key: []byte(k), Value: v, Timestamp: at})
	}
	if err := tableCl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tableCl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tableCl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	recs = recs[:0]
	for i := r * jc.ordersPer; i < (r+1)*jc.ordersPer; i++ {
		k, at, v := jc.order(i)
		if jc.global {
			k = "o-" + strconv.Itoa(i)
		}
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte(k), Value: v, Timestamp: at})
	}
	if err := ordersCl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// expectedBySQL loads the table versions and the orders into Postgres and
// computes the join as of event time there (LATERAL ... ORDER BY ts DESC
// LIMIT 1 over the versions, later offset first on a tie): per order, the
// joined v, or "null".
func (jc joinCase) expectedBySQL(t *testing.T) map[int]string {
	t.Helper()
	versions, orders := uniqueName("jn_versions"), uniqueName("jn_orders")
	var sql strings.Builder
	fmt.Fprintf(&sql, "CREATE TEMP TABLE %s (customer text, ts bigint, seq int, v int);\n", versions)
	fmt.Fprintf(&sql, "CREATE TEMP TABLE %s (id int, customer text, ts bigint);\n", orders)
	// COPY's rows follow it in the script, up to \. (a million orders
	// load in seconds, where one INSERT's VALUES list would not).
	fmt.Fprintf(&sql, "COPY %s FROM STDIN;\n", versions)
	for j := range jc.rounds * jc.versionsPer {
		k, at, v := jc.version(j)
		val := `\N`
		if v != nil {
			val = strconv.Itoa(j)
		}
		fmt.Fprintf(&sql, "%s\t%d\t%d\t%s\n", k, at.UnixMilli(), j, val)
	}
	fmt.Fprintf(&sql, "\\.\nCOPY %s FROM STDIN;\n", orders)
	for i := range jc.rounds * jc.ordersPer {
		k, at, _ := jc.order(i)
		fmt.Fprintf(&sql, "%d\t%s\t%d\n", i, k, at.UnixMilli())
	}
	fmt.Fprintf(&sql, "\\.\nCREATE INDEX ON %s (customer, ts, seq);\nANALYZE %s;\nANALYZE %s;\n", versions, versions, orders)
	fmt.Fprintf(&sql, `SELECT o.id, coalesce(x.v::text, 'null') FROM %s o LEFT JOIN LATERAL (
  SELECT v FROM %s w WHERE w.customer = o.customer AND w.ts <= o.ts ORDER BY w.ts DESC, w.seq DESC LIMIT 1) x ON true ORDER BY o.id;`, orders, versions)
	path := writeFile(t, "join.sql", sql.String())
	out, err := exec.Command("psql", pgDSN(t), "-X", "-At", "-q", "-v", "ON_ERROR_STOP=1", "-f", path).CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, tail(string(out), 20))
	}
	want := map[int]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, v, ok := strings.Cut(l, "|")
		n, err := strconv.Atoi(id)
		if !ok || err != nil {
			t.Fatalf("psql line %q", l)
		}
		want[n] = v
	}
	return want
}

// TestJoinAsOfEventTime: orders over 3 partitions joined with a customers
// table (compacted, 3 partitions, written in transactions, with updates,
// late versions inside each round and tombstones) as of event time, by a
// stage killed at crash-before-commit and at crash-after-commit (that run
// resuming from the first's checkpoint), then restarted on an empty state
// dir while more table updates and orders arrive. Read back read_committed with kcat, every order is written once
// and joined with the value Postgres computes as of its timestamp over a
// table of the versions: no mismatch, none doubled or lost.
func TestJoinAsOfEventTime(t *testing.T) {
	testJoinAsOfEventTime(t, false)
}

// TestJoinGlobalAsOfEventTime is TestJoinAsOfEventTime in global mode: a
// 2-partition table, orders keyed by order ID.
func TestJoinGlobalAsOfEventTime(t *testing.T) {
	testJoinAsOfEventTime(t, true)
}

func testJoinAsOfEventTime(t *testing.T, global bool) {
	// EXACTLY_JOIN_ROUNDS sizes it: 300 orders and 150 table versions a
	// round, a minute of event time each.
	rounds := max(envInt("EXACTLY_JOIN_ROUNDS", 10), 10)
	jc := joinCase{base: time.Now().Add(-time.Duration(rounds+60) * time.Minute).Truncate(time.Second), customers: 40, rounds: rounds,
		versionsPer: 150, ordersPer: 300, roundLen: time.Minute, global: global}
	table, in, out, dlq, stage := uniqueName("jn_customers"), uniqueName("jn_orders"), uniqueName("jn_out"), uniqueName("jn_dlq"), uniqueName("jn")
	tableParts, mode := 3, "co_partitioned"
	if global {
		tableParts, mode = 2, "global"
	}
	topo := userTopology(t, []fileTopic{
		{name: table, parts: tableParts, config: map[string]string{"cleanup.policy": "compact"}},
		{name: in, parts: 3}, {name: out, parts: 3}, {name: dlq, parts: 1},
	}, fmt.Sprintf(`stages:
  - name: %s
    input: { topic: %s, format: json }
    output: { topic: %s, format: json }
    dead_letter: { topic: %s }
    commit: { interval: 100ms, max_records: 200 }
    transform:
      - join: { table: %s, key: value.customer_id, as: customer, missing: "null", mode: %s, history_retention: 30d }
`, stage, in, out, dlq, table, mode))

	tableCl := kafkaClient(t, kgo.TransactionalID(uniqueName("jn_table_writer")))
	defer tableCl.Close()
	ordersCl := kafkaClient(t)
	defer ordersCl.Close()

	// Rounds 0-5 before any run; the runs crash part-way through them.
	for r := range 6 {
		jc.produceRound(t, tableCl, ordersCl, table, in, r)
	}
	stateDir := t.TempDir()
	runArgs := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}
	for _, fp := range []string{crashBeforeCommit, crashAfterCommit} {
		p := start(t, []string{failpointEnv + "=" + fp + "@3"}, runArgs...)
		_ = p.wait(3 * time.Minute)
		if !p.killedBySIGKILL() {
			t.Fatalf("want the process killed by SIGKILL at %s@3, got %v\n%s", fp, p.cmd.ProcessState, tail(p.logs.String(), 40))
		}
		t.Logf("after %s: %d records in %s", fp, kcatCount(t, out), out)
	}
	if got := kcatCount(t, out); got >= 6*jc.ordersPer {
		t.Fatalf("the crashes came after all of rounds 0-5 were out (%d): nothing was tested", got)
	}

	// The second run resumed from the first's checkpoint; the last one
	// rebuilds the table from its topic (an empty state dir). Rounds 6-9
	// come while it runs: table updates are read as the stage runs.
	runArgs[len(runArgs)-1] = t.TempDir()
	began := time.Now()
	run := start(t, nil, runArgs...)
	for r := 6; r < jc.rounds; r++ {
		jc.produceRound(t, tableCl, ordersCl, table, in, r)
		if jc.rounds <= 10 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	waitGroupCaughtUp(t, "exactly-"+stage, in, 10*time.Minute)
	t.Logf("last run: %d rounds produced and %d orders caught up in %s", jc.rounds-6, jc.rounds*jc.ordersPer, time.Since(began).Round(time.Millisecond))
	run.stop()
	if !strings.Contains(run.logs.String(), "state restored") {
		t.Errorf("the last run logged no restore:\n%s", tail(run.logs.String(), 30))
	}

	checkJoinOutput(t, jc, out, dlq)
}

// checkJoinOutput reads out and dlq with kcat read_committed: every order
// of jc once, joined with the value Postgres computes as of its time, no
// dead letter.
func checkJoinOutput(t *testing.T, jc joinCase, out, dlq string) {
	t.Helper()
	want := jc.expectedBySQL(t)
	n := jc.rounds * jc.ordersPer
	if len(want) != n {
		t.Fatalf("Postgres computed %d orders, want %d", len(want), n)
	}
	seen := map[int]int{}
	mismatches := 0
	var badRounds []int // the rounds of the mismatched orders
	for _, r := range kcatRead(t, out) {
		var v struct {
			Order    int             `json:"order"`
			Customer json.RawMessage `json:"customer"`
		}
		if err := json.Unmarshal([]byte(r.Value), &v); err != nil {
			t.Fatalf("output %q: %v", r.Value, err)
		}
		seen[v.Order]++
		got := "null"
		if string(v.Customer) != "null" {
			var c struct {
				V int `json:"v"`
			}
			if err := json.Unmarshal(v.Customer, &c); err != nil {
				t.Fatalf("output %q: customer: %v", r.Value, err)
			}
			got = strconv.Itoa(c.V)
		}
		if got != want[v.Order] {
			if r := v.Order / jc.ordersPer; !slices.Contains(badRounds, r) {
				badRounds = append(badRounds, r)
			}
			if mismatches++; mismatches <= 10 {
				t.Errorf("order %d: joined v=%s, Postgres as of its time says %s", v.Order, got, want[v.Order])
			}
		}
	}
	doubled, lost := 0, 0
	for i := range n {
		switch seen[i] {
		case 0:
			lost++
		case 1:
		default:
			doubled++
		}
	}
	nulls := 0
	for _, v := range want {
		if v == "null" {
			nulls++
		}
	}
	t.Logf("%d orders, %d table versions, %d joined with null; %d mismatches, %d doubled, %d lost", n, jc.rounds*jc.versionsPer, nulls, mismatches, doubled, lost)
	if mismatches > 0 {
		slices.Sort(badRounds)
		t.Errorf("mismatched orders in %d of %d rounds: %v", len(badRounds), jc.rounds, badRounds)
	}
	if mismatches+doubled+lost > 0 || len(seen) != n {
		t.Fatalf("%d mismatches, %d orders doubled, %d lost, %d distinct orders written (want %d)", mismatches, doubled, lost, len(seen), n)
	}
	if k := kcatCount(t, dlq); k != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, k)
	}
}

// TestJoinCrashRebalance: the co-partitioned join, with table updates
// and orders arriving while it runs, through every fault a stage meets:
//
//   - one instance killed once at each failpoint a stage has
//     (crash-before-commit, crash-after-offset-commit, crash-after-commit,
//     crash-during-restore on an emptied state dir: a whole restore of
//     the table cut short) and once by SIGKILL after a random delay, each
//     restart resuming from what the last one left;
//   - then scaled 1 -> 3 -> 1 instances, one of the three killed by
//     SIGKILL and restarted on the way: each instance restores the table
//     partitions of the input partitions it gets.
//
// A round of table versions (one transaction) and orders is produced
// while each run is on. At the end kcat reads the output read_committed:
// every order is written once, joined with the value Postgres computes as
// of its time (LATERAL ... ORDER BY ts DESC LIMIT 1 over a table of the
// versions); and `exactly verify --event-id order` finds every order
// processed once, none lost, doubled or orphaned.
//
// Size: EXACTLY_JOIN_ORDERS (default 3000) orders and
// EXACTLY_JOIN_VERSIONS (default half as many) table versions over
// EXACTLY_JOIN_CUSTOMERS customers (default 40), in EXACTLY_JOIN_ROUNDS
// rounds of event time (default and least 20). The rounds past the 17th
// come 200 ms apart while the last instance runs: each is a chance for
// the join to read its table before the round's transaction shows.
// EXACTLY_JOIN_SEED (default: the clock; logged) picks the kill points.
// EXACTLY_JOIN_RACE=0 runs the stage as a plain build, as a 1M run
// should: the race detector slows it several times over. The 1M run:
//
//	EXACTLY_JOIN_ROUNDS=200 EXACTLY_JOIN_ORDERS=1000000 EXACTLY_JOIN_VERSIONS=150000 \
//	EXACTLY_JOIN_CUSTOMERS=50000 EXACTLY_JOIN_RACE=0 \
//	go test -tags integration -count=1 -timeout 80m -run 'TestJoinCrashRebalance$' ./integration/
func TestJoinCrashRebalance(t *testing.T) {
	began := time.Now()
	rounds := max(envInt("EXACTLY_JOIN_ROUNDS", 20), 20)
	orders := envInt("EXACTLY_JOIN_ORDERS", 3000)
	jc := joinCase{customers: envInt("EXACTLY_JOIN_CUSTOMERS", 40), rounds: rounds, roundLen: time.Minute,
		ordersPer: max(orders/rounds, 1), versionsPer: max(envInt("EXACTLY_JOIN_VERSIONS", orders/2)/rounds, 1)}
	jc.base = time.Now().Add(-time.Duration(rounds+60) * time.Minute).Truncate(time.Second)
	orders = rounds * jc.ordersPer
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("EXACTLY_JOIN_SEED"), 10, 64); err == nil {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, 31))
	bin := exactlyBin
	if os.Getenv("EXACTLY_JOIN_RACE") == "0" {
		bin = buildBin(t, false, "../cmd/exactly")
	}
	t.Logf("join crash and rebalance: %d orders, %d table versions over %d customers, seed %d (EXACTLY_JOIN_SEED), stage binary %s",
		orders, rounds*jc.versionsPer, jc.customers, seed, bin)

	table, in, out, dlq, stage := uniqueName("jn_customers"), uniqueName("jn_orders"), uniqueName("jn_out"), uniqueName("jn_dlq"), uniqueName("jn")
	maxRecords := min(max(orders/200, 200), 5000)
	topo := userTopology(t, []fileTopic{
		// Compaction keeps the versions the history retention needs.
		{name: table, parts: 3, config: map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": strconv.FormatInt((30 * 24 * time.Hour).Milliseconds(), 10)}},
		{name: in, parts: 3}, {name: out, parts: 3}, {name: dlq, parts: 1},
	}, fmt.Sprintf(`stages:
  - name: %s
    input: { topic: %s, format: json }
    output: { topic: %s, format: json }
    dead_letter: { topic: %s }
    commit: { interval: 100ms, max_records: %d }
    transform:
      - join: { table: %s, key: value.customer_id, as: customer, missing: "null", history_retention: 30d }
`, stage, in, out, dlq, maxRecords, table))
	tableCl := kafkaClient(t, kgo.TransactionalID(uniqueName("jn_table_writer")))
	defer tableCl.Close()
	ordersCl := kafkaClient(t)
	defer ordersCl.Close()
	group := "exactly-" + stage
	next := 0 // the next round to produce
	produce := func(n int) {
		t.Helper()
		for end := min(next+n, rounds); next < end; next++ {
			jc.produceRound(t, tableCl, ordersCl, table, in, next)
			time.Sleep(200 * time.Millisecond) // rounds come apart, as the stage runs
		}
	}
	caughtUp := 5*time.Minute + time.Duration(orders)*time.Millisecond

	// Kills. A commit failpoint fires at a transaction of its run early
	// enough (each takes at most max_records orders) that six rounds
	// before the first run and one during each keep input ahead of every
	// kill.
	produce(6)
	lastTxn := max(2, 6*jc.ordersPer/maxRecords/4)
	stateDir := t.TempDir()
	runArgs := []string{"run", "--topology", topo, "--instance-id", "it-1", "--state-dir", stateDir}
	kills := []string{crashBeforeCommit, crashAfterOffsetCommit, crashAfterCommit, crashDuringRestore, "sigkill"}
	for k, kind := range kills {
		var env []string
		deadline := 3 * time.Minute // the failpoint picks the point
		switch kind {
		case "sigkill":
			deadline = time.Duration(200+rng.IntN(5000)) * time.Millisecond
		case crashDuringRestore:
			if err := os.RemoveAll(stateDir); err != nil {
				t.Fatal(err)
			}
			env = []string{failpointEnv + "=" + kind + "@" + strconv.Itoa(1+rng.IntN(next*jc.versionsPer))}
		default:
			env = []string{failpointEnv + "=" + kind + "@" + strconv.Itoa(1+rng.IntN(lastTxn))}
		}
		started := time.Now()
		p := startBin(t, bin, env, runArgs...)
		produce(1)
		if how := killAt(t, p, kind, started.Add(deadline), group, in); how != "" && kind != "sigkill" {
			t.Fatalf("kill %d: %s did not fire (%s)\n%s", k+1, env[0], how, tail(p.logs.String(), 40))
		}
		if !p.killedBySIGKILL() {
			t.Fatalf("kill %d (%s %v): want the process killed by SIGKILL, got %v\n%s", k+1, kind, env, p.cmd.ProcessState, tail(p.logs.String(), 40))
		}
		if kind != "sigkill" && !strings.Contains(p.logs.String(), "failpoint firing") {
			t.Fatalf("kill %d: %s: killed by SIGKILL without the failpoint firing\n%s", k+1, env[0], tail(p.logs.String(), 40))
		}
		t.Logf("kill %d/%d: %s %v after %s; group committed %d of %d orders produced", k+1, len(kills), kind, env,
			time.Since(started).Round(time.Millisecond), sumOffsets(groupOffsets(t, group, in)), next*jc.ordersPer)
	}
	killed := time.Now()

	// Rebalance 1 -> 3 -> 1, rounds arriving all along.
	run := func(instance, dir string) *proc {
		return startBin(t, bin, nil, "run", "--topology", topo, "--instance-id", instance, "--state-dir", dir)
	}
	one := run("it-1", stateDir)
	produce(1)
	dir2 := t.TempDir()
	two, three := run("it-2", dir2), run("it-3", t.TempDir())
	produce(1)
	waitLogged(t, three, "state restored", 1, 2*time.Minute, "it-3 restored no partition")
	produce(1)
	// it-2 dies amid the group of three and comes back under its
	// instance ID: a static member (KIP-345), it takes its partitions
	// back, and fences its predecessor's open transaction.
	_ = two.cmd.Process.Kill()
	<-two.done
	produce(1)
	two = run("it-2", dir2)
	produce(2)
	waitGroupCaughtUp(t, group, in, caughtUp)
	two.stop()
	three.stop()
	produce(rounds)
	waitGroupCaughtUp(t, group, in, caughtUp)
	one.stop()
	if next != rounds {
		t.Fatalf("produced %d rounds, want %d", next, rounds)
	}
	if n := countLines(one.logs.String(), "state restored"); n < 2 {
		t.Errorf("it-1 restored %d times, want at least 2 (at start, and on taking back the partitions)", n)
	}
	ran := time.Now()
	t.Logf("rebalance 1 -> 3 -> 1 and catch-up: %s", ran.Sub(killed).Round(time.Second))

	// verify accounts for every order whatever its joined value, so it
	// runs first: checkJoinOutput stops the test at a mismatch.
	rep, code := runVerifyBin(t, bin, topo, "order", "--timeout", "10m")
	if len(rep.Stages) != 1 {
		t.Fatalf("exactly verify: exit %d, %d stages, want 1: %+v", code, len(rep.Stages), rep)
	}
	s := rep.Stages[0]
	t.Logf("exactly verify: exit %d, ok %v, in %d processed %d out %d lost %d duplicates %d orphans %d", code, rep.OK, s.In, s.Processed, s.Out, s.Lost, s.Duplicates+s.EventIDDuplicates, s.Orphans)
	if code != 0 || !rep.OK || s.In != int64(orders) || s.Processed != s.In || s.Out != s.In || s.Failures() != 0 {
		t.Errorf("exactly verify: exit %d, %+v; want ok, %d orders in, each processed with one output", code, s, orders)
	}
	checkJoinOutput(t, jc, out, dlq)
	t.Logf("join crash and rebalance result: %d orders in %d rounds, %d table versions, %d kills %v, rebalance 1 -> 3 -> 1 with a SIGKILL; verify and SQL check %s; wall time %s, seed %d",
		orders, rounds, rounds*jc.versionsPer, len(kills), kills, time.Since(ran).Round(time.Second), time.Since(began).Round(time.Second), seed)
}
