// Package topologytest writes the small topology files that tests of
// several packages share, and starts the kfake cluster they name. Tests
// import it; nothing else does.
package topologytest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
)

// Stage returns the text of a topology file on brokers (one address):
// topics in and out with partitions partitions each and dlq with 1, and one
// stage named stage reading in and writing out as JSON, dead letters to dlq.
// extra is appended as it is: more keys of the stage (indented four
// spaces), or further sections such as PGSink's.
func Stage(brokers, stage string, partitions int, extra string) string {
	return Head(brokers, partitions, "in", "out") + fmt.Sprintf(`  - name: %s
    input: { topic: in, format: json }
    output: { topic: out, format: json }
    dead_letter: { topic: dlq }
`, stage) + extra
}

// Head returns the lines of a topology file before its stages, one a
// line: version 1, kafka on brokers (one address), the topics names with
// partitions partitions each and dlq with 1, then "stages:".
func Head(brokers string, partitions int, names ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nkafka: { brokers: [%q] }\ntopics:\n", brokers)
	for _, n := range names {
		fmt.Fprintf(&b, "  - { name: %s, partitions: %d }\n", n, partitions)
	}
	b.WriteString("  - { name: dlq, partitions: 1 }\nstages:\n")
	return b.String()
}

// PGSink returns a sinks section to follow Stage's text: one sink "pg"
// reading out as JSON into table of the database ${PG_DSN}, the event ID and
// the whole value as columns event_id and body, dead letters to dlq.
func PGSink(table string) string {
	return `sinks:
  - name: pg
    input: { topic: out, format: json }
    postgres: { dsn: "${PG_DSN}", table: ` + table + `, event_id: event_id, columns: { event_id: event_id, body: $value } }
    dead_letter: { topic: dlq }
`
}

// Cluster starts a one-broker kfake cluster holding Stage's topics: in and
// out with partitions partitions each, dlq with 1. It is closed when t
// ends; Cluster returns its address.
func Cluster(t testing.TB, partitions int32) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "in", "out"), kfake.SeedTopics(1, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0]
}

// Admin returns an admin client of the broker at addr, closed when t ends.
func Admin(t testing.TB, addr string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// CommitInput produces txns transactions to Stage's topic in on the broker
// at addr, each holding records records (values {"event_id":"e-<partition>-<i>"})
// on each of in's partitions partitions, and commits them. Each partition
// then ends at offset txns*(records+1): a commit marker takes an offset.
func CommitInput(ctx context.Context, t testing.TB, addr string, partitions int32, txns, records int) {
	t.Helper()
	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID("topologytest"), kgo.DefaultProduceTopic("in"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range txns {
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for part := range partitions {
			for i := range records {
				v := fmt.Appendf(nil, `{"event_id":"e-%d-%d"}`, part, i)
				if err := p.ProduceSync(ctx, &kgo.Record{Partition: part, Value: v}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
}

// Write writes text to a topology file in t's temp dir and returns its
// path.
func Write(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Load writes text to a topology file (as Write) and loads it.
func Load(t testing.TB, text string) *topology.File {
	t.Helper()
	f, err := topology.Load(Write(t, text))
	if err != nil {
		t.Fatal(err)
	}
	return f
}
