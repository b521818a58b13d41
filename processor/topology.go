package processor

import "github.com/exactly-io/exactly/topology"

// StageConfig returns the Config of stage st of topology f for the instance
// instanceID.
func StageConfig(f *topology.File, st *topology.Stage, instanceID string) Config {
	return Config{
		Stage:              st.Name,
		InstanceID:         instanceID,
		Brokers:            f.Kafka.Brokers,
		ClientID:           f.Kafka.ClientID,
		Input:              st.Input.Topic,
		Output:             st.Output.Topic,
		DeadLetter:         st.DeadLetter.Topic,
		InputFormat:        st.Input.Format,
		OutputFormat:       st.Output.Format,
		KeyField:           st.Key,
		CommitInterval:     st.Commit.Interval.Duration,
		MaxRecords:         st.Commit.MaxRecords,
		TransactionTimeout: f.Kafka.TransactionTimeout.Duration,
	}
}
