package cli

import (
	"fmt"
	"testing"

	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// memlimitTopology has a stateless stage "plain" (its fetch and buffer
// sizes set by extra) and a stage "dedupe" with a dedupe step.
var memlimitTopology = topologytest.Head("k:9092", 3, "in", "out", "out2") + `  - name: plain
    input: { topic: in }
    output: { topic: out }
    dead_letter: { topic: dlq }
%s  - name: dedupe
    input: { topic: in }
    output: { topic: out2 }
    dead_letter: { topic: dlq }
    transform:
      - dedupe: { id: value.event_id, retention: 1d }
`

func TestDefaultMemoryLimit(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	tests := []struct {
		name      string
		extra     string // fields of stage plain
		env       func(string) (string, bool)
		run       []string // the stages the process runs
		wantLimit int64    // 0: none
	}{
		{"one stateless stage, defaults: 48 MiB + 4 x 2 MiB + 2 x 4 MiB", "", noEnv, []string{"plain"}, 64 << 20},
		{"larger fetches and buffer raise it", "    fetch_max_bytes: 16777216\n    max_buffered_bytes: 33554432\n", noEnv, []string{"plain"}, (48 + 64 + 64) << 20},
		{"GOMEMLIMIT set: the user's", "", func(k string) (string, bool) { return "200MiB", k == "GOMEMLIMIT" }, []string{"plain"}, 0},
		{"GOMEMLIMIT=off: the user's", "", func(k string) (string, bool) { return "off", k == "GOMEMLIMIT" }, []string{"plain"}, 0},
		{"a stateful stage", "", noEnv, []string{"dedupe"}, 0},
		{"two stages in one process", "", noEnv, []string{"plain", "dedupe"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := []byte(fmt.Sprintf(memlimitTopology, tt.extra))
			f, err := topology.Parse("t.yaml", src, func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			var stages []*topology.Stage
			for _, name := range tt.run {
				st, ok := f.Stage(name)
				if !ok {
					t.Fatalf("no stage %s", name)
				}
				stages = append(stages, st)
			}
			limit, ok := defaultMemoryLimit(tt.env, stages)
			if ok != (tt.wantLimit != 0) || limit != tt.wantLimit {
				t.Errorf("defaultMemoryLimit = %d, %v; want %d (MiB: %d, want %d)", limit, ok, tt.wantLimit, limit>>20, tt.wantLimit>>20)
			}
		})
	}
}
