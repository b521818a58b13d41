//go:build integration

package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/twmb/franz-go/pkg/kgo"
)

// crashInput returns n events (key k-i, event ID e-i) with bad malformed
// records spread among them: bad JSON, invalid UTF-8 and null values, keyed
// bad-j.
func crashInput(n, bad int) [][]byte {
	var lines [][]byte
	every := n / bad
	j := 0
	for i := range n {
		lines = append(lines, fmt.Appendf(nil, `k-%d|{"event_id":"e-%d","n":%d,"note":"a:b,c"}`, i, i, i))
		if i%every == every-1 && j < bad {
			var v []byte
			switch j % 3 {
			case 0:
				v = []byte(`{"event_id": "e-broken`)
			case 1:
				v = []byte("{\"event_id\":\"\xff\xfe\"}")
			case 2:
				v = nil // kcat -Z: a null value
			}
			lines = append(lines, append(fmt.Appendf(nil, "bad-%d|", j), v...))
			j++
		}
	}
	return lines
}

// checkOutput requires that topic holds exactly the events e-0..e-(n-1),
// each once, keyed by event ID.
func checkOutput(t *testing.T, topic string, n int) {
	t.Helper()
	recs := kcatRead(t, topic)
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.Key]++
	}
	dups, missing := 0, 0
	for k, c := range seen {
		if c > 1 {
			dups++
			if dups <= 5 {
				t.Errorf("%s: event %s appears %d times", topic, k, c)
			}
		}
	}
	for i := range n {
		if seen["e-"+strconv.Itoa(i)] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("%s: event e-%d is missing", topic, i)
			}
		}
	}
	if len(recs) != n || dups > 0 || missing > 0 {
		t.Fatalf("%s: %d records, want %d; %d event IDs duplicated, %d missing", topic, len(recs), n, dups, missing)
	}
}

// checkDeadLetters requires that topic holds exactly bad dead letters, one
// per malformed input record, each naming a distinct source offset.
func checkDeadLetters(t *testing.T, topic, source string, bad int) {
	t.Helper()
	recs := kcatRead(t, topic)
	if len(recs) != bad {
		t.Fatalf("%s: %d dead letters, want %d", topic, len(recs), bad)
	}
	keys, sources := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		keys[r.Key] = true
		off, ok := r.Headers[deadletter.HeaderSourceOffset]
		if !ok {
			t.Fatalf("%s: dead letter %s has no %s header: %v", topic, r.Key, deadletter.HeaderSourceOffset, r.Headers)
		}
		if r.Headers[deadletter.HeaderSourceTopic] != source {
			t.Errorf("%s: dead letter %s names source topic %q, want %q", topic, r.Key, r.Headers[deadletter.HeaderSourceTopic], source)
		}
		src := r.Headers[deadletter.HeaderSourcePartition] + "/" + off
		if sources[src] {
			t.Errorf("%s: two dead letters name source %s", topic, src)
		}
		sources[src] = true
	}
	for j := range bad {
		if !keys["bad-"+strconv.Itoa(j)] {
			t.Errorf("%s: no dead letter for bad-%d", topic, j)
		}
	}
}

// The crash check: a stage killed with SIGKILL at a failpoint and restarted
// leaves every event in its output exactly once.
func TestCrashCheck(t *testing.T) {
	const events, bad = 10000, 50
	for _, chain := range []bool{false, true} {
		for _, fp := range []string{crashBeforeCommit, crashAfterCommit} {
			name := fp
			if chain {
				name = "chain/" + fp
			}
			t.Run(name, func(t *testing.T) {
				raw, clean, enriched := uniqueName("raw"), uniqueName("clean"), uniqueName("enriched")
				dlq1, dlq2 := uniqueName("dlq"), uniqueName("dlq")
				stages := []stageSpec{{uniqueName("clean"), raw, clean, dlq1}}
				final := clean
				if chain {
					stages = append(stages, stageSpec{uniqueName("enrich"), clean, enriched, dlq2})
					final = enriched
				}
				topo := topologyFile(t, stages, "100ms", "60s", 1000)
				exactlyCmd(t, "topics", "create", topo)
				kcatProduce(t, raw, crashInput(events, bad))

				crashAndRecover(t, topo, fp, final, dlq1, events, bad, 2*time.Minute)

				checkOutput(t, final, events)
				checkDeadLetters(t, dlq1, raw, bad)
				if chain {
					checkOutput(t, clean, events)
					if n := kcatCount(t, dlq2); n != 0 {
						t.Fatalf("the second stage dead-lettered %d records; its input held only valid events", n)
					}
				}
			})
		}
	}
}

// A stuck transaction: an instance killed while its transaction is open is
// fenced by its restart at once; readers do not wait for the transaction
// timeout (5 minutes here). The first transaction's records reach the
// broker and EndTxn never does (crash-before-commit@1): the process dies
// with it open. A long commit interval alone no longer keeps it open,
// since a caught-up stage commits at once.
func TestStuckTransactionFencedOnRestart(t *testing.T) {
	restartAfterOpenTransaction(t, crashBeforeCommit)
}

