package reader

import (
	"time"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"

	"github.com/exactly-io/exactly/topology"
)

// Reader points at the settings that a stage's Config and a sink's Config
// both have: the Kafka client and group that read the input, and how long
// and how large a transaction or batch grows.
type Reader struct {
	Brokers                                        []string
	ClientID, InputFormat                          *string
	CommitInterval, SessionTimeout, MetadataMaxAge *time.Duration
	MaxRecords                                     *int
	// FetchMaxBytes and MaxPartitionFetchBytes size the consumer's
	// fetches (FetchOpts).
	FetchMaxBytes, MaxPartitionFetchBytes *int32
}

// Defaults applies topology's defaults to the settings left zero: those of
// every reader, and the role's (topology.StageDefaults, SinkDefaults).
func (r Reader) Defaults(role topology.ReaderDefaults) {
	OrDefault(r.ClientID, topology.DefaultClientID)
	OrDefault(r.InputFormat, topology.DefaultFormat)
	OrDefault(r.CommitInterval, role.CommitInterval)
	OrDefault(r.MaxRecords, role.CommitMaxRecords)
	OrDefault(r.SessionTimeout, role.SessionTimeout)
	OrDefault(r.MetadataMaxAge, topology.DefaultMetadataMaxAge)
	OrDefault(r.FetchMaxBytes, role.FetchMaxBytes)
	OrDefault(r.MaxPartitionFetchBytes, min(topology.DefaultMaxPartitionFetchBytes, *r.FetchMaxBytes))
}

// Check returns a *ConfigError for each problem of the settings: no
// brokers, a negative limit, fetch sizes out of their bounds.
func (r Reader) Check() []error {
	var errs []error
	if len(r.Brokers) == 0 {
		errs = append(errs, fault.NewConfigError("brokers are required"))
	}
	if *r.CommitInterval < 0 || *r.MaxRecords < 0 || *r.SessionTimeout < 0 || *r.MetadataMaxAge < 0 {
		errs = append(errs, fault.NewConfigError("commit interval, max records, session timeout and metadata max age must be positive"))
	}
	if err := kafkaconn.CheckFetchSizes(*r.FetchMaxBytes, *r.MaxPartitionFetchBytes); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Field is a named setting, for Required.
type Field struct{ Name, Value string }

// Required returns a *ConfigError "<name> is required" for each field
// whose value is empty, in order.
func Required(fields []Field) []error {
	var errs []error
	for _, f := range fields {
		if f.Value == "" {
			errs = append(errs, fault.NewConfigError("%s is required", f.Name))
		}
	}
	return errs
}
