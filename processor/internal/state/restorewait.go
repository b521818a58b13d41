package state

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Wait is an open transaction that a changelog read waits for. Read
// read_committed, a partition gives nothing past its last stable offset,
// the first offset of its oldest open transaction, until that transaction
// commits or aborts (KIP-98). Its producer ends it, or, if the producer is
// gone, its transaction coordinator aborts it once the producer's
// transaction.timeout.ms has passed since it began (at most the broker's
// transaction.max.timeout.ms); a new producer with the same transactional
// ID aborts it at once (InitProducerId).
type Wait struct {
	Topic           string
	Partition       int32
	Offset          int64 // the transaction's first offset in the partition
	ProducerID      int64
	ProducerEpoch   int16
	TransactionalID string // "" when no coordinator lists the producer ID
	// Started is when the coordinator began the transaction or, when it
	// does not say, the producer's last write to the partition.
	Started time.Time
	Timeout time.Duration // the producer's transaction.timeout.ms; 0 when unknown
}

// String says what the read waits for, as /readyz and the log say it.
func (w Wait) String() string {
	id := "no coordinator lists its transactional ID"
	if w.TransactionalID != "" {
		id = fmt.Sprintf("transactional ID %q", w.TransactionalID)
	}
	end := "its coordinator aborts it once the producer's transaction timeout passes, if the producer does not end it"
	if w.Timeout > 0 {
		end = fmt.Sprintf("its coordinator aborts it at %s, its transaction timeout (%s) after it began, if the producer does not end it",
			w.Started.Add(w.Timeout).UTC().Format(time.RFC3339), w.Timeout)
	}
	return fmt.Sprintf("changelog %s partition %d: waiting for an open transaction at offset %d (producer ID %d, epoch %d, %s) open since %s (%s); %s",
		w.Topic, w.Partition, w.Offset, w.ProducerID, w.ProducerEpoch, id, w.Started.UTC().Format(time.RFC3339),
		time.Since(w.Started).Round(time.Second), end)
}

// waitCheckEvery is how often a read that gets no record looks for the
// open transactions it waits for.
var waitCheckEvery = 5 * time.Second

// watchWaits tells onWait, every waitCheckEvery while the read described
// by prog gets no record, which open transactions hold its partitions
// (nil once none does). It asks the partitions' leaders
// (DescribeProducers, KIP-664) and the coordinators (ListTransactions,
// DescribeTransactions) through adm. stop ends the watch.
func watchWaits(ctx context.Context, adm *kadm.Client, topic string, prog *readProgress, onWait func([]Wait)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(waitCheckEvery)
		defer t.Stop()
		told := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var ws []Wait
			if st := prog.stalled(waitCheckEvery); st != nil {
				ws = openTxnsAt(ctx, adm, topic, st)
			}
			if ctx.Err() != nil {
				return
			}
			if len(ws) > 0 || told {
				onWait(ws)
			}
			told = len(ws) > 0
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// openTxnsAt returns the transactions open on the partitions of topic in
// parts (partition -> next offset, end) that start below the end, sorted
// by partition. What cannot be read is left out: the wait is named as far
// as the brokers tell it.
func openTxnsAt(ctx context.Context, adm *kadm.Client, topic string, parts map[int32][2]int64) []Wait {
	ps := make([]int32, 0, len(parts))
	for p := range parts {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	described, _ := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: toSet(ps)})
	var ws []Wait
	var pids []int64
	for _, dp := range described.SortedPartitions() {
		if dp.Err != nil {
			continue
		}
		for _, pr := range dp.ActiveProducers.Sorted() {
			pe, ok := parts[pr.Partition]
			if !ok || pr.CurrentTxnStartOffset < 0 || pr.CurrentTxnStartOffset >= pe[1] {
				continue
			}
			ws = append(ws, Wait{Topic: topic, Partition: pr.Partition, Offset: pr.CurrentTxnStartOffset, ProducerID: pr.ProducerID,
				ProducerEpoch: pr.ProducerEpoch, Started: time.UnixMilli(pr.LastTimestamp)})
			pids = append(pids, pr.ProducerID)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	coordinatorView(ctx, adm, ws, pids)
	slices.SortFunc(ws, func(a, b Wait) int { return int(a.Partition - b.Partition) })
	return ws
}

// coordinatorView adds to each of ws what the transaction coordinators
// say of it: its transactional ID, start and timeout.
func coordinatorView(ctx context.Context, adm *kadm.Client, ws []Wait, pids []int64) {
	listed, _ := adm.ListTransactions(ctx, pids, nil)
	byPID := map[int64]string{}
	for _, l := range listed {
		byPID[l.ProducerID] = l.TxnID
	}
	var txns kadm.DescribedTransactions
	if ids := listed.TransactionalIDs(); len(ids) > 0 {
		txns, _ = adm.DescribeTransactions(ctx, ids...)
	}
	for i := range ws {
		w := &ws[i]
		w.TransactionalID = byPID[w.ProducerID]
		if d, ok := txns[w.TransactionalID]; ok && d.Err == nil && d.ProducerID == w.ProducerID {
			w.Timeout = time.Duration(d.TimeoutMillis) * time.Millisecond
			if d.StartTimestamp > 0 {
				w.Started = time.UnixMilli(d.StartTimestamp)
			}
		}
	}
}

func toSet(ps []int32) map[int32]struct{} {
	m := make(map[int32]struct{}, len(ps))
	for _, p := range ps {
		m[p] = struct{}{}
	}
	return m
}
