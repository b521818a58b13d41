//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The failpoints that the EXACTLY_FAILPOINT environment variable arms, as
// NAME@N: the process kills itself at the Nth transaction (or database
// commit) of a stage (or sink).
const (
	failpointEnv           = "EXACTLY_FAILPOINT"
	crashBeforeCommit      = "crash-before-commit"
	crashAfterCommit       = "crash-after-commit"
	crashAfterOffsetCommit = "crash-after-offset-commit"
	crashBeforeDBCommit    = "crash-before-db-commit"
	crashAfterDBCommit     = "crash-after-db-commit"
	crashDuringRestore     = "crash-during-restore"
)

// brokerSilenceLimit is how long a stage or sink stays ready while no
// broker answers; stallMin is the least time without progress that makes
// one not ready (the engine's readiness rules).
const (
	brokerSilenceLimit = 15 * time.Second
	stallMin           = 10 * time.Second
)

// A stage consumes in consumer group exactly-<stage>, with transactional
// ID exactly-<stage>-<instance> (see package processor).
func stageGroup(stage string) string                { return "exactly-" + stage }
func transactionalID(stage, instance string) string { return "exactly-" + stage + "-" + instance }

// The reason label values of exactly_stage_transactions_aborted_total:
// a produce or transient record error, retried; an EndTxn that failed,
// whose session is rebuilt.
const (
	abortRetry = "retry"
	abortError = "error"
)

// markerHeader is the header of the marker records that drainMarkers
// writes and that stages forward.
const markerHeader = "exactly.audit.marker"

// header returns the value of the last header of r named key.
func header(r *kgo.Record, key string) (string, bool) {
	v, ok := "", false
	for _, h := range r.Headers {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}

// isMarker reports whether r is a marker record.
func isMarker(r *kgo.Record) bool {
	_, ok := header(r, markerHeader)
	return ok && r.Key == nil && r.Value == nil
}

// drainMarkers writes a marker to every partition of topic and reads the
// topic, read_committed, until it has read them all back: proof that no
// transaction was left open before them. It returns the other records.
func drainMarkers(ctx context.Context, seeds []string, topic string, opts ...kgo.Opt) ([]*kgo.Record, error) {
	base := append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)
	prod, err := kgo.NewClient(append(base, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, fmt.Errorf("drain %s: %w", topic, err)
	}
	defer prod.Close()
	topics, err := kadm.NewClient(prod).ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("drain %s: list topic: %w", topic, err)
	}
	td, ok := topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("drain %s: topic not found: %v", topic, td.Err)
	}
	parts := td.Partitions.Numbers()
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	id := hex.EncodeToString(nonce) // tells this drain's markers from forwarded ones
	for _, p := range parts {
		rec := &kgo.Record{Topic: topic, Partition: p, Headers: []kgo.RecordHeader{{Key: markerHeader, Value: []byte(id)}}}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return nil, fmt.Errorf("drain %s: write marker to partition %d: %w", topic, p, err)
		}
	}

	cons, err := kgo.NewClient(append(base,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("drain %s: %w", topic, err)
	}
	defer cons.Close()
	var out []*kgo.Record
	seen := map[int32]bool{}
	for len(seen) < len(parts) {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("drain %s: read %d of %d markers: %w", topic, len(seen), len(parts), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if isMarker(r) {
				if v, _ := header(r, markerHeader); v == id {
					seen[r.Partition] = true
				}
				return
			}
			out = append(out, r)
		})
	}
	return out, nil
}

// fenceWatch is a kgo hook that records the first FENCED_INSTANCE_ID of a
// client's group management and makes the client leave the group, so
// that it does not rejoin and fence the process that fenced it.
type fenceWatch struct {
	cl   atomic.Pointer[kgo.Client]
	once sync.Once
	err  atomic.Pointer[error]
}

func (w *fenceWatch) attach(cl *kgo.Client) { w.cl.Store(cl) }

func (w *fenceWatch) fenced() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (w *fenceWatch) OnGroupManageError(err error) {
	if !errors.Is(err, kerr.FencedInstanceID) {
		return
	}
	w.once.Do(func() {
		w.err.Store(&err)
		if cl := w.cl.Load(); cl != nil {
			//lint:ignore SA1012 nil is kgo's "leave without waiting"
			_ = cl.LeaveGroupContext(nil)
			time.Sleep(time.Second)
		}
	})
}
