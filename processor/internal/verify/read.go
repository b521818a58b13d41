package verify

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/backoff"
	"github.com/exactly-io/exactly/processor/internal/plural"
)

// Partition is the state of one partition that verify read.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Start     int64  `json:"start"`
	LSO       int64  `json:"last_stable_offset"` // read_committed end when verify started
	HWM       int64  `json:"high_watermark"`     // read_uncommitted end when verify started
	// Blocked: an open transaction kept the last stable offset below the
	// starting high watermark for longer than Config.OpenTxnWait.
	Blocked bool `json:"blocked"`
	// Incomplete: the read stopped before the read_committed end.
	Incomplete bool `json:"incomplete,omitempty"`
}

// listOffsets calls list for topics, again while it fails with an error
// Kafka marks retriable (a leader moving, a broker still loading the
// topic), per partition or whole.
func listOffsets(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error), topics []string) (kadm.ListedOffsets, error) {
	var out kadm.ListedOffsets
	err := backoff.RetryRetriable(ctx, 10, func() (err error) {
		if out, err = list(ctx, topics...); err == nil {
			err = out.Error()
		}
		return err
	})
	return out, err
}

func listEnds(ctx context.Context, adm *kadm.Client, topics []string) ([]*Partition, error) {
	hwm, err := listOffsets(ctx, adm.ListEndOffsets, topics)
	if err != nil {
		return nil, fmt.Errorf("verify: list end offsets: %w", err)
	}
	lso, err := listOffsets(ctx, adm.ListCommittedOffsets, topics)
	if err != nil {
		return nil, fmt.Errorf("verify: list last stable offsets: %w", err)
	}
	start, err := listOffsets(ctx, adm.ListStartOffsets, topics)
	if err != nil {
		return nil, fmt.Errorf("verify: list start offsets: %w", err)
	}
	var out []*Partition
	hwm.Each(func(o kadm.ListedOffset) {
		p := &Partition{Topic: o.Topic, Partition: o.Partition, HWM: o.Offset}
		if l, ok := lso.Lookup(o.Topic, o.Partition); ok {
			p.LSO = l.Offset
		}
		if s, ok := start.Lookup(o.Topic, o.Partition); ok {
			p.Start = s.Offset
		}
		out = append(out, p)
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out, nil
}

// read consumes every partition from its start to the last stable offset
// listed before, read_committed, and spills what each check needs.
func read(ctx context.Context, cfg Config, parts []*Partition, roles map[string][]role, rep *Report) error {
	pr := &partReader{cfg: cfg, roles: roles, rep: rep, byTP: map[tp]*Partition{}, pos: map[tp]int64{}, done: map[tp]bool{}}
	want, total := pr.plan(parts)
	if cfg.Progress != nil {
		cfg.Progress.SetTotal(total)
	}
	if len(pr.byTP) == 0 {
		return nil
	}
	cons, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Topology.Kafka.Brokers...), kgo.ClientID(cfg.Topology.Kafka.ClientID),
		kgo.ConsumePartitions(want),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// Small fetches, one at a time: records are spilled as they come,
		// so memory is what the client buffers, not what the topics hold.
		kgo.FetchMaxBytes(1 << 20),
		kgo.FetchMaxPartitionBytes(256 << 10),
		kgo.MaxConcurrentFetches(1),
	}, cfg.KafkaOptions...)...)
	if err != nil {
		return fmt.Errorf("verify: kafka consumer: %w", err)
	}
	defer cons.Close()
	return pr.consume(ctx, cons)
}

// tp is a topic partition.
type tp struct {
	t string
	p int32
}

// partReader is read's state: the partitions to read, where each is, and
// which are read to their end.
type partReader struct {
	cfg   Config
	roles map[string][]role
	rep   *Report
	byTP  map[tp]*Partition
	pos   map[tp]int64 // the next offset to read, for progress
	done  map[tp]bool
	rec   [linSize]byte
	idRec [idSize]byte
}

