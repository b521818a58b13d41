//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
)

// stageSpec is one stage of a generated topology file.
type stageSpec struct {
	name, in, out, dlq string
}

// topologyFile writes a topology with the given stages, each reading and
// writing JSON keyed on event_id with one commit policy; every topic has 3
// partitions except dead-letter topics, which have 1.
func topologyFile(t testing.TB, stages []stageSpec, interval, txnTimeout string, maxRecords int) string {
	t.Helper()
	top := stagesTopology{txnTimeout: txnTimeout}
	for _, s := range stages {
		top.stages = append(top.stages, stageYAML{
			name: s.name, in: s.in, out: s.out, dlq: s.dlq,
			format: "json", key: "event_id", interval: interval, maxRecords: maxRecords,
		})
	}
	return top.write(t)
}

// stageYAML is one stage of a stagesTopology. An empty option is left out
// of the file, so the stage gets the default.
type stageYAML struct {
	name, in, out, dlq string
	format             string // of the input and the output, e.g. "json"
	inFormat           string // of the input where it differs, with its options, e.g. "avro, registry: { url: ... }"
	outFormat          string // of the output where it differs, with its options, e.g. "avro, schema: x.avsc"
	key                string // the field the outputs are keyed on, e.g. "event_id"
	interval           string // commit.interval, e.g. "100ms"
	maxRecords         int    // commit.max_records (written with interval)
	transform          string // the steps under transform:, as YAML starting at column 0
}

// stagesTopology is a topology file of stages and the topics they read and
// write: each input and output topic declared once with partitions
// partitions (0 means 3), each dead-letter topic with 1.
type stagesTopology struct {
	txnTimeout string   // kafka.transaction_timeout, e.g. "20s"
	partitions int      // of each input and output topic, and of topics
	topics     []string // topics no stage reads or writes by name (route targets)
	stages     []stageYAML
}

// write writes the file as topology.yaml in a temp dir of t and returns its
// path.
func (s stagesTopology) write(t testing.TB) string {
	t.Helper()
	return writeFile(t, "topology.yaml", s.yaml(brokers(t)))
}

// yaml returns the file's text, for a cluster at brokers.
func (s stagesTopology) yaml(brokers string) string {
	parts := s.partitions
	if parts == 0 {
		parts = 3
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nkafka:\n  brokers: [%q]\n", brokers)
	if s.txnTimeout != "" {
		fmt.Fprintf(&b, "  transaction_timeout: %s\n", s.txnTimeout)
	}
	b.WriteString("topics:\n")
	declared := map[string]bool{}
	declare := func(name string, parts int) {
		if !declared[name] {
			declared[name] = true
			fmt.Fprintf(&b, "  - { name: %s, partitions: %d }\n", name, parts)
		}
	}
	for _, st := range s.stages {
		declare(st.in, parts)
		declare(st.out, parts)
		declare(st.dlq, 1)
	}
	for _, name := range s.topics {
		declare(name, parts)
	}
	b.WriteString("stages:\n")
	for _, st := range s.stages {
		b.WriteString(st.yaml())
	}
	return b.String()
}

// yaml returns the stage as an item of a topology's stages: list.
func (st stageYAML) yaml() string {
	var b strings.Builder
	format := func(f string) string {
		if f == "" {
			f = st.format
		}
		if f == "" {
			return ""
		}
		return ", format: " + f
	}
	fmt.Fprintf(&b, "  - name: %s\n    input: { topic: %s%s }\n    output: { topic: %s%s }\n    dead_letter: { topic: %s }\n",
		st.name, st.in, format(st.inFormat), st.out, format(st.outFormat), st.dlq)
	if st.key != "" {
		fmt.Fprintf(&b, "    key: %s\n", st.key)
	}
	if st.interval != "" {
		fmt.Fprintf(&b, "    commit: { interval: %s, max_records: %d }\n", st.interval, st.maxRecords)
	}
	if st.transform != "" {
		b.WriteString("    transform:\n")
		for line := range strings.Lines(strings.TrimSpace(st.transform) + "\n") {
			b.WriteString("      " + line)
		}
	}
	return b.String()
}
