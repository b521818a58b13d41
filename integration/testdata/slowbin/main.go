// Command slowbin is exactly with one extra Go transform, `slow`, for
// integration/flood_test.go (TestSlowTransform). It lives under testdata
// so that ./... patterns (go vet, go test, go build) skip it; the test
// builds it by its path.
//
// slow sleeps 20 seconds, ignoring its context, for the record whose
// event_id is "e-13", and passes every other record through unchanged.
// It is deliberately not deterministic in time: it stands for a transform
// stuck on an external call that outlives the transaction timeout.
package main

import (
	"context"
	"os"
	"time"

	"github.com/exactly-io/exactly/cmd/exactly/cli"
	"github.com/exactly-io/exactly/processor/transform"
)

// SlowID is the event ID that slow blocks on.
const SlowID = "e-13"

func main() {
	transform.Register("slow", func(_ context.Context, r transform.Record) ([]transform.Record, error) {
		if v, ok := r.Value.(map[string]any); ok && v["event_id"] == SlowID {
			time.Sleep(20 * time.Second) // ignores ctx on purpose: the engine must abandon it
		}
		return []transform.Record{r}, nil
	})
	os.Exit(cli.Main(os.Args[1:]))
}
