package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/exactly-io/exactly/cmd/exactly/internal/plural"
	"github.com/exactly-io/exactly/processor"
)

// printResetSkips writes, per stage and sink, the records that resets
// skipped on purpose, range by range: they are not lost.
func printResetSkips(w io.Writer, rep *processor.VerifyReport) {
	type check struct {
		kind, name, input string
		skipped           int64
		skips             []processor.VerifyResetSkip
	}
	var checks []check
	for _, c := range rep.Stages {
		checks = append(checks, check{"stage", c.Name, c.Input, c.ResetSkipped, c.ResetSkips})
	}
	for _, c := range rep.Sinks {
		checks = append(checks, check{"sink", c.Name, c.Input, c.ResetSkipped, c.ResetSkips})
	}
	for _, c := range checks {
		if len(c.skips) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s %s: %s skipped on purpose by exactly reset (not lost):\n", c.kind, c.name, plural.Count(c.skipped, "record"))
		for _, s := range c.skips {
			fmt.Fprintf(w, "  %s/%d [%d, %d): %s, reset to %s at %s\n", c.input, s.Partition, s.From, s.To,
				plural.Count(s.Records, "record"), s.Target, s.At.Format(time.RFC3339))
		}
	}
}