// A process killed inside End, after TxnOffsetCommit and before EndTxn
// (crash-after-offset-commit@1): its transaction holds the group's offsets
// pending, and an offset fetch that requires stable offsets (KIP-447)
// answers UNSTABLE_OFFSET_COMMIT until that transaction ends. The restart
// aborts it at once (InitProducerId before its first poll) instead of
// waiting out the transaction timeout.
func TestCrashBetweenOffsetCommitAndEndTxn(t *testing.T) {
	restartAfterOpenTransaction(t, crashAfterOffsetCommit)
}

// restartAfterOpenTransaction runs a stage (transaction timeout 5m) on
// 1,000 events with failpoint fp armed at its first transaction, requires
// it to die by the failpoint's SIGKILL with that transaction's records on
// the broker but not readable read_committed, restarts it under the same
// ID, and requires every event readable within 60 s, each once.
func restartAfterOpenTransaction(t *testing.T, fp string) {
	const events = 1000
	in, out, dlq, stage := uniqueName("raw"), uniqueName("clean"), uniqueName("dlq"), uniqueName("stuck")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "5m", 100000)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, in, crashInput(events, 1)[:events])

	p := start(t, []string{failpointEnv + "=" + fp + "@1"}, "run", "--topology", topo, "--instance-id", "it-1")
	if err := p.wait(60 * time.Second); !p.killedBySIGKILL() || !strings.Contains(p.logs.String(), fp+"@1") {
		t.Fatalf("the process ended with %v, not by the SIGKILL of %s@1; logs:\n%s", err, fp, tail(p.logs.String(), 30))
	}
	if n := kcatCountUncommitted(t, out); n < 1 {
		t.Fatalf("no record of the open transaction reached the broker")
	}
	if n := kcatCount(t, out); n != 0 {
		t.Fatalf("read_committed sees %d records of a transaction that never ended", n)
	}
	restarted := time.Now()
	p2 := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	eventually(t, 60*time.Second, func() bool { return kcatCount(t, out) >= events },
		func() string { return fmt.Sprintf("readers see %d of %d events", kcatCount(t, out), events) })
	t.Logf("output readable %s after the restart (transaction timeout 5m)", time.Since(restarted).Round(time.Millisecond))
	p2.stop()
	checkOutput(t, out, events)
}

// Offset gaps: the input is written transactionally, with aborted
// transactions among committed ones. Commit markers take offsets, aborted
// records are never read, and the stage must neither stall on the gaps nor
// let an aborted record through.
func TestTransactionalInputWithAborts(t *testing.T) {
	in, out, dlq, stage := uniqueName("raw"), uniqueName("clean"), uniqueName("dlq"), uniqueName("gaps")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 500)
	exactlyCmd(t, "topics", "create", topo)

	cl := kafkaClient(t, kgo.TransactionalID(uniqueName("it-producer")), kgo.DefaultProduceTopic(in))
	defer cl.Close()
	next, aborted := writeAbortedGaps(t, cl)

	addr := freeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", addr)
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= next },
		func() string { return fmt.Sprintf("%d of %d events out", kcatCount(t, out), next) })
	// Lag is measured against the last stable offset, and commit and abort
	// markers are consumed too: caught up means 0 on every partition, not
	// the 1 a trailing marker leaves to consumers that stop before it.
	var lag float64
	var series int
	eventually(t, 30*time.Second, func() bool {
		lag, series = sum(scrape(t, addr), "exactly_stage_consumer_lag_records", map[string]string{"stage": stage})
		return lag == 0 && series == 3
	}, func() string { return fmt.Sprintf("lag %v over %d partitions, want 0 over 3", lag, series) })
	p.stop()
	checkOutput(t, out, next)
	if n := kcatCount(t, dlq); n != 0 {
		t.Fatalf("%d dead letters; the input held only valid events", n)
	}
	t.Logf("%d committed and %d aborted input records; output holds the %d committed ones", next, aborted, next)
}

// Validation happens before any network I/O, and every problem is reported
// with its position.
func TestValidateReportsPositions(t *testing.T) {
	f := writeFile(t, "bad.yaml", "version: 1\nkafka: { brokers: [\"127.0.0.1:1\"] }\ntopics:\n  - { name: a, partitions: 0 }\nstages:\n  - name: s\n    input: { topic: a }\n    output: { topic: nope }\n    dead_letter: { topic: a }\n    commit: { interval: 10 parsecs }\n")
	p := start(t, nil, "validate", f)
	err := p.wait(30 * time.Second)
	if err == nil {
		t.Fatal("validate accepted a bad file")
	}
	logs := p.logs.String()
	for _, want := range []string{
		f + ":4:28: topics[0].partitions:",
		f + ":8:22: stages[0].output.topic: topic \"nope\" is not declared",
		f + ":10:25: stages[0].commit.interval:",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("validate output lacks %q:\n%s", want, logs)
		}
	}
}
