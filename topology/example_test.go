package topology_test

import (
	"fmt"

	"github.com/exactly-io/exactly/topology"
)

func ExampleParse() {
	src := []byte(`version: 1
kafka:
  brokers: ["${KAFKA:-127.0.0.1:9092}"]
topics:
  - { name: orders.raw,   partitions: 3 }
  - { name: orders.clean, partitions: 3 }
  - { name: orders.dlq,   partitions: 1 }
stages:
  - name: clean
    input:  { topic: orders.raw }
    output: { topic: orders.clean }
    dead_letter: { topic: orders.dlq }
    key: event_id
`)
	noEnv := func(string) (string, bool) { return "", false }
	f, err := topology.Parse("topology.yaml", src, noEnv)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range f.StagesInOrder() {
		fmt.Printf("%s: %s -> %s (%s, every %s or %d records)\n",
			s.Name, s.Input.Topic, s.Output.Topic, s.Output.Format, s.Commit.Interval, s.Commit.MaxRecords)
	}
	fmt.Println("brokers:", f.Kafka.Brokers, "at", f.Position("kafka.brokers[0]"))

	// A broken file: every problem is reported, each with its place.
	_, err = topology.Parse("topology.yaml", []byte(`version: 1
kafka: { brokers: ["127.0.0.1:9092"] }
topics:
  - { name: orders.raw, partitions: three }
stages:
  - name: clean
    input: { topic: orders.raw }
    output: { topic: orders.clean }
`), noEnv)
	fmt.Println(err)
	// Output:
	// clean: orders.raw -> orders.clean (json, every 100ms or 10000 records)
	// brokers: [127.0.0.1:9092] at 3:13
	// topology.yaml:4:37: topics[0].partitions: expected an integer, got "three"
	// topology.yaml:6:5: stages[0].dead_letter: required (e.g. dead_letter: { topic: orders.dlq })
	// topology.yaml:8:22: stages[0].output.topic: topic "orders.clean" is not declared (add it under topics:)
}
