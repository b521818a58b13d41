// Package provision creates the topics a topology file declares, with kadm.
package provision

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/topology"
)

// Result is what happened to one declared topic.
type Result struct {
	Topic      string
	Created    bool  // false: it existed already
	Partitions int32 // the partitions it has now
	// Mismatch is set when an existing topic has other partitions than
	// declared. Kafka can add partitions but never remove them, and adding
	// some moves keys between partitions, so it is reported, not changed.
	Mismatch string
}

// CreateTopics creates every topic of f that does not exist yet, with its
// declared partitions, replication factor and configs, and the changelog
// topics of its stateful steps (topology.File.StateTopics: compacted, with
// their input topic's partitions). It is idempotent:
// existing topics are left as they are and reported with Created false.
// Errors other than "already exists" are returned joined, one per topic.
func CreateTopics(ctx context.Context, adm *kadm.Client, f *topology.File) ([]Result, error) {
	var results []Result
	var errs []error
	for _, t := range append(append([]topology.Topic(nil), f.Topics...), f.StateTopics()...) {
		cfg := map[string]*string{}
		for k, v := range t.Config {
			cfg[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, t.Partitions, t.ReplicationFactor, cfg, t.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			results = append(results, Result{Topic: t.Name, Created: true, Partitions: t.Partitions})
		case errors.Is(err, kerr.TopicAlreadyExists):
			r := Result{Topic: t.Name}
			details, derr := adm.ListTopics(ctx, t.Name)
			if derr != nil {
				errs = append(errs, fmt.Errorf("topic %q: describe: %w", t.Name, derr))
				continue
			}
			if d, ok := details[t.Name]; ok {
				r.Partitions = int32(len(d.Partitions))
			}
			if r.Partitions != t.Partitions {
				r.Mismatch = fmt.Sprintf("partitions: has %d, declared %d", r.Partitions, t.Partitions)
			}
			results = append(results, r)
		default:
			errs = append(errs, fmt.Errorf("topic %q: create: %w", t.Name, err))
		}
	}
	return results, errors.Join(errs...)
}
