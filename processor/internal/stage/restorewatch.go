package stage

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/exactly-io/exactly/processor/internal/state"
)

// restoreStatus is the state restore under way, if any, for /readyz and
// the log. A restore runs in OnPartitionsAssigned, before franz-go
// records the assignment, so without it /readyz would say no partitions
// are assigned (a first join) or be ready (partitions added to a running
// instance) while the restore, and so the stage, waits. Safe for
// concurrent use.
type restoreStatus struct {
	mu      sync.Mutex
	topic   string
	parts   []int32
	started time.Time
	records int64
	waits   []state.Wait
	logged  map[waitKey]time.Time // when each wait was last logged
}

// waitKey names one open transaction on one partition.
type waitKey struct {
	partition  int32
	producerID int64
	offset     int64
}

// restoreWaitLogEvery is how often a restore that still waits for an
// open transaction says so again in the log.
const restoreWaitLogEvery = 30 * time.Second

func (r *restoreStatus) begin(topic string, parts []int32, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topic, r.parts, r.started, r.records, r.waits = topic, parts, at, 0, nil
	r.logged = map[waitKey]time.Time{}
}

func (r *restoreStatus) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parts, r.waits = nil, nil
}

// waitsNow returns the open transactions the read waits for.
func (r *restoreStatus) waitsNow() []state.Wait {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waits
}

// read counts a record applied.
func (r *restoreStatus) read() {
	r.mu.Lock()
	r.records++
	r.mu.Unlock()
}

// check is the readiness reason of a restore under way, nil when none:
// the partitions, for how long, and the open transactions it waits for.
func (r *restoreStatus) check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.parts == nil {
		return nil
	}
	msg := fmt.Sprintf("restoring the state of partitions %v from changelog %s for %s (%d records read)",
		r.parts, r.topic, time.Since(r.started).Round(time.Second), r.records)
	if len(r.waits) > 0 {
		ws := make([]string, len(r.waits))
		for i, w := range r.waits {
			ws[i] = w.String()
		}
		msg += ": " + strings.Join(ws, "; ")
	}
	return fmt.Errorf("%s", msg)
}

// waiting records the open transactions the restore waits for, and
// returns those to log: each at once, then every restoreWaitLogEvery.
func (r *restoreStatus) waiting(ws []state.Wait, now time.Time) (log []state.Wait) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = ws
	for _, w := range ws {
		k := waitKey{w.Partition, w.ProducerID, w.Offset}
		if at, ok := r.logged[k]; !ok || now.Sub(at) >= restoreWaitLogEvery {
			r.logged[k] = now
			log = append(log, w)
		}
	}
	return log
}

// restoreWaiting is the restore's state.ReplayHooks.Waiting: it names the
// open transactions the restore waits for in /readyz, and in the log at
// WARN.
func (s *Stage) restoreWaiting(ws []state.Wait) {
	for _, w := range s.restoring.waiting(ws, time.Now()) {
		s.log.Warn("state restore waits for an open transaction on its changelog: read_committed, nothing past its first offset can be read until it commits or aborts", waitAttrs(w)...)
	}
}

// waitAttrs are the log attributes of an open transaction a read waits for.
func waitAttrs(w state.Wait) []any {
	txnID := w.TransactionalID
	if txnID == "" {
		txnID = "-"
	}
	attrs := []any{"topic", w.Topic, "partition", w.Partition, "offset", w.Offset, "producer_id", w.ProducerID,
		"producer_epoch", w.ProducerEpoch, "txn_id", txnID, "open_since", w.Started.UTC().Format(time.RFC3339)}
	if w.Timeout > 0 {
		attrs = append(attrs, "aborted_by", w.Started.Add(w.Timeout).UTC().Format(time.RFC3339))
	}
	return attrs
}
