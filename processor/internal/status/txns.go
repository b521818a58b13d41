package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/topology"
)

// UnknownTxnTimeout is the timeout assumed for an open transaction whose
// coordinator does not know it (KIP-664's hanging transaction: no
// timeout will ever abort it): Kafka's default transaction.max.timeout.ms,
// the longest timeout any producer may ask for under the default.
const UnknownTxnTimeout = 15 * time.Minute

// OpenTxn is a transaction that is open on one partition: its first
// record there, at StartOffset, holds the partition's last stable offset,
// so read_committed consumers stop there until it ends.
type OpenTxn struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// TransactionalID is empty when no coordinator has a transactional ID
	// for the producer ID (the transaction hangs, KIP-664).
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	ProducerEpoch   int16  `json:"producer_epoch"`
	StartOffset     int64  `json:"start_offset"`
	// Started is when the coordinator began the transaction or, when the
	// coordinator does not know it, the producer's last write to the
	// partition (then OpenMs is a lower bound).
	Started time.Time `json:"started"`
	OpenMs  int64     `json:"open_ms"`
	// TimeoutMs is the producer's transaction.timeout.ms, or 0 when the
	// coordinator does not know the transaction.
	TimeoutMs int64 `json:"timeout_ms"`
	// State is the coordinator's: Ongoing, PrepareCommit, PrepareAbort,
	// CompleteCommit, ...; empty when it does not know the transaction.
	State  string `json:"state,omitempty"`
	Reason string `json:"reason"`
}

// Open is how long the transaction has been open.
func (t OpenTxn) Open() time.Duration { return time.Duration(t.OpenMs) * time.Millisecond }

// Timeout is the transaction's timeout, 0 when unknown.
func (t OpenTxn) Timeout() time.Duration { return time.Duration(t.TimeoutMs) * time.Millisecond }

// Cells returns the transactional ID, timeout and state as a table
// shows them, each "-" when the coordinator does not know it.
func (t OpenTxn) Cells() (id, timeout, state string) {
	id, timeout, state = t.TransactionalID, "-", t.State
	if id == "" {
		id = "-"
	}
	if t.TimeoutMs > 0 {
		timeout = t.Timeout().String()
	}
	if state == "" {
		state = "-"
	}
	return id, timeout, state
}

