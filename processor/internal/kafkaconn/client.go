package kafkaconn

import (
	"log/slog"

	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/health"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientOpts are the options every Kafka client of a stage or a sink
// starts with: its seed brokers and client.id.
func ClientOpts(brokers []string, clientID string) []kgo.Opt {
	// Every record polled carries the timestamp it was written with
	// (ExactTimestamp), also after 2262.
	return []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID(clientID), kgo.WithHooks(exactTimestamps{})}
}

// GroupConsumerOpts are the consumer options that a stage and a sink
// share: instance instanceID of consumer group groupID, reading topic, as
// role (RoleStage or RoleSink: its client.id is RoleClientID(clientID,
// role)). fence watches the group for FENCED_INSTANCE_ID; Attach the
// client to it.
func GroupConsumerOpts(brokers []string, clientID, role, groupID, instanceID, topic string, log *slog.Logger, bh *health.BrokerHealth, fence *group.FenceWatch) []kgo.Opt {
	hooks := []kgo.Hook{bh}
	if fence != nil {
		hooks = append(hooks, fence)
	}
	return append(ClientOpts(brokers, group.RoleClientID(clientID, role)),
		kgo.ConsumerGroup(groupID),
		// Static membership (KIP-345): a restarted instance takes over its
		// predecessor's partitions at once instead of waiting out the
		// session timeout of a member that was killed.
		kgo.InstanceID(instanceID),
		kgo.ConsumeTopics(topic),
		// Only committed records are ever read: an aborted upstream
		// transaction must leave no trace downstream, as output or row.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// A partition with no position yet starts at its first record.
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// Transaction markers are returned as control records, so that a
		// position moves past the last marker: a caught-up consumer then
		// stands at the last stable offset, with lag 0, not the "stuck at
		// 1" of consumers that stop before the marker.
		kgo.KeepControlRecords(),
		kgo.WithLogger(KafkaLogger(log)),
		// Readiness: an idle consumer whose brokers are all gone polls
		// nothing and fails nothing; only silence shows it.
		kgo.WithHooks(hooks...),
	)
}
