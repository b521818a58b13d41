package stage

import (
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
)

// A record's upstream partition is the one its lineage headers name; a
// record without them has none.
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers []kgo.RecordHeader
		want    string
	}{
		{"lineage", []kgo.RecordHeader{{Key: HeaderLineageStage, Value: []byte("rekey")}, {Key: HeaderLineageTopic, Value: []byte("orders")},
			{Key: HeaderLineagePartition, Value: []byte("2")}, {Key: HeaderLineageOffset, Value: []byte("7")}}, "orders/2"},
		{"no headers", nil, ""},
		{"a window result: the stage alone", []kgo.RecordHeader{{Key: HeaderLineageStage, Value: []byte("agg")}}, ""},
		{"topic without partition", []kgo.RecordHeader{{Key: HeaderLineageTopic, Value: []byte("orders")}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sourceOf(&kgo.Record{Headers: tc.headers}); got != tc.want {
				t.Fatalf("sourceOf = %q, want %q", got, tc.want)
			}
		})
	}
}

// The upstream partitions a stage waits for from the start are those of
// the input topics of the stages writing its input, route targets
// included; a stage reading a topic no stage writes has none, nor one
// reading window results (which name no input partition).
func TestStageConfigUpstream(t *testing.T) {
	f, err := topology.Parse("t.yaml", []byte(`version: 1
kafka: { brokers: ["127.0.0.1:9092"] }
topics:
  - { name: raw, partitions: 3 }
  - { name: other, partitions: 5 }
  - { name: by, partitions: 2 }
  - { name: out, partitions: 2 }
  - { name: side, partitions: 1 }
  - { name: side2, partitions: 1 }
  - { name: side3, partitions: 1 }
  - { name: dlq, partitions: 1 }
stages:
  - { name: a, input: { topic: raw }, output: { topic: by }, dead_letter: { topic: dlq } }
  - name: b
    input: { topic: other }
    output: { topic: side }
    dead_letter: { topic: dlq }
    transform: [ { route: [ { topic: by } ] } ]
  - name: c
    input: { topic: by }
    output: { topic: out }
    dead_letter: { topic: dlq }
    upstream_idle_timeout: 0s
  - name: d
    input: { topic: out }
    output: { topic: side2 }
    dead_letter: { topic: dlq }
    transform:
      - aggregate: { window: { tumbling: 1m }, aggregations: { n: count } }
  - { name: e, input: { topic: side2 }, output: { topic: side3 }, dead_letter: { topic: dlq } }
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	c := StageConfig(f, &f.Stages[2], "i")
	if want := map[string]int32{"raw": 3, "other": 5}; !maps.Equal(c.Upstream, want) || c.UpstreamIdle >= 0 {
		t.Fatalf("stage c: upstream %v, idle %s; want %v, negative (for ever)", c.Upstream, c.UpstreamIdle, want)
	}
	if a := StageConfig(f, &f.Stages[0], "i"); a.Upstream != nil || a.UpstreamIdle != 30*time.Second {
		t.Fatalf("stage a: upstream %v, idle %s; want none, 30s", a.Upstream, a.UpstreamIdle)
	}
	if e := StageConfig(f, &f.Stages[4], "i"); e.Upstream != nil {
		t.Fatalf("stage e, behind an aggregate: upstream %v, want none", e.Upstream)
	}
}
