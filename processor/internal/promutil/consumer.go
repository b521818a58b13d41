package promutil

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Consumer are the collectors that the stage and the sink both keep, each
// under its subsystem, by the same names and labels:
// exactly_<subsystem>_ready, _retries_total (cause), _rebalances_total,
// _topic_recreations_total (topic, reason), _consumer_lag_records and
// _consumer_lag_age_seconds (topic, partition), and _broker_silence_seconds.
type Consumer struct {
	ready       *Ready
	retries     *prometheus.CounterVec
	rebalances  *prometheus.CounterVec
	recreations *prometheus.CounterVec
	lag         *prometheus.GaugeVec
	lagAge      *Age
	silence     *Since
}

// ConsumerHelp are the subsystem's help texts of its Consumer collectors.
type ConsumerHelp struct {
	Ready, Retries, Rebalances, Recreations, Lag, LagAge, BrokerSilence string
}

// Consumer returns the subsystem's Consumer collectors.
func (f *Factory) Consumer(help ConsumerHelp) *Consumer {
	return &Consumer{
		ready:       f.Ready(help.Ready),
		retries:     f.Counter("retries_total", help.Retries, "cause"),
		rebalances:  f.Counter("rebalances_total", help.Rebalances),
		recreations: f.Counter("topic_recreations_total", help.Recreations, "topic", "reason"),
		lag:         f.Gauge("consumer_lag_records", help.Lag, "topic", "partition"),
		lagAge:      f.Age("consumer_lag_age_seconds", help.LagAge, "topic", "partition"),
		silence:     f.Since("broker_silence_seconds", help.BrokerSilence),
	}
}

// Owner returns c bound to owner, a stage's or a sink's name. A nil c
// (no metrics) gives an Owned that records nothing, as does the zero
// Owned.
func (c *Consumer) Owner(owner string) Owned { return Owned{c: c, owner: owner} }

// Bind returns owner's Owned of a subsystem's metrics m, whose Consumer
// collectors consumer returns. With no metrics (a nil m) the Owned records
// nothing but still names its owner, so that a stage or a sink keeps its
// name in one place either way.
func Bind[M any](m *M, owner string, consumer func(*M) *Consumer) Owned {
	if m == nil {
		return Owned{owner: owner}
	}
	return consumer(m).Owner(owner)
}

// Owned is a Consumer bound to one owner's label.
type Owned struct {
	c     *Consumer
	owner string
}

// Name is the owner's name, the first label of its series.
func (o Owned) Name() string { return o.owner }

// Start makes the owner's ready series report ready() and creates its
// series of rare events at 0: rebalances, the recreations of input by each
// of reasons, and the retries by each of causes. A series that first
// appears at 1 hides that increase from rate() and increase(), and a
// dashboard panel or alert shows no data instead of 0 (Prometheus's
// instrumentation guide, "Avoid missing metrics").
func (o Owned) Start(input string, ready func() error, reasons, causes []string) {
	if o.c == nil {
		return
	}
	o.c.ready.Set(o.owner, ready)
	o.c.rebalances.WithLabelValues(o.owner)
	for _, r := range reasons {
		o.c.recreations.WithLabelValues(o.owner, input, r)
	}
	for _, c := range causes {
		o.c.retries.WithLabelValues(o.owner, c)
	}
}

// WatchBrokers makes the owner's broker silence series report the
// seconds since lastAnswer(), when a Kafka broker last answered it.
func (o Owned) WatchBrokers(lastAnswer func() time.Time) {
	if o.c != nil {
		o.c.silence.Set(o.owner, lastAnswer)
	}
}

// StartCounters creates the owner's series of each of counters, which are
// labelled by the owner alone, at 0, for the reason Start gives. It is
// for the subsystem's own counters of rare events.
func (o Owned) StartCounters(counters ...*prometheus.CounterVec) {
	for _, c := range counters {
		c.WithLabelValues(o.owner)
	}
}

// Retry counts one retry, by cause.
func (o Owned) Retry(cause string) {
	if o.c != nil {
		o.c.retries.WithLabelValues(o.owner, cause).Inc()
	}
}

// Rebalance counts one partition assignment or revocation.
func (o Owned) Rebalance() {
	if o.c != nil {
		o.c.rebalances.WithLabelValues(o.owner).Inc()
	}
}

// Recreated counts one partition of topic whose stored position was not
// resumed, by reason.
func (o Owned) Recreated(topic, reason string) {
	if o.c != nil {
		o.c.recreations.WithLabelValues(o.owner, topic, reason).Inc()
	}
}

// SetLag sets the lag series of a partition to records, 0 when records
// is negative (a position briefly ahead of a stale end offset), counted
// against end offsets read at endsAt: the lag's age series is measured
// from there.
func (o Owned) SetLag(topic string, partition int32, records int64, endsAt time.Time) {
	if o.c != nil {
		o.c.lag.WithLabelValues(o.owner, topic, Partition(partition)).Set(float64(max(records, 0)))
		o.c.lagAge.Set(endsAt, o.owner, topic, Partition(partition))
	}
}

// DropPartition deletes the owner's series of a partition from the lag
// and lag age gauges and from each of gauges (labelled owner, topic, partition), for a
// partition the owner no longer holds.
func (o Owned) DropPartition(topic string, partition int32, gauges ...*prometheus.GaugeVec) {
	if o.c == nil {
		return
	}
	for _, g := range append([]*prometheus.GaugeVec{o.c.lag}, gauges...) {
		g.DeleteLabelValues(o.owner, topic, Partition(partition))
	}
	o.c.lagAge.Delete(o.owner, topic, Partition(partition))
}
