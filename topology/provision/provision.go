// Package provision creates the topics a topology file declares, with kadm.
package provision

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

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
//
// It returns once the broker's metadata shows every topic it created with
// a leader for each partition (see WaitVisible), so that a stage or sink
// started right after it finds them: CreateTopics answers when the
// controller has accepted the topics, before the brokers' metadata caches
// have them (KIP-500's metadata log is replicated to brokers
// asynchronously).
func CreateTopics(ctx context.Context, adm *kadm.Client, f *topology.File) ([]Result, error) {
	results, err := createTopics(ctx, adm, f)
	var created []string
	for _, r := range results {
		if r.Created {
			created = append(created, r.Topic)
		}
	}
	if werr := WaitVisible(ctx, adm, created...); werr != nil {
		err = errors.Join(err, werr)
	}
	return results, err
}

// WaitVisible polls the broker's metadata (ListTopics, with a backoff of
// 20 ms doubling to 500 ms) until every topic of names is there with a
// leader for each of its partitions. It returns ctx's error, naming the
// topics still missing, if ctx ends first.
func WaitVisible(ctx context.Context, adm *kadm.Client, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	wait := 20 * time.Millisecond
	for {
		missing := names
		td, err := adm.ListTopics(ctx, names...)
		if err == nil {
			missing = nil
			for _, n := range names {
				if !led(td[n]) {
					missing = append(missing, n)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			sort.Strings(missing)
			return fmt.Errorf("topics %q created, but not yet in the broker's metadata: %w", missing, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// led reports whether d describes a topic whose every partition has a
// leader.
func led(d kadm.TopicDetail) bool {
	if d.Err != nil || len(d.Partitions) == 0 {
		return false
	}
	for _, p := range d.Partitions {
		if p.Err != nil || p.Leader < 0 {
			return false
		}
	}
	return true
}

func createTopics(ctx context.Context, adm *kadm.Client, f *topology.File) ([]Result, error) {
	var results []Result
	var errs []error
	for _, t := range append(append([]topology.Topic(nil), f.Topics...), f.StateTopics()...) {
		cfg := map[string]*string{}
		for k, v := range t.Config {
			cfg[k] = &v
		}
		resp, err := adm.CreateTopic(ctx, t.Partitions, t.ReplicationFactor, cfg, t.Name)
		if resp.Err != nil {
			// CreateTopic returns the topic's Err as its error too.
			err = resp.Err
			if resp.ErrMessage != "" && !strings.Contains(err.Error(), resp.ErrMessage) {
				// The broker's own reason ("Unknown topic config name:
				// retention.mss"), which the error code alone does not give.
				err = fmt.Errorf("%w: %s", err, resp.ErrMessage)
			}
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
