package stage

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/partpos"
	"github.com/exactly-io/exactly/processor/internal/promutil"
)

// Metrics are the stage engine's Prometheus collectors, named
// exactly_stage_<name>_<unit>. Build one per registry with NewMetrics and
// share it among the stages of a process; every series is labelled by
// stage. A nil *Metrics records nothing.
type Metrics struct {
	consumed     *prometheus.CounterVec
	produced     *prometheus.CounterVec
	filtered     *prometheus.CounterVec
	deadLettered *prometheus.CounterVec
	committed    *prometheus.CounterVec
	aborted      *prometheus.CounterVec
	txnDuration  *prometheus.HistogramVec
	commitTime   *prometheus.HistogramVec
	triggers     *prometheus.CounterVec
	txnRecords   *prometheus.HistogramVec
	latency      *prometheus.HistogramVec
	rebuilds     *prometheus.CounterVec
	lastCommit   *prometheus.GaugeVec
	deduplicated *prometheus.CounterVec
	restored     *prometheus.CounterVec
	restoreTime  *prometheus.HistogramVec
	// restoreBehind is the changelog records the restore under way has
	// to read at most (its offset range), 0 when none runs.
	restoreBehind *prometheus.GaugeVec
	stateEntries  *prometheus.GaugeVec
	pastRetention *prometheus.CounterVec
	inputTxnOpen  *prometheus.GaugeVec
	// consumer holds ready, retries, rebalances, recreations and lag.
	consumer *promutil.Consumer
}

// Reasons a transaction is aborted, the reason label of
// exactly_stage_transactions_aborted_total.
const (
	AbortRebalance = "rebalance" // the group rebalanced while it was open
	AbortRetry     = "retry"     // a produce or transient record error; retried
	AbortError     = "error"     // EndTxn failed; the session is rebuilt
)

// Causes of a retried transaction, the cause label of
// exactly_stage_retries_total.
const (
	RetryProduce         = "produce_error"          // the broker refused a produce
	RetryTransientRecord = "transient_record_error" // a record's decode or encode failed transiently (a schema registry outage)
)

