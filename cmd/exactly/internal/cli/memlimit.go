package cli

import (
	"log/slog"
	"runtime/debug"

	"github.com/exactly-io/exactly/topology"
)

// Soft memory limit of a process that runs one stateless stage: what the
// stage holds live is bounded by its fetches (two per broker, the one
// being read and the next) and its producer's buffer (its records and
// the request buffers franz-go sizes by them); the rest is the runtime's
// and the program's own, and room for the collector.
const (
	memLimitBase           = 48 << 20
	memLimitFetches        = 4 // fetch_max_bytes
	memLimitProducerBuffer = 2 // max_buffered_bytes
)

// defaultMemoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit)
// that `exactly run` sets when the environment has no GOMEMLIMIT (any
// value, "off" included, is the user's) and the process runs one stage
// with no stateful step: 48 MiB, plus 4 × its fetch_max_bytes and 2 × its
// max_buffered_bytes; 64 MiB at the defaults. Go's collector then runs
// sooner when a burst would take the heap past it, instead of letting the
// heap grow to twice what is live: at the bench's full load it held a
// stage's peak RSS under 80 MiB at no measurable cost. A stateful stage's
// store (Pebble's memtables and cache, Go heap in a static build) or more
// stages in one process need more; ok is false for them. A lone sink
// sets its own, which follows its batches (processor.SinkMemoryLimit).
func defaultMemoryLimit(lookupEnv func(string) (string, bool), stages []*topology.Stage) (limit int64, ok bool) {
	if userMemoryLimit(lookupEnv) || len(stages) != 1 || stages[0].StateStore() != "" {
		return 0, false
	}
	st := stages[0]
	return memLimitBase + memLimitFetches*int64(st.FetchMaxBytes) + memLimitProducerBuffer*int64(st.MaxBufferedBytes), true
}

// userMemoryLimit reports whether the environment sets GOMEMLIMIT: any
// value, "off" included, is the user's, and no default replaces it.
func userMemoryLimit(lookupEnv func(string) (string, bool)) bool {
	_, set := lookupEnv("GOMEMLIMIT")
	return set
}

// setMemoryLimit applies defaultMemoryLimit, if any, to the process.
func setMemoryLimit(lookupEnv func(string) (string, bool), stages []*topology.Stage, log *slog.Logger) {
	if limit, ok := defaultMemoryLimit(lookupEnv, stages); ok {
		debug.SetMemoryLimit(limit)
		log.Info("soft memory limit set; GOMEMLIMIT overrides it", "limit_bytes", limit)
	}
}
