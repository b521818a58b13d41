package kafkaconn

import (
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
)

// FetchOpts sizes a consumer's fetches: at most maxBytes from one broker
// (fetch.max.bytes), at most partitionBytes of it from one partition
// (max.partition.fetch.bytes); 0 keeps franz-go's default (50 MiB, 1
// MiB). franz-go holds a fetch from each broker until it is polled while
// the next one is under way, so these, not the records a poll takes, bound
// the memory of the input. A record batch larger than either still comes
// whole (KIP-74): a consumer never stalls on one.
func FetchOpts(maxBytes, partitionBytes int32) []kgo.Opt {
	var opts []kgo.Opt
	if maxBytes > 0 {
		opts = append(opts, kgo.FetchMaxBytes(maxBytes))
	}
	if partitionBytes > 0 {
		opts = append(opts, kgo.FetchMaxPartitionBytes(partitionBytes))
	}
	return opts
}

// CheckFetchSizes reports fetch sizes that FetchOpts would pass to a
// client that refuses or silently clamps them (a *ConfigError): the
// topology spec's bounds of role's settings (role is the file's list,
// "stages" or "sinks"), for a Config built by hand.
func CheckFetchSizes(role string, maxBytes, partitionBytes int32) error {
	lo, hi := topology.Bounds[int32](role + "[].fetch_max_bytes")
	if maxBytes < lo || maxBytes > hi {
		return fault.NewConfigError("fetch max bytes %d must be between %d and %d", maxBytes, lo, hi)
	}
	lo, _ = topology.Bounds[int32](role + "[].max_partition_fetch_bytes")
	if partitionBytes < lo || partitionBytes > maxBytes {
		return fault.NewConfigError("max partition fetch bytes %d must be between %d and the fetch max bytes %d", partitionBytes, lo, maxBytes)
	}
	return nil
}
