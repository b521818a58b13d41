package verify

import (
	"slices"

	"github.com/exactly-io/exactly/processor/internal/status"
	"github.com/exactly-io/exactly/topology"
)

// hangingTopics is where verify looks for hanging transactions: the
// topics it reads, and the changelogs of f's stateful stages, whose
// restores wait for any transaction open there (a foreign producer's
// too), so that a stage holds its partitions and moves nothing.
func hangingTopics(f *topology.File, read []string) []string {
	topics := slices.Clone(read)
	for _, t := range status.ChangelogTopics(f, "") {
		if !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	slices.Sort(topics)
	return topics
}
