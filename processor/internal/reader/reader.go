package reader

import (
	"time"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"

	"github.com/exactly-io/exactly/topology"
)

// The lists of the topology file that hold a reader's settings: the spec
// paths of its defaults and bounds ("stages[].commit.interval") start
// with them.
const (
	Stages = "stages"
	Sinks  = "sinks"
)

// Reader points at the settings that a stage's Config and a sink's Config
// both have: the Kafka client and group that read the input, and how long
// and how large a transaction or batch grows.
type Reader struct {
	// Role is Stages or Sinks: whose defaults and bounds apply.
	Role                                           string
	Brokers                                        []string
	ClientID, InputFormat                          *string
	CommitInterval, SessionTimeout, MetadataMaxAge *time.Duration
	MaxRecords                                     *int
	// FetchMaxBytes and MaxPartitionFetchBytes size the consumer's
	// fetches (FetchOpts).
	FetchMaxBytes, MaxPartitionFetchBytes *int32
}

// setting is the spec path of the role's setting name.
func (r Reader) setting(name string) string { return r.Role + "[]." + name }

// Defaults applies the topology spec's defaults of r.Role to the settings
// left zero, so that a Config built by hand and one built from a file
// behave the same.
func (r Reader) Defaults() {
	OrDefault(r.ClientID, topology.Default[string]("kafka.client_id"))
	OrDefault(r.InputFormat, topology.Default[string](r.setting("input.format")))
	OrDefault(r.CommitInterval, topology.Default[time.Duration](r.setting("commit.interval")))
	OrDefault(r.MaxRecords, topology.Default[int](r.setting("commit.max_records")))
	OrDefault(r.SessionTimeout, topology.Default[time.Duration](r.setting("session_timeout")))
	OrDefault(r.MetadataMaxAge, topology.Default[time.Duration](r.setting("metadata_max_age")))
	OrDefault(r.FetchMaxBytes, topology.Default[int32](r.setting("fetch_max_bytes")))
	OrDefault(r.MaxPartitionFetchBytes, min(topology.Default[int32](r.setting("max_partition_fetch_bytes")), *r.FetchMaxBytes))
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
	if err := kafkaconn.CheckFetchSizes(r.Role, *r.FetchMaxBytes, *r.MaxPartitionFetchBytes); err != nil {
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
