//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
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
	fmt.Fprintf(&sql, "CREATE INDEX ON %s (customer, ts, seq);\n", versions)
	fmt.Fprintf(&sql, "INSERT INTO %s VALUES\n", versions)
	for j := range jc.rounds * jc.versionsPer {
		k, at, v := jc.version(j)
		val := "NULL"
		if v != nil {
			val = strconv.Itoa(j)
		}
		sep := ","
		if j == jc.rounds*jc.versionsPer-1 {
			sep = ";"
		}
		fmt.Fprintf(&sql, "('%s', %d, %d, %s)%s\n", k, at.UnixMilli(), j, val, sep)
	}
	fmt.Fprintf(&sql, "INSERT INTO %s VALUES\n", orders)
	for i := range jc.rounds * jc.ordersPer {
		k, at, _ := jc.order(i)
		sep := ","
		if i == jc.rounds*jc.ordersPer-1 {
			sep = ";"
		}
		fmt.Fprintf(&sql, "(%d, '%s', %d)%s\n", i, k, at.UnixMilli(), sep)
	}
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
	if mismatches+doubled+lost > 0 || len(seen) != n {
		t.Fatalf("%d mismatches, %d orders doubled, %d lost, %d distinct orders written (want %d)", mismatches, doubled, lost, len(seen), n)
	}
	if k := kcatCount(t, dlq); k != 0 {
		t.Errorf("%s holds %d dead letters, want 0", dlq, k)
	}
}

// TestJoinRebalance: the co-partitioned join scaled 1 -> 3 -> 1 instances
// while table updates and orders arrive: each instance restores the table
// partitions of the input partitions it gets, and every order is written
// once, joined as Postgres computes it as of its time.
func TestJoinRebalance(t *testing.T) {
	jc := joinCase{base: time.Now().Add(-2 * time.Hour).Truncate(time.Second), customers: 40, rounds: 9,
		versionsPer: 150, ordersPer: 300, roundLen: time.Minute}
	table, in, out, dlq, stage := uniqueName("jn_customers"), uniqueName("jn_orders"), uniqueName("jn_out"), uniqueName("jn_dlq"), uniqueName("jn")
	topo := userTopology(t, []fileTopic{
		{name: table, parts: 3, config: map[string]string{"cleanup.policy": "compact"}},
		{name: in, parts: 3}, {name: out, parts: 3}, {name: dlq, parts: 1},
	}, fmt.Sprintf(`stages:
  - name: %s
    input: { topic: %s, format: json }
    output: { topic: %s, format: json }
    dead_letter: { topic: %s }
    commit: { interval: 100ms, max_records: 200 }
    transform:
      - join: { table: %s, key: value.customer_id, as: customer, missing: "null", history_retention: 30d }
`, stage, in, out, dlq, table))
	tableCl := kafkaClient(t, kgo.TransactionalID(uniqueName("jn_table_writer")))
	defer tableCl.Close()
	ordersCl := kafkaClient(t)
	defer ordersCl.Close()
	run := func(instance string) *proc {
		return start(t, nil, "run", "--topology", topo, "--instance-id", instance, "--state-dir", t.TempDir())
	}
	rounds := func(from, to int) {
		for r := from; r < to; r++ {
			jc.produceRound(t, tableCl, ordersCl, table, in, r)
			time.Sleep(200 * time.Millisecond)
		}
	}
	one := run("it-1")
	rounds(0, 3)
	two, three := run("it-2"), run("it-3")
	rounds(3, 6)
	waitLogged(t, three, "state restored", 1, 2*time.Minute, "it-3 restored no partition")
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	two.stop()
	three.stop()
	rounds(6, 9)
	waitGroupCaughtUp(t, "exactly-"+stage, in, 5*time.Minute)
	one.stop()
	if n := countLines(one.logs.String(), "state restored"); n < 2 {
		t.Errorf("it-1 restored %d times, want at least 2 (at start, and on taking back the partitions)", n)
	}
	checkJoinOutput(t, jc, out, dlq)
}
