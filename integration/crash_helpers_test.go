//go:build integration

package integration

import (
	"bufio"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crashPlan kills a stateful stage again and again. Each kill is one of:
// SIGKILL after a random delay, the failpoints crash-before-commit,
// crash-after-offset-commit and crash-after-commit at a random
// transaction, and crash-during-restore
// at a random changelog record after the state dir was deleted (a full
// restore). Every kind comes once before any repeats.
type crashPlan struct {
	bin       string
	args      []string // the stage's run arguments
	stateDir  string   // deleted before a crash-during-restore
	group, in string   // the stage's consumer group and input topic
	changelog string   // the changelog a restore reads
	kills     int
	window    time.Duration // the largest delay before a SIGKILL
	maxTxn    int           // a commit failpoint fires at transaction 1..maxTxn
	events    int           // input records, for the log
	rng       *rand.Rand
}

// run kills the stage c.kills times and returns how often each kind fired.
func (c crashPlan) run(t *testing.T) map[string]int {
	t.Helper()
	kinds := []string{"sigkill", crashBeforeCommit, crashAfterOffsetCommit, crashAfterCommit, crashDuringRestore}
	c.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	if kinds[0] == crashDuringRestore { // the changelog is empty before the first kill
		kinds[0], kinds[1] = kinds[1], kinds[0]
	}
	fired := map[string]int{}
	for k := range c.kills {
		kind := kinds[c.rng.IntN(len(kinds))]
		if k < len(kinds) {
			kind = kinds[k]
		}
		var env []string
		wait := time.Duration(200+c.rng.Int64N(c.window.Milliseconds())) * time.Millisecond
		switch kind {
		case crashBeforeCommit, crashAfterOffsetCommit, crashAfterCommit:
			env = []string{failpointEnv + "=" + kind + "@" + strconv.Itoa(1+c.rng.IntN(c.maxTxn))}
			wait = 3 * time.Minute // the failpoint picks the point
		case crashDuringRestore:
			restorable := sumOffsets(committedEnds(t, c.changelog)) / 2 // markers take offsets too
			if restorable == 0 {
				kind = "sigkill" // nothing to restore yet
				break
			}
			if err := os.RemoveAll(c.stateDir); err != nil {
				t.Fatal(err)
			}
			env = []string{failpointEnv + "=" + kind + "@" + strconv.FormatInt(1+c.rng.Int64N(restorable), 10)}
			wait = 3 * time.Minute
		}
		started := time.Now()
		p := startBin(t, c.bin, env, c.args...)
		if how := killAt(t, p, kind, started.Add(wait), c.group, c.in); how != "" {
			if kind != "sigkill" {
				t.Logf("kill %d: %s did not fire (%s); killed", k+1, env[0], how)
			}
			kind = "sigkill"
		}
		if !p.killedBySIGKILL() {
			t.Fatalf("kill %d (%s %v): want the process killed by SIGKILL, got %v\n%s", k+1, kind, env, p.cmd.ProcessState, tail(p.logs.String(), 40))
		}
		if kind != "sigkill" && !strings.Contains(p.logs.String(), "failpoint firing") {
			t.Fatalf("kill %d: %s: killed by SIGKILL without the failpoint firing\n%s", k+1, env[0], tail(p.logs.String(), 40))
		}
		fired[kind]++
		t.Logf("kill %d/%d: %s %v after %s; group committed %d of %d input records", k+1, c.kills, kind, env,
			time.Since(started).Round(time.Millisecond), sumOffsets(groupOffsets(t, c.group, c.in)), c.events)
	}
	return fired
}

// produceLines writes the "key|value" lines that write writes to topic
// with kcat, through a file.
func produceLines(t *testing.T, topic string, write func(w *bufio.Writer)) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lines.txt")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	write(w)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	kcatProduceLines(t, topic, path)
}

// loadForSQL loads topics in and out, as kcat reads them read_committed
// (one JSON line per record), into tables input and output of a new
// schema named after prefix, for SQL to compute what the output must be.
// The schema is dropped at the end unless the test failed. It fails the
// test unless in holds wantIn records, and returns the schema and the
// output records read.
func loadForSQL(t *testing.T, prefix, in, out string, wantIn int64) (schema string, outputs int64) {
	t.Helper()
	pool := pgPool(t)
	schema = uniqueName(prefix)
	pgExec(t, pool, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".input (line text); CREATE TABLE "+schema+".output (line text)")
	t.Cleanup(func() {
		if !t.Failed() {
			pgExec(t, pool, "DROP SCHEMA "+schema+" CASCADE")
		}
	})
	if n := kcatToPostgres(t, in, schema+".input"); n != wantIn {
		t.Fatalf("loaded %d input records into Postgres, want %d", n, wantIn)
	}
	return schema, kcatToPostgres(t, out, schema+".output")
}

// sqlCount runs q, a query of one integer, with psql.
func sqlCount(t *testing.T, q string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(psqlLines(t, q)[0], 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
