package redrive

import (
	"errors"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/topology"
)

// TestSharedInputRefused: a redrive writes to the stage's input topic, so
// it is refused when another stage or sink reads that topic too.
func TestSharedInputRefused(t *testing.T) {
	const head = `version: 1
kafka: { brokers: ["127.0.0.1:9092"] }
topics:
  - { name: in, partitions: 1 }
  - { name: mid, partitions: 1 }
  - { name: out, partitions: 1 }
  - { name: out2, partitions: 1 }
  - { name: dlq, partitions: 1 }
stages:
  - { name: a, input: { topic: in }, output: { topic: mid }, dead_letter: { topic: dlq } }
`
	tests := []struct {
		name, rest string
		want       string // empty: allowed
	}{
		{"only reader", `  - { name: b, input: { topic: mid }, output: { topic: out }, dead_letter: { topic: dlq } }
`, ""},
		{"sibling stage", `  - { name: b, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
`, "in, the input of stage a, is also read by stage b:"},
		{"stage and sink", `  - { name: b, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
  - { name: c, input: { topic: in }, output: { topic: out2 }, dead_letter: { topic: dlq } }
sinks:
  - name: pg
    input: { topic: in }
    dead_letter: { table: public.dl }
    postgres: { dsn: "postgres://x", table: public.t, event_id: id, columns: { id: id } }
`, "also read by stage b, stage c, sink pg:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := topology.Parse("t.yaml", []byte(head+tt.rest), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			err = SharedInput(f, "a")
			if tt.want == "" {
				if err != nil {
					t.Fatalf("SharedInput: %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("SharedInput: %v; want ErrUsage and %q", err, tt.want)
			}
		})
	}
}