// plan notes the partitions of parts with records to read, and returns
// where to start each and how many offsets they span.
func (pr *partReader) plan(parts []*Partition) (want map[string]map[int32]kgo.Offset, total int64) {
	want = map[string]map[int32]kgo.Offset{}
	for _, p := range parts {
		if p.LSO <= p.Start {
			continue
		}
		total += p.LSO - p.Start
		pr.pos[tp{p.Topic, p.Partition}] = p.Start
		if want[p.Topic] == nil {
			want[p.Topic] = map[int32]kgo.Offset{}
		}
		want[p.Topic][p.Partition] = kgo.NewOffset().At(p.Start)
		pr.byTP[tp{p.Topic, p.Partition}] = p
	}
	return want, total
}

// consume polls until every partition is read to its end, or nothing
// comes for the idle timeout (the partitions left are marked incomplete).
func (pr *partReader) consume(ctx context.Context, cons *kgo.Client) error {
	pending := len(pr.byTP)
	lastProgress := time.Now()
	for len(pr.done) < pending {
		pollCtx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cons.PollFetches(pollCtx)
		cancel()
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("verify: read %d of %s to their end: %w", len(pr.done), plural.Count(pending, "partition"), err)
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				pr.cfg.Logger.Warn("fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		progressed := false
		var ferr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			p, err := pr.handle(ctx, fp)
			progressed = progressed || p
			if ferr == nil {
				ferr = err
			}
		})
		if ferr != nil {
			return ferr
		}
		if progressed {
			lastProgress = time.Now()
		} else if time.Since(lastProgress) > pr.cfg.IdleTimeout {
			// An aborted record right before an open transaction's start
			// is below the LSO and never returned: stop and say so.
			for k, p := range pr.byTP {
				if !pr.done[k] {
					p.Incomplete = true
				}
			}
			return nil
		}
	}
	return nil
}

// handle gives each record of fp below its partition's end to the checks
// of its topic, and reports whether there was any; the error is the
// first a check returned.
func (pr *partReader) handle(ctx context.Context, fp kgo.FetchTopicPartition) (progressed bool, ferr error) {
	key := tp{fp.Topic, fp.Partition}
	part := pr.byTP[key]
	if part == nil || pr.done[key] {
		return false, nil
	}
	for _, r := range fp.Records {
		if r.Offset >= part.LSO {
			break
		}
		progressed = true
		if pr.cfg.Progress != nil {
			pr.cfg.Progress.Add(r.Offset + 1 - pr.pos[key])
			pr.pos[key] = r.Offset + 1
		}
		if r.Offset >= part.LSO-1 {
			pr.done[key] = true
		}
		if r.Attrs.IsControl() || audit.IsMarker(r) {
			continue
		}
		pr.rep.Records++
		for _, ro := range pr.roles[r.Topic] {
			if err := ro.handle(ctx, r, pr.rec[:], pr.idRec[:], pr.cfg.EventID); err != nil && ferr == nil {
				ferr = err
			}
		}
	}
	return progressed, ferr
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// openTransactions marks the partitions whose last stable offset stays
// below the high watermark they had at the start for OpenTxnWait: an open
// transaction blocks every read_committed reader there.
func openTransactions(ctx context.Context, adm *kadm.Client, cfg Config, parts []*Partition) error {
	deadline := time.Now().Add(cfg.OpenTxnWait)
	topics := map[string]bool{}
	for _, p := range parts {
		topics[p.Topic] = true
	}
	for {
		lso, err := listOffsets(ctx, adm.ListCommittedOffsets, keys(topics))
		if err != nil {
			return fmt.Errorf("verify: list last stable offsets: %w", err)
		}
		blocked := 0
		for _, p := range parts {
			l, _ := lso.Lookup(p.Topic, p.Partition)
			p.Blocked = l.Offset < p.HWM
			if p.Blocked {
				blocked++
			}
		}
		if blocked == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("verify: wait for open transactions: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
