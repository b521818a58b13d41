package pgsink

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/promutil"
)

// Metrics are the sink's Prometheus collectors, named
// exactly_sink_<name>_<unit>. Build one per registry with NewMetrics and
// share it among the sinks of a process; every series is labelled by sink.
// A nil *Metrics records nothing.
type Metrics struct {
	consumed      *prometheus.CounterVec
	rows          *prometheus.CounterVec
	deleted       *prometheus.CounterVec
	unmatched     *prometheus.CounterVec
	duplicates    *prometheus.CounterVec
	deadLettered  *prometheus.CounterVec
	committed     *prometheus.CounterVec
	fenced        *prometheus.CounterVec
	batchDuration *prometheus.HistogramVec
	batchRecords  *prometheus.HistogramVec
	position      *prometheus.GaugeVec
	lastCommit    *prometheus.GaugeVec
	directCopies  *prometheus.CounterVec
	// consumer holds ready, retries, rebalances, recreations and lag.
	consumer *promutil.Consumer
}

// RetryWrite is the cause label of exactly_sink_retries_total for a batch
// whose database transaction failed. The other causes are named after what
// was retried, spaces made underscores: read_positions, set_up_schema.
const RetryWrite = "write_batch"

// NewMetrics registers the sink metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	f := &promutil.Factory{Subsystem: "sink", Owner: "sink"}
	m := &Metrics{
		consumed:      f.Counter("records_consumed_total", "Data records polled (control records excluded).", "topic"),
		rows:          f.Counter("rows_written_total", "Rows inserted or updated by committed batches."),
		deleted:       f.Counter("rows_deleted_total", "Rows deleted by tombstones or Debezium deletes in committed batches."),
		unmatched:     f.Counter("deletes_unmatched_total", "Deletes (tombstones, Debezium deletes) of committed batches that matched no stored row: a row never loaded, a delete replayed, or keys that do not name the table's rows."),
		duplicates:    f.Counter("rows_duplicate_total", "Rows of committed batches skipped because their event ID was already in the table: a replay, or a second record with one ID."),
		deadLettered:  f.Counter("records_dead_lettered_total", "Dead letters of committed batches, by reason.", "reason"),
		committed:     f.Counter("batches_committed_total", "Database transactions committed."),
		fenced:        f.Counter("batches_fenced_total", "Batches rolled back because another instance moved a stored position (a zombie fenced)."),
		batchDuration: f.Histogram("batch_duration_seconds", "Time from a batch's first record to its database commit.", prometheus.ExponentialBuckets(0.005, 2, 14)),
		batchRecords:  f.Histogram("batch_records", "Records per committed batch, control records included.", prometheus.ExponentialBuckets(1, 4, 10)),
		position:      f.Gauge("position_offset", "The next offset stored in Postgres for the partition, as of this instance's last commit.", "topic", "partition"),
		lastCommit:    f.Gauge("last_commit_timestamp_seconds", "Unix time of the last committed batch; the sink's start until its first."),
		directCopies: f.Counter("direct_copies_total", "Batch loads tried as a COPY straight into the table, by outcome: "+
			"written (the load is done; its transaction may still fail), fell_back (rolled back: a duplicate event ID, a bad row; the batch took the staged load).", "outcome"),
		consumer: f.Consumer(promutil.ConsumerHelp{
			Ready: "1 when the sink is ready, as /readyz answers (partitions assigned, Postgres and Kafka answer, no batch stalled), else 0.",
			Retries: "Database or Kafka operations retried after a transient error, by cause: write_batch, read_positions, set_up_schema, " +
				"check_kafka (the topics and limits at start) or check_consumer_group (the group check before joining).",
			Rebalances: "Partition assignments and revocations.",
			Recreations: "Partitions whose stored position did not fit the input topic at assignment, by reason: " +
				"recreated (another topic ID, or no ID and an offset above the high watermark: read from the first offset), " +
				"truncated (same ID, offset above the high watermark: read from the log start).",
			Lag: "Records between the sink's stored position (the log start when none) and the partition's last stable offset (read_committed end), as `exactly status` counts them; kept current while a batch is retried. " +
				"While the brokers do not answer it keeps its last value: see exactly_sink_consumer_lag_age_seconds.",
			BrokerSilence: "Seconds since a Kafka broker last answered this instance (any request); its start until the first answer. It has a series from the start, with or without partitions, so an alert can tell an instance that started while the brokers were unreachable.",
			LagAge: "Seconds since the end offsets behind exactly_sink_consumer_lag_records were read (by a fetch, or a look while a batch is retried). " +
				"It grows while the sink cannot reach the partition's leader; the lag is then a lower bound.",
		}),
	}
	if err := f.Register(reg); err != nil {
		return nil, err
	}
	return m, nil
}

