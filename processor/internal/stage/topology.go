package stage

import (
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// StageConfig returns the Config of stage st of topology f for the instance
// instanceID.
func StageConfig(f *topology.File, st *topology.Stage, instanceID string) Config {
	return Config{
		Stage:                  st.Name,
		InstanceID:             instanceID,
		Brokers:                f.Kafka.Brokers,
		ClientID:               f.Kafka.ClientID,
		Input:                  st.Input.Topic,
		Output:                 st.Output.Topic,
		RouteTopics:            st.OutputTopics()[1:],
		DeadLetter:             st.DeadLetter.Topic,
		InputFormat:            st.Input.Format,
		OutputFormat:           st.Output.Format,
		InputCodec:             reader.CodecConfig(f, st.Input),
		OutputCodec:            reader.CodecConfig(f, st.Output),
		KeyField:               st.Key,
		OutputTimestamp:        st.OutputTimestamp,
		Upstream:               upstreamOf(f, st),
		UpstreamIdle:           upstreamIdle(st.UpstreamIdleTimeout),
		CommitInterval:         st.Commit.Interval.Duration,
		MaxRecords:             st.Commit.MaxRecords,
		TransactionTimeout:     f.Kafka.TransactionTimeout.Duration,
		SessionTimeout:         st.SessionTimeout.Duration,
		MetadataMaxAge:         st.MetadataMaxAge.Duration,
		FetchMaxBytes:          st.FetchMaxBytes,
		MaxPartitionFetchBytes: st.MaxPartitionFetchBytes,
		MaxBufferedBytes:       st.MaxBufferedBytes,
		Origin:                 reader.OriginOf(f, topology.ItemPath("stages", f.Stages, st)),
	}
}

// codec completes c with the format and topic of one side of the stage.
func (Config) codec(c serde.Config, format, topic string) serde.Config {
	c.Format, c.Topic = format, topic
	return c
}
