package stage

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Every output names its stage and source; an upstream stage's lineage is
// replaced, never kept beside it.
func TestOutputLineage(t *testing.T) {
	s, err := New(Config{Stage: "clean", InstanceID: "a", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq"})
	if err != nil {
		t.Fatal(err)
	}
	in := &kgo.Record{Topic: "in", Partition: 2, Offset: 41, Value: []byte(`{"event_id":"e-1"}`),
		Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}, {Key: HeaderLineageStage, Value: []byte("upstream")}, {Key: HeaderLineageOffset, Value: []byte("7")}}}
	outs, err := s.recordOutputs(context.Background(), in)
	if err != nil || len(outs) != 1 {
		t.Fatalf("transform: %v, %d outputs", err, len(outs))
	}
	got := map[string][]string{}
	for _, h := range outs[0].Headers {
		got[h.Key] = append(got[h.Key], string(h.Value))
	}
	want := map[string]string{"h": "x", HeaderLineageStage: "clean", HeaderLineageTopic: "in",
		HeaderLineagePartition: "2", HeaderLineageOffset: "41", HeaderLineageIndex: "0"}
	for k, v := range want {
		if len(got[k]) != 1 || got[k][0] != v {
			t.Errorf("header %s = %q, want [%q]", k, got[k], v)
		}
	}
	if len(in.Headers) != 3 {
		t.Errorf("the input's headers changed: %v", in.Headers)
	}
}
