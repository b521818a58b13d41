package stage

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/state"
	"github.com/exactly-io/exactly/topology"
)

// The stream time of a dedupe or aggregate step is a watermark: per input
// partition, the minimum over the upstream partitions that feed it of the
// largest event time seen of each (see state/watermark.go). An input
// record names its upstream partition by the lineage headers the stage
// that wrote it set; a record without them (another producer's) counts as
// one more upstream, whose clock is the largest event time seen of such
// records, the rule of Kafka Streams.

// sourceOf is the upstream partition r came from, "topic/partition" by
// its lineage headers, or "" without them.
func sourceOf(r *kgo.Record) string {
	var topic, partition []byte
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderLineageTopic:
			topic = h.Value
		case HeaderLineagePartition:
			partition = h.Value
		}
	}
	if topic == nil || partition == nil {
		return ""
	}
	return string(topic) + "/" + string(partition)
}

// setWatermark configures the stream time of the stateful step's store,
// if it keeps one: the upstream partitions Config.Upstream names are
// waited for from the start, and one silent for Config.UpstreamIdle stops
// holding it back.
func (s *Stage) setWatermark() {
	st, ok := s.store.(interface{ SetWatermark(state.Watermark) })
	if !ok {
		return
	}
	idle := s.cfg.UpstreamIdle
	switch {
	case idle == 0:
		idle = topology.Default[time.Duration]("stages[].upstream_idle_timeout")
	case idle < 0:
		idle = 0 // for ever
	}
	st.SetWatermark(state.Watermark{Upstream: s.cfg.Upstream, Idle: idle})
}

// upstreamOf maps the input topic of every stage of f that writes st's
// input (its output or a route target) to its partition count: the
// upstream partitions whose lineage st's records carry. A stage with an
// aggregate step is left out: its window results name no input partition.
func upstreamOf(f *topology.File, st *topology.Stage) map[string]int32 {
	parts := map[string]int32{}
	for _, t := range f.Topics {
		parts[t.Name] = t.Partitions
	}
	var up map[string]int32
	for i := range f.Stages {
		u := &f.Stages[i]
		if slices.ContainsFunc(u.Transform, func(s topology.Step) bool { return !s.Aggregate.IsZero() }) {
			continue
		}
		for _, out := range u.OutputTopics() {
			if out == st.Input.Topic && parts[u.Input.Topic] > 0 {
				if up == nil {
					up = map[string]int32{}
				}
				up[u.Input.Topic] = parts[u.Input.Topic]
			}
		}
	}
	return up
}

// upstreamIdle is Config.UpstreamIdle of a topology duration: 0 there
// waits for ever, here the default.
func upstreamIdle(d topology.Duration) time.Duration {
	if d.Duration == 0 {
		return -1
	}
	return d.Duration
}