// NewMetrics registers the stage metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	f := &promutil.Factory{Subsystem: "stage", Owner: "stage"}
	counter, gauge := f.Counter, f.Gauge
	hist := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return f.Histogram(name, help, buckets)
	}
	m := &Metrics{
		consumed: counter("records_consumed_total", "Input records polled (control records excluded).", "topic"),
		produced: counter("records_produced_total", "Output records in committed transactions.", "topic"),
		filtered: counter("records_filtered_total", "Input records that left no output and no dead letter, in committed transactions: dropped by a filter step or a Go function, "+
			"or taken in by an aggregate step with no result yet. A dedupe duplicate counts in exactly_stage_deduplicated_records_total instead."),
		deadLettered: counter("records_dead_lettered_total", "Dead letters in committed transactions, by reason (late: an aggregate's record whose every window had closed).", "reason"),
		committed:    counter("transactions_committed_total", "Transactions committed."),
		aborted: counter("transactions_aborted_total", "Transactions aborted, by reason: rebalance (the group rebalanced while it was open), "+
			"retry (a refused produce or a transient record error; retried) or error (EndTxn failed; the session is rebuilt).", "reason"),
		txnDuration:   hist("transaction_duration_seconds", "Time from Begin to a committed End.", prometheus.ExponentialBuckets(0.005, 2, 14)),
		txnRecords:    hist("transaction_records", "Input records per committed transaction.", prometheus.ExponentialBuckets(1, 4, 10)),
		latency:       hist("end_to_end_latency_seconds", "From an input record's timestamp to the commit of its transaction.", prometheus.ExponentialBuckets(0.005, 2, 16)),
		rebuilds:      counter("session_rebuilds_total", "Kafka sessions closed and rebuilt after an error (fenced producer, failed EndTxn)."),
		lastCommit:    gauge("last_commit_timestamp_seconds", "Unix time of the last committed transaction; the stage's start until its first."),
		deduplicated:  counter("deduplicated_records_total", "Input records dropped by the dedupe step as duplicates, in committed transactions."),
		restored:      counter("state_restored_records_total", "Changelog records applied while restoring partition stores (restore progress)."),
		restoreBehind: gauge("state_restore_pending_records", "Changelog offsets the restore under way reads at most (end minus where it starts: its checkpoint, or the changelog's start); 0 when no restore runs. Read with exactly_stage_state_restored_records_total for progress."),
		restoreTime:   hist("state_restore_duration_seconds", "Time to restore the stores of the partitions of one assignment from their changelogs.", prometheus.ExponentialBuckets(0.01, 2, 16)),
		stateEntries:  gauge("state_entries", "Entries in the state store (dedupe IDs, open aggregate windows, keys of a stateful step) of the stage's assigned input partitions, as of their restore and the last commit; 0 without a stateful step."),
		pastRetention: counter("outputs_past_retention_total", "Outputs committed with a timestamp (output_timestamp: input) older than their topic's retention.ms allows: "+
			"the broker may delete them before they are read (see exactly help stages, Output timestamps).", "topic"),
		inputTxnOpen: gauge("input_transaction_open_seconds", "Seconds an input partition's last stable offset has stayed at one offset below its high watermark, as read every few seconds: "+
			"how long the oldest open transaction on it (another producer's) has held read_committed readers, this stage included, back; 0 when none is open. "+
			"The lag does not count the records behind it; the broker aborts a transaction after its timeout, so one open for longer hangs (exactly status --hanging-after).", "topic", "partition"),
		consumer: f.Consumer(promutil.ConsumerHelp{
			Ready: "1 when the stage is ready, as /readyz answers (partitions assigned, the session and brokers healthy, no transaction stalled), else 0.",
			Retries: "Transactions retried after a transient fault, by cause: produce_error (the broker refused a produce) or " +
				"transient_record_error (a decode or encode failed transiently, such as a schema registry outage).",
			Rebalances: "Partition assignments and revocations.",
			Recreations: "Input partitions whose committed offset was not resumed because the topic was recreated " +
				"(reason topic_id_changed, offset_above_high_watermark) or its log truncated (log_truncated); see exactly help operating, Topic identity and start positions.",
			Lag: "Records between the stage's position (the offset after its last polled record, else its group's committed offset) and the partition's last stable offset (read_committed end); " +
				"transaction markers do not count, so a caught-up stage reads 0. Read from each fetch, and every few seconds apart from the consumer, so it keeps rising while the stage cannot fetch or commit; " +
				"when the end offsets cannot be read either it keeps its last value (see exactly_stage_consumer_lag_age_seconds). A partition keeps its series until another assignment leaves it out.",
			BrokerSilence: "Seconds since a Kafka broker last answered this instance (any request); its start until the first answer. It has a series from the start, with or without partitions, so an alert can tell an instance that started while the brokers were unreachable.",
			LagAge: "Seconds since the end offsets behind exactly_stage_consumer_lag_records were read. A few seconds while the brokers answer; " +
				"it grows while the stage cannot reach the partition's leader, and the lag is then a lower bound.",
		}),
		commitTime: hist("transaction_commit_duration_seconds", "Time a committed transaction took to end: the flush of its records, then End (offsets in the transaction, heartbeat, EndTxn). "+
			"Records wait for it on top of the time the transaction was open.", prometheus.ExponentialBuckets(0.001, 2, 14)),
		triggers: counter("transaction_triggers_total", "Transactions the stage ended, by what ended them: caught_up (its last fetch read all the broker had), "+
			"interval (commit.interval since Begin), max_records, isolate (one record while isolating a refused one), "+
			"halted (a record failed for a fault not its own, a registry down or refusing: it aborts at once) or shutdown.", "trigger"),
	}
	if err := f.Register(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// stageMetrics are a Metrics bound to one stage's label. The embedded
// Owned names the stage and records what the stage counts as the sink
// does (Retry, Rebalance, Recreated, SetLag, DropPartition).
type stageMetrics struct {
	promutil.Owned
	m *Metrics
}

// bind labels the stage's series with its name.
func (s *stageMetrics) bind(stage string) {
	s.Owned = promutil.Bind(s.m, stage, func(m *Metrics) *promutil.Consumer { return m.consumer })
}

// start creates the stage's series of rare events at 0, as Owned.Start
// does its shared ones.
func (s stageMetrics) start(input string, ready func() error) {
	if s.m == nil {
		return
	}
	s.Start(input, ready, []string{partpos.RecreatedNewID, partpos.RecreatedAboveEnd, partpos.LogTruncated}, []string{RetryProduce, RetryTransientRecord})
	for _, r := range []string{AbortRebalance, AbortRetry, AbortError} {
		s.m.aborted.WithLabelValues(s.Name(), r)
	}
	for _, tr := range []string{endCaughtUp, endInterval, endMax, endIsolate, endShutdown} {
		s.m.triggers.WithLabelValues(s.Name(), tr)
	}
	s.StartCounters(s.m.filtered, s.m.committed, s.m.rebuilds, s.m.deduplicated, s.m.restored)
	// What the alert rules read: their rate() and increase() see the
	// first record, and the time since the last commit counts from the
	// start while nothing has committed.
	s.m.consumed.WithLabelValues(s.Name(), input)
	for _, r := range []string{deadletter.ReasonDecode, deadletter.ReasonTransform, deadletter.ReasonKey, deadletter.ReasonEncode, deadletter.ReasonProduce, deadletter.ReasonLate} {
		s.m.deadLettered.WithLabelValues(s.Name(), r)
	}
	s.m.lastCommit.WithLabelValues(s.Name()).Set(float64(time.Now().UnixNano()) / 1e9)
	s.m.restoreTime.WithLabelValues(s.Name())
	s.m.stateEntries.WithLabelValues(s.Name())
	s.m.restoreBehind.WithLabelValues(s.Name())
	// The transaction histograms too: a dashboard's rate() and quantiles
	// see the series before the first commit.
	for _, h := range []*prometheus.HistogramVec{s.m.txnDuration, s.m.commitTime, s.m.txnRecords, s.m.latency} {
		h.WithLabelValues(s.Name())
	}
}

// ended counts a transaction ended for trigger (endNow's reasons, or
// endShutdown), committed or not.
func (s stageMetrics) ended(trigger string) {
	if s.m != nil {
		s.m.triggers.WithLabelValues(s.Name(), trigger).Inc()
	}
}

func (s stageMetrics) consumedRecords(topic string, n int) {
	if s.m != nil {
		s.m.consumed.WithLabelValues(s.Name(), topic).Add(float64(n))
	}
}

// commit records t, committed at at with records input records (t.records
// is already reset by then).
func (s stageMetrics) commit(t *txn, records int, at time.Time) {
	if s.m == nil {
		return
	}
	for topic, n := range t.perTopic {
		s.m.produced.WithLabelValues(s.Name(), topic).Add(float64(n))
	}
	for reason, n := range t.perReason {
		s.m.deadLettered.WithLabelValues(s.Name(), reason).Add(float64(n))
	}
	s.m.filtered.WithLabelValues(s.Name()).Add(float64(t.filtered))
	s.m.deduplicated.WithLabelValues(s.Name()).Add(float64(t.deduplicated))
	s.m.committed.WithLabelValues(s.Name()).Inc()
	s.m.txnDuration.WithLabelValues(s.Name()).Observe(at.Sub(t.started).Seconds())
	s.m.commitTime.WithLabelValues(s.Name()).Observe(at.Sub(t.ending).Seconds())
	s.m.txnRecords.WithLabelValues(s.Name()).Observe(float64(records))
	lat := s.m.latency.WithLabelValues(s.Name())
	for _, ts := range t.timestamps {
		lat.Observe(at.Sub(ts).Seconds())
	}
	s.m.lastCommit.WithLabelValues(s.Name()).Set(float64(at.UnixNano()) / 1e9)
}

// producedRecords and deadLetteredRecords count records an at-least-once
// abort left written (see txn.rewind).
func (s stageMetrics) producedRecords(topic string, n int64) {
	if s.m != nil {
		s.m.produced.WithLabelValues(s.Name(), topic).Add(float64(n))
	}
}

func (s stageMetrics) deadLetteredRecords(reason string, n int64) {
	if s.m != nil {
		s.m.deadLettered.WithLabelValues(s.Name(), reason).Add(float64(n))
	}
}

func (s stageMetrics) abort(reason string) {
	if s.m != nil {
		s.m.aborted.WithLabelValues(s.Name(), reason).Inc()
	}
}

func (s stageMetrics) rebuild() {
	if s.m != nil {
		s.m.rebuilds.WithLabelValues(s.Name()).Inc()
	}
}

func (s stageMetrics) restored(n int) {
	if s.m != nil {
		s.m.restored.WithLabelValues(s.Name()).Add(float64(n))
	}
}

func (s stageMetrics) restoreBehind(n int64) {
	if s.m != nil {
		s.m.restoreBehind.WithLabelValues(s.Name()).Set(float64(n))
	}
}

func (s stageMetrics) restoreTime(d time.Duration) {
	if s.m != nil {
		s.m.restoreTime.WithLabelValues(s.Name()).Observe(d.Seconds())
	}
}

func (s stageMetrics) stateSize(n int64) {
	if s.m != nil {
		s.m.stateEntries.WithLabelValues(s.Name()).Set(float64(n))
	}
}

// startOldOutputs creates the series of outputs past retention of topic
// at 0.
func (s stageMetrics) startOldOutputs(topic string) {
	if s.m != nil {
		s.m.pastRetention.WithLabelValues(s.Name(), topic)
	}
}

func (s stageMetrics) countPastRetention(topic string, n int64) {
	if s.m != nil {
		s.m.pastRetention.WithLabelValues(s.Name(), topic).Add(float64(n))
	}
}

// inputTransactionOpen sets how long an open transaction has held
// partition p of topic below its high watermark.
func (s stageMetrics) inputTransactionOpen(topic string, p int32, d time.Duration) {
	if s.m != nil {
		s.m.inputTxnOpen.WithLabelValues(s.Name(), topic, promutil.Partition(p)).Set(d.Seconds())
	}
}

// dropPartition deletes every series of partition p of topic.
func (s stageMetrics) dropPartition(topic string, p int32) {
	if s.m != nil {
		s.DropPartition(topic, p, s.m.inputTxnOpen)
	}
}
