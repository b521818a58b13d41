package cli_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/exactly-io/exactly/cmd/exactly/internal/cli"
	"github.com/exactly-io/exactly/processor/transform"
)

// A custom binary: register a Go transform by name, then hand over to
// exactly's command line. A topology refers to the transform as
// `- func: enrich`. In a real main the last line is
// os.Exit(cli.Main(os.Args[1:])); here it validates a topology that uses
// the transform, which needs no Kafka.
func Example_customTransform() {
	transform.Register("enrich", func(_ context.Context, r transform.Record) ([]transform.Record, error) {
		order, ok := r.Value.(map[string]any)
		if !ok {
			return nil, errors.New("value is not an object") // becomes a dead letter
		}
		order["channel"] = "web"
		return []transform.Record{r}, nil // none would filter the record; several fan it out
	})

	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "orders.yaml")
	_ = os.WriteFile(path, []byte(`version: 1
kafka: { brokers: ["127.0.0.1:9092"] }
topics:
  - { name: orders.raw, partitions: 3 }
  - { name: orders.enriched, partitions: 3 }
  - { name: orders.dlq, partitions: 1 }
stages:
  - name: enrich
    input: { topic: orders.raw }
    output: { topic: orders.enriched }
    dead_letter: { topic: orders.dlq }
    transform:
      - func: enrich
`), 0o644)

	var out strings.Builder
	code := cli.Run(context.Background(), []string{"validate", path}, &out, os.Stderr)
	fmt.Println(code, strings.TrimPrefix(out.String(), path))
	// Output:
	// 0 : ok: 3 topics, 1 stage
	//   stage enrich: orders.raw (json) -> orders.enriched (json), 1 transform step, dead letters -> orders.dlq
}
