//go:build integration

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const recordSize = 1024

// value is input record i: a 1 KiB JSON object with a unique event_id.
// amount is never negative, so the transform's filter keeps every record.
// The pad is pseudo-random letters and digits, the same for every run:
// franz-go compresses with snappy by default and Kafka's tools and Kafka
// Streams do not compress, so a pad of one repeated letter would let some
// cases move a tenth of the bytes of others.
func value(i int) []byte {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	regions := [...]string{"eu", "us", "apac"}
	head := fmt.Appendf(nil, `{"event_id":"e-%09d","amount":%d,"customer_id":"c-%d","region":%q,"internal":"n-%d","pad":"`,
		i, i%1000, i%977, regions[i%3], i)
	pad := recordSize - len(head) - len(`"}`)
	v := make([]byte, 0, recordSize)
	v = append(v, head...)
	rng := rand.New(rand.NewPCG(uint64(i), 0x6578616374))
	for range pad {
		v = append(v, alnum[rng.IntN(len(alnum))])
	}
	return append(v, `"}`...)
}

func eventID(i int) string { return fmt.Sprintf("e-%09d", i) }

// kafka is the harness's own client and what it created, for cleanup.
type kafka struct {
	cfg    config
	cl     *kgo.Client
	adm    *kadm.Client
	run    string // unique run tag in every name
	mu     sync.Mutex
	topics []string
	groups []string
}

func newKafka(cfg config) (*kafka, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(cfg.brokers, ",")...),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		return nil, err
	}
	return &kafka{cfg: cfg, cl: cl, adm: kadm.NewClient(cl),
		run: fmt.Sprintf("%d_%04x", time.Now().Unix()%100000, rand.N(1<<16))}, nil
}

func (k *kafka) name(prefix string) string { return "bench_" + prefix + "_" + k.run }

// topic creates a topic with the run's partition count (or parts > 0).
func (k *kafka) topic(ctx context.Context, prefix string, parts int) (string, error) {
	if parts <= 0 {
		parts = k.cfg.partitions
	}
	return k.topicWith(ctx, k.name(prefix), parts, nil)
}

// topicWith creates topic name with parts partitions and configs.
func (k *kafka) topicWith(ctx context.Context, name string, parts int, configs map[string]*string) (string, error) {
	resp, err := k.adm.CreateTopic(ctx, int32(parts), 1, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return "", fmt.Errorf("create topic %s: %w", name, err)
	}
	k.mu.Lock()
	k.topics = append(k.topics, name)
	k.mu.Unlock()
	return name, k.waitVisible(ctx, name, parts)
}

