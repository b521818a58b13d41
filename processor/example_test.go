package processor_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/provision"
)

// noEnv resolves no ${VAR}: the examples' files name their brokers.
func noEnv(string) (string, bool) { return "", false }

// Run a two-stage topology on an embedded cluster (kfake): clean drops
// test orders, big keeps the large ones. The engine runs until the last
// stage's output is there, read back read_committed.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	f, err := topology.Parse("orders.yaml", []byte(`version: 1
kafka: { brokers: ["`+cluster.ListenAddrs()[0]+`"] }
topics:
  - { name: orders.raw, partitions: 1 }
  - { name: orders.clean, partitions: 1 }
  - { name: orders.big, partitions: 1 }
  - { name: orders.dlq, partitions: 1 }
stages:
  - name: clean
    input: { topic: orders.raw }
    output: { topic: orders.clean }
    dead_letter: { topic: orders.dlq }
    transform:
      - filter: '!has(value.test)'
  - name: big
    input: { topic: orders.clean }
    output: { topic: orders.big }
    dead_letter: { topic: orders.dlq }
    transform:
      - filter: 'value.amount >= 100'
`), noEnv)
	if err != nil {
		log.Fatal(err)
	}
	produce(ctx, f, "orders.raw", `{"id":"o-1","amount":250}`, `{"id":"o-2","amount":5}`,
		`{"id":"o-3","amount":900,"test":true}`, `{"id":"o-4","amount":100}`)

	eng, err := processor.New(f, processor.InstanceID("example"))
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range runUntil(ctx, eng, f, "orders.big", 2) {
		fmt.Println(v)
	}
	// Output:
	// {"id":"o-1","amount":250}
	// {"id":"o-4","amount":100}
}

// A custom stateful Go transform: it numbers each customer's orders,
// keeping the count in the stage's store, which a changelog topic backs
// and which commits in the stage's transactions.
func Example_statefulTransform() {
	reg := transform.NewRegistry()
	err := reg.RegisterStateful("order-seq", func(_ context.Context, r transform.Record, st transform.Store) ([]transform.Record, error) {
		cur, _, err := st.Get(r.Key)
		if err != nil {
			return nil, err
		}
		n, _ := strconv.Atoi(string(cur))
		n++
		if err := st.Put(r.Key, []byte(strconv.Itoa(n))); err != nil {
			return nil, err
		}
		r.Value.(map[string]any)["seq"] = n
		return []transform.Record{r}, nil
	})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	f, err := topology.Parse("seq.yaml", []byte(`version: 1
kafka: { brokers: ["`+cluster.ListenAddrs()[0]+`"] }
topics:
  - { name: orders.by-customer, partitions: 1 }
  - { name: orders.numbered, partitions: 1 }
  - { name: orders.dlq, partitions: 1 }
stages:
  - name: seq
    input: { topic: orders.by-customer }
    output: { topic: orders.numbered }
    dead_letter: { topic: orders.dlq }
    transform:
      - stateful: order-seq
`), noEnv)
	if err != nil {
		log.Fatal(err)
	}
	produceKeyed(ctx, f, "orders.by-customer", "c-7", `{"id":"o-1"}`, "c-9", `{"id":"o-2"}`, "c-7", `{"id":"o-3"}`)

	dir, _ := os.MkdirTemp("", "example-state")
	defer os.RemoveAll(dir)
	eng, err := processor.New(f, processor.InstanceID("example"), processor.StateDir(dir), processor.WithTransforms(reg))
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range runUntil(ctx, eng, f, "orders.numbered", 3) {
		fmt.Println(v)
	}
	// Output:
	// {"id":"o-1","seq":1}
	// {"id":"o-2","seq":1}
	// {"id":"o-3","seq":2}
}

// Run the PostgreSQL sinks of a topology file only, with the operations
// endpoints served beside them. It needs a broker and a database, so it
// is compiled, not run.
func ExampleSinks() {
	f, err := topology.Load("orders.yaml") // its sinks: name a table, an event ID and the columns
	if err != nil {
		log.Fatal(err)
	}
	eng, err := processor.New(f, processor.Sinks(), processor.InstanceID("sink-1"),
		processor.WithLogger(slog.Default()))
	if err != nil {
		log.Fatal(err)
	}
	go func() { log.Println(http.ListenAndServe("127.0.0.1:9464", eng.Handler())) }()
	if err := eng.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

// Handler serves /readyz: 503 with the reasons until every stage holds
// its partitions, then 200.
func ExampleEngine_Handler() {
	f, err := topology.Parse("orders.yaml", []byte(`version: 1
kafka: { brokers: ["127.0.0.1:1"] }
topics:
  - { name: orders.raw, partitions: 1 }
  - { name: orders.clean, partitions: 1 }
  - { name: orders.dlq, partitions: 1 }
stages:
  - { name: clean, input: { topic: orders.raw }, output: { topic: orders.clean }, dead_letter: { topic: orders.dlq } }
`), noEnv)
	if err != nil {
		log.Fatal(err)
	}
	eng, err := processor.New(f, processor.InstanceID("example"))
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(eng.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.TrimSpace(string(body)))
	// Output:
	// 503 not ready: stage clean: no partitions assigned yet in group exactly-clean
}

// produce creates f's topics and writes values to topic.
func produce(ctx context.Context, f *topology.File, topic string, values ...string) {
	var kv []string
	for _, v := range values {
		kv = append(kv, "", v)
	}
	produceKeyed(ctx, f, topic, kv...)
}

// produceKeyed creates f's topics and writes to topic the records of kv:
// key, value, key, value...
func produceKeyed(ctx context.Context, f *topology.File, topic string, kv ...string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.Kafka.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	if _, err := provision.CreateTopics(ctx, kadm.NewClient(cl), f); err != nil {
		log.Fatal(err)
	}
	for i := 0; i < len(kv); i += 2 {
		r := &kgo.Record{Value: []byte(kv[i+1])}
		if kv[i] != "" {
			r.Key = []byte(kv[i])
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}
}

// runUntil runs eng until topic holds n records, read read_committed,
// stops it, and returns their values.
func runUntil(ctx context.Context, eng *processor.Engine, f *topology.File, topic string, n int) []string {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.Kafka.Brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	var values []string
	for len(values) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			log.Fatalf("%d records in %s, want %d", len(values), topic, n)
		}
		fs.EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
	}
	cancel()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	return values
}
