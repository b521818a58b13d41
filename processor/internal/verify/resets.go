package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/reset"
)

// ResetSkip is a range of input offsets [From, To) that an `exactly
// reset` moved a stage or a sink past, as the reset log (reset.LogTopic)
// records it, and Records, how many committed input records of that range
// have no output, no dead letter and no row: skipped on purpose, not lost.
type ResetSkip struct {
	reset.Skip
	Records int64 `json:"records"`
}

// readResets reads the reset log and gives each check the ranges its
// resets left skipped on its input as it is now (a topic re-created under
// the same name has another ID, and the ranges of the old one do not
// apply). It runs before the positions are read: a reset executed after
// the log was read moves a position past records that the log does not
// name, and they count as lost, a false alarm rather than a loss hidden.
func (p *plan) readResets(ctx context.Context, adm *kadm.Client, cfg Config) error {
	entries, err := reset.ReadLog(ctx, cfg.KafkaOptions)
	if errors.Is(err, kerr.TopicAuthorizationFailed) {
		// Without the log, skipped records count as lost: a false
		// alarm, never a loss hidden.
		cfg.Logger.Warn("cannot read the reset log: records that resets skipped count as lost", "topic", reset.LogTopic, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if len(entries) == 0 {
		return nil
	}
	var inputs []string
	for _, c := range p.rep.Stages {
		inputs = append(inputs, c.Input)
	}
	for _, c := range p.rep.Sinks {
		inputs = append(inputs, c.Input)
	}
	tds, err := adm.ListTopics(ctx, inputs...)
	if err != nil {
		return fmt.Errorf("verify: describe input topics: %w", err)
	}
	id := func(topic string) string {
		td, ok := tds[topic]
		if !ok || td.Err != nil {
			return ""
		}
		return kadm.TopicID(td.ID).String()
	}
	for _, c := range p.rep.Stages {
		c.ResetSkips = resetSkips(reset.Skips(entries, reset.LogEntry{Kind: "stage", Name: c.Name, Topic: c.Input, TopicID: id(c.Input)}))
	}
	for _, c := range p.rep.Sinks {
		positions := pgsink.SinkConfig(cfg.Topology, &c.cfg, "verify").PositionsTable
		c.ResetSkips = resetSkips(reset.Skips(entries, reset.LogEntry{Kind: "sink", Name: c.Name, PositionsTable: positions,
			Topic: c.Input, TopicID: id(c.Input)}))
	}
	return nil
}

// resetSkips lists the ranges by partition and offset.
func resetSkips(byPart map[int32][]reset.Skip) []ResetSkip {
	var out []ResetSkip
	for _, ss := range byPart {
		for _, s := range ss {
			out = append(out, ResetSkip{Skip: s})
		}
	}
	slices.SortFunc(out, func(a, b ResetSkip) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.From - b.From)
	})
	return out
}

// skippedByReset reports whether the input record at partition p, offset
// o lies in a range a reset skipped, and counts it there.
func skippedByReset(skips []ResetSkip, p int32, o int64) bool {
	for i := range skips {
		if s := &skips[i]; s.Partition == p && s.From <= o && o < s.To {
			s.Records++
			return true
		}
	}
	return false
}