// WithMetrics records the sink's metrics in m.
func WithMetrics(m *Metrics) Option { return func(s *Sink) { s.metrics.m = m } }

// sinkMetrics are a Metrics bound to one sink's label. The embedded Owned
// names the sink and records what the sink counts as the stage does
// (Retry, Rebalance, Recreated, SetLag).
type sinkMetrics struct {
	promutil.Owned
	m *Metrics
}

// bind labels the sink's series with its name.
func (s *sinkMetrics) bind(sink string) {
	s.Owned = promutil.Bind(s.m, sink, func(m *Metrics) *promutil.Consumer { return m.consumer })
}

// retryCauses are the cause labels of exactly_sink_retries_total: what
// Sink.retry retries, spaces made underscores.
var retryCauses = []string{RetryWrite, "read_positions", "set_up_schema", "check_kafka", "check_consumer_group"}

// deadLetterReasons are the reasons of the sink's dead letters, created
// at 0 with the other series.
var deadLetterReasons = []string{deadletter.ReasonDecode, deadletter.ReasonEventID, deadletter.ReasonPostgres, deadletter.ReasonVersion, deadletter.ReasonEnvelope}

// start creates the sink's series of rare events at 0, as Owned.Start
// does its shared ones.
func (s sinkMetrics) start(input string, ready func() error) {
	if s.m == nil {
		return
	}
	s.Start(input, ready, []string{ReasonRecreated, ReasonTruncated}, retryCauses)
	for _, o := range []string{directWritten, directFellBack} {
		s.m.directCopies.WithLabelValues(s.Name(), o)
	}
	s.StartCounters(s.m.rows, s.m.deleted, s.m.unmatched, s.m.duplicates, s.m.committed, s.m.fenced)
	// What the alert rules read: their rate() and increase() see the
	// first record, and the time since the last commit counts from the
	// start while nothing has committed.
	s.m.consumed.WithLabelValues(s.Name(), input)
	for _, r := range deadLetterReasons {
		s.m.deadLettered.WithLabelValues(s.Name(), r)
	}
	s.m.lastCommit.WithLabelValues(s.Name()).Set(float64(time.Now().UnixNano()) / 1e9)
}

func (s sinkMetrics) consumedRecord(topic string) {
	if s.m != nil {
		s.m.consumed.WithLabelValues(s.Name(), topic).Inc()
	}
}

func (s sinkMetrics) commit(b *batch, res *result, topic string, at time.Time) {
	if s.m == nil {
		return
	}
	s.m.committed.WithLabelValues(s.Name()).Inc()
	s.m.rows.WithLabelValues(s.Name()).Add(float64(res.rows))
	s.m.deleted.WithLabelValues(s.Name()).Add(float64(res.deleted))
	s.m.unmatched.WithLabelValues(s.Name()).Add(float64(res.unmatched))
	s.m.duplicates.WithLabelValues(s.Name()).Add(float64(res.duplicates))
	for _, d := range res.dead {
		s.m.deadLettered.WithLabelValues(s.Name(), d.re.Reason).Inc()
	}
	s.m.batchDuration.WithLabelValues(s.Name()).Observe(at.Sub(b.started).Seconds())
	s.m.batchRecords.WithLabelValues(s.Name()).Observe(float64(b.records))
	for p, n := range b.next {
		s.m.position.WithLabelValues(s.Name(), topic, promutil.Partition(p)).Set(float64(n))
	}
	s.m.lastCommit.WithLabelValues(s.Name()).Set(float64(at.UnixNano()) / 1e9)
}

func (s sinkMetrics) directCopy(outcome string) {
	if s.m != nil {
		s.m.directCopies.WithLabelValues(s.Name(), outcome).Inc()
	}
}

func (s sinkMetrics) fence() {
	if s.m != nil {
		s.m.fenced.WithLabelValues(s.Name()).Inc()
	}
}

// drop forgets the series of a partition this instance no longer owns:
// its lag and its position.
func (s sinkMetrics) drop(topic string, partition int32) {
	if s.m != nil {
		s.DropPartition(topic, partition, s.m.position)
	}
}