// waitVisible waits until the broker's metadata shows topic with parts
// partitions, each with a leader. CreateTopics answers once the controller
// has the topic; a broker's metadata can lag behind it on a loaded
// machine, and a stage whose start check looks before then fails on a
// topic it says does not exist.
func (k *kafka) waitVisible(ctx context.Context, topic string, parts int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ts, err := k.adm.ListTopics(ctx, topic)
		if err == nil {
			if td, ok := ts[topic]; ok && td.Err == nil && len(td.Partitions) == parts {
				ready := true
				for _, p := range td.Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0
				}
				if ready {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s: not in the broker's metadata 30 s after it was created", topic)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// adoptTopics adds the topics whose names start with prefix (those a Kafka
// Streams application made) to the run's topics, for cleanup.
func (k *kafka) adoptTopics(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ts, err := k.adm.ListTopics(ctx)
	if err != nil {
		logf("list topics: %v", err)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range ts.Names() {
		if strings.HasPrefix(t, prefix) {
			k.topics = append(k.topics, t)
		}
	}
}

func kptr(s string) *string { return &s }

// awaitTopics waits until the broker's metadata has every topic of names
// with its leaders: a topic just created can be missing from it for a
// moment, and a stage that starts then stops at once.
func (k *kafka) awaitTopics(ctx context.Context, names ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ts, err := k.adm.ListTopics(ctx, names...)
		if err == nil {
			ready := true
			for _, n := range names {
				d, ok := ts[n]
				if !ok || d.Err != nil || len(d.Partitions) == 0 {
					ready = false
					break
				}
				for _, p := range d.Partitions {
					if p.Err != nil || p.Leader < 0 {
						ready = false
					}
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %s not in the metadata: %w", strings.Join(names, ", "), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (k *kafka) group(g string) string {
	k.mu.Lock()
	k.groups = append(k.groups, g)
	k.mu.Unlock()
	return g
}

// cleanup deletes the run's topics and groups, to keep the shared broker
// small.
func (k *kafka) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if len(k.groups) > 0 {
		if _, err := k.adm.DeleteGroups(ctx, k.groups...); err != nil {
			logf("delete groups: %v", err)
		}
	}
	if len(k.topics) > 0 {
		resp, err := k.adm.DeleteTopics(ctx, k.topics...)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			logf("delete topics: %v", err)
		} else {
			logf("deleted %d topics and %d groups", len(k.topics), len(k.groups))
		}
	}
	k.cl.Close()
}

// fill produces records [0, n) to topic, keyed by event ID, acks=all, and
// returns the rate it reached.
func (k *kafka) fill(ctx context.Context, topic string, n int) (float64, error) {
	var (
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for i := range n {
		k.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(eventID(i)), Value: value(i)}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	if err := k.cl.Flush(ctx); err != nil {
		return 0, err
	}
	if firstErr != nil {
		return 0, fmt.Errorf("produce to %s: %w", topic, firstErr)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// endSum is the sum of topic's end offsets (high watermarks).
func (k *kafka) endSum(ctx context.Context, topic string) (int64, error) {
	ends, err := k.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var sum int64
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = o.Err
		}
		sum += o.Offset
	})
	return sum, lerr
}

// progress samples how far a consumer (a group, or a sink's positions) has
// committed through a topic.
type progress func(ctx context.Context) (int64, error)

// groupProgress is the sum of group's committed offsets on topic.
func (k *kafka) groupProgress(group, topic string) progress {
	return func(ctx context.Context) (int64, error) {
		offs, err := k.adm.FetchOffsets(ctx, group)
		if err != nil {
			return 0, err
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == topic && o.Err == nil && o.At > 0 {
				sum += o.At
			}
		})
		return sum, nil
	}
}

// measured is the steady-state throughput window of one case.
type measured struct {
	started     time.Time // the process started
	first, last time.Time // first sample with progress, first sample at the total
	atFirst     int64     // progress at first
	total       int64
}

// rate is the steady-state rate: from the first commit to the last. When
// the first commit was already most of the run (too few records), it is
// the rate since the process started instead, startup included.
func (m measured) rate() float64 {
	if d := m.last.Sub(m.first).Seconds(); d > 0 && m.atFirst < m.total/2 {
		return float64(m.total-m.atFirst) / d
	}
	if d := m.last.Sub(m.started).Seconds(); d > 0 {
		return float64(m.total) / d
	}
	return 0
}

var errExited = errors.New("process exited before it finished")

// watchStop watches pr until progress p reaches r.total (see watch), then
// stops it and records its resource use in res. ok is false, with res.Error
// set, when the watch failed (with pr's failure when it exited early);
// perr is pr's exit error.
func (r *runner) watchStop(ctx context.Context, res *caseResult, p progress, pr *proc) (m measured, perr error, ok bool) {
	return r.watchStopN(ctx, res, p, pr, r.total)
}

// watchStopN is watchStop until progress p reaches total.
func (r *runner) watchStopN(ctx context.Context, res *caseResult, p progress, pr *proc, total int64) (m measured, perr error, ok bool) {
	m, werr := watch(ctx, p, total, pr, r.k.timeoutFor())
	u, perr := pr.stop()
	res.PeakRSSMiB, res.CPUS = u.PeakRSSMiB, u.CPUSeconds
	if errors.Is(werr, errExited) {
		werr = pr.failure()
	}
	if werr != nil {
		res.Error = werr.Error()
		return m, perr, false
	}
	return m, perr, true
}

// measure records m, a finished watch of pr, in res: records/s and wall time.
func (res *caseResult) measure(m measured, pr *proc) {
	res.RecordsPerS = m.rate()
	res.WallS = m.last.Sub(pr.started).Seconds()
}

// watch samples p every 10 ms until it reaches total, pr exits,
// or timeout passes.
func watch(ctx context.Context, p progress, total int64, pr *proc, timeout time.Duration) (measured, error) {
	m := measured{total: total, started: pr.started}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last int64
	for {
		select {
		case <-ctx.Done():
			return m, ctx.Err()
		case <-pr.exited:
			return m, errExited
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("timed out after %s at %d of %d", timeout, last, total)
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := p(sctx)
		cancel()
		if err != nil {
			continue // a table not created yet, a coordinator moving: sample again
		}
		now := time.Now()
		last = n
		if n > 0 && m.first.IsZero() {
			m.first, m.atFirst = now, n
		}
		if n >= total {
			m.last = now
			return m, nil
		}
	}
}

// timeoutFor bounds one case: generous, so that a slow machine still
// finishes, and a stuck case still ends.
func (k *kafka) timeoutFor() time.Duration {
	return 2*time.Minute + time.Duration(k.cfg.records/500)*time.Second
}