// TxnTopics returns every topic of f whose partitions a transaction may
// hold: the stages' and sinks' inputs, the stages' outputs, every
// dead-letter topic and the changelogs of stateful stages, whose restores
// wait for a transaction open there (ChangelogTopics), sorted; only the
// stage or sink named only, if not "".
func TxnTopics(f *topology.File, only string) []string {
	var topics []string
	add := func(ts ...string) {
		for _, t := range ts {
			if t != "" && !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	for _, st := range f.StagesInOrder() {
		if only != "" && st.Name != only {
			continue
		}
		add(st.Input.Topic)
		add(st.OutputTopics()...)
		add(st.DeadLetter.Topic)
	}
	add(ChangelogTopics(f, only)...)
	for _, sk := range f.Sinks {
		if only != "" && sk.Name != only {
			continue
		}
		add(sk.Input.Topic, sk.DeadLetter.Topic)
	}
	slices.Sort(topics)
	return topics
}

// ChangelogTopics returns the changelog topics of the stateful stages of
// f (only the one named only, if not ""), in stage order.
func ChangelogTopics(f *topology.File, only string) []string {
	var topics []string
	for _, st := range f.StagesInOrder() {
		if store := st.StateStore(); store != "" && (only == "" || st.Name == only) {
			topics = append(topics, topology.ChangelogTopic(st.Name, store))
		}
	}
	return topics
}

// HangingTxns returns the transactions open on the partitions of topics
// for longer than after, or, with after 0, for longer than their own
// transaction timeout (UnknownTxnTimeout when the coordinator does not
// know them), sorted by topic, partition and producer ID.
//
// It is KIP-664's procedure, read-only: DescribeProducers on each
// partition's leader gives the producers with an open transaction there and
// its first offset; ListTransactions (filtered by those producer IDs) and
// DescribeTransactions on the coordinators give each one's transactional
// ID, state, start time and timeout. A coordinator normally aborts a
// transaction once it times out, so one that stays open past its timeout
// is stuck: its coordinator lost it, or cannot write its markers.
//
// The error joins what could not be read (a broker down, a topic missing);
// the transactions found elsewhere are still returned.
func HangingTxns(ctx context.Context, adm *kadm.Client, topics []string, after time.Duration) ([]OpenTxn, error) {
	if len(topics) == 0 {
		return nil, nil
	}
	set := kadm.TopicsSet{}
	for _, t := range topics {
		set.Add(t)
	}
	var errs []error
	described, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		if len(described) == 0 {
			return nil, fmt.Errorf("describe producers: %w", err)
		}
		errs = append(errs, fmt.Errorf("describe producers: %w", err))
	}
	var open []kadm.DescribedProducer
	for _, p := range described.SortedPartitions() {
		if p.Err != nil {
			errs = append(errs, fmt.Errorf("describe producers of %s/%d: %w", p.Topic, p.Partition, p.Err))
			continue
		}
		for _, pr := range p.ActiveProducers.Sorted() {
			if pr.CurrentTxnStartOffset >= 0 {
				open = append(open, pr)
			}
		}
	}
	if len(open) == 0 {
		return nil, errors.Join(errs...)
	}
	var pids []int64
	for _, pr := range open {
		if !slices.Contains(pids, pr.ProducerID) {
			pids = append(pids, pr.ProducerID)
		}
	}
	listed, err := adm.ListTransactions(ctx, pids, nil)
	if err != nil {
		errs = append(errs, fmt.Errorf("list transactions: %w", err))
	}
	var txns kadm.DescribedTransactions
	if ids := listed.TransactionalIDs(); len(ids) > 0 {
		txns, err = adm.DescribeTransactions(ctx, ids...)
		if err != nil {
			errs = append(errs, fmt.Errorf("describe transactions: %w", err))
		}
	}
	return hanging(open, listed, txns, time.Now(), after), errors.Join(errs...)
}

// hanging joins what the partition leaders and the coordinators said about
// the open transactions and keeps those open for longer than after (0:
// their timeout), as of now.
func hanging(open []kadm.DescribedProducer, listed kadm.ListedTransactions, txns kadm.DescribedTransactions, now time.Time, after time.Duration) []OpenTxn {
	byPID := map[int64]string{}
	for _, l := range listed {
		byPID[l.ProducerID] = l.TxnID
	}
	out := []OpenTxn{}
	for _, pr := range open {
		o := OpenTxn{Topic: pr.Topic, Partition: pr.Partition, ProducerID: pr.ProducerID, ProducerEpoch: pr.ProducerEpoch,
			StartOffset: pr.CurrentTxnStartOffset, Started: time.UnixMilli(pr.LastTimestamp).UTC()}
		timeout := UnknownTxnTimeout
		o.TransactionalID = byPID[pr.ProducerID]
		d, found := txns[o.TransactionalID]
		var unknown string // why the coordinator's word is missing
		switch {
		case o.TransactionalID == "" || !found:
			unknown = "no coordinator knows this producer ID: nothing will end the transaction"
		case d.Err != nil:
			unknown = "its coordinator did not describe it: " + d.Err.Error()
		case d.ProducerID != pr.ProducerID:
			unknown = fmt.Sprintf("its transactional ID now has producer ID %d: nothing will end this transaction", d.ProducerID)
		}
		if unknown == "" {
			o.State, o.TimeoutMs = d.State, int64(d.TimeoutMillis)
			timeout = time.Duration(d.TimeoutMillis) * time.Millisecond
			if d.StartTimestamp > 0 {
				o.Started = time.UnixMilli(d.StartTimestamp).UTC()
			}
		}
		o.OpenMs = max(now.Sub(o.Started).Milliseconds(), 0)
		limit := after
		if limit <= 0 {
			limit = timeout
		}
		if o.Open() <= limit {
			continue
		}
		switch {
		case unknown != "":
			o.Reason = unknown
		case after > 0 && o.Open() <= timeout:
			o.Reason = fmt.Sprintf("open longer than %s", after)
		default:
			o.Reason = "open longer than its timeout"
		}
		out = append(out, o)
	}
	return out
}

// WriteHangingTable writes txns as a table; limit is the threshold they
// were found with (0: their timeout).
func WriteHangingTable(w io.Writer, txns []OpenTxn, after time.Duration) error {
	what := "open longer than their timeout"
	if after > 0 {
		what = "open longer than " + after.String()
	}
	if len(txns) == 0 {
		_, err := fmt.Fprintf(w, "TRANSACTIONS %s: none\n", what)
		return err
	}
	fmt.Fprintf(w, "TRANSACTIONS %s: %d (each holds its partition's last stable offset)\n", what, len(txns))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  TOPIC/PARTITION\tTRANSACTIONAL ID\tPRODUCER ID\tEPOCH\tSTART OFFSET\tOPEN FOR\tTIMEOUT\tSTATE\tWHY\n")
	for _, t := range txns {
		id, timeout, state := t.Cells()
		fmt.Fprintf(tw, "  %s/%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", t.Topic, t.Partition, id, t.ProducerID, t.ProducerEpoch,
			t.StartOffset, t.Open().Round(time.Second), timeout, state, t.Reason)
	}
	return tw.Flush()
}
