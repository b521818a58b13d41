//go:build integration

package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/processor/internal/health"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/topology"
)

// ksSetting is one Kafka Streams client property of the matched rows, and
// the franz-go option of exactly's stage that it copies.
type ksSetting struct {
	key, value, from string
}

// matchedSettings are the Kafka Streams properties that give its producer
// and consumer the batch, linger, compression and fetch sizes of exactly's
// stage client. They are read from the options the stage starts its
// client with (kafkaconn.GroupConsumerOpts and kafkaconn.FetchOpts of the default
// fetch sizes, franz-go's defaults underneath), so the matched rows follow
// the stage when those change. The stage's max_buffered_bytes has no
// match: Java's buffer.memory is a pool of batch.size buffers, and 2 MiB
// of it would hold two 1 MB batches, not 2 MiB of records.
func matchedSettings() ([]ksSetting, error) {
	opts := kafkaconn.GroupConsumerOpts([]string{"127.0.0.1:1"}, "bench", group.RoleStage, "bench", "bench", "bench",
		slog.New(slog.DiscardHandler), health.NewBrokerHealth(), nil)
	opts = append(opts, kafkaconn.FetchOpts(topology.Default[int32]("stages[].fetch_max_bytes"), topology.Default[int32]("stages[].max_partition_fetch_bytes"))...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("the stage's client options: %w", err)
	}
	defer cl.Close()
	codecs := cl.OptValue(kgo.ProducerBatchCompression).([]kgo.CompressionCodec)
	compression := "none"
	if len(codecs) > 0 {
		compression = codecName(codecs[0])
	}
	ms := func(d any) string { return fmt.Sprint(d.(time.Duration).Milliseconds()) }
	return []ksSetting{
		{"producer.batch.size", fmt.Sprint(cl.OptValue(kgo.ProducerBatchMaxBytes)), "ProducerBatchMaxBytes"},
		{"producer.linger.ms", ms(cl.OptValue(kgo.ProducerLinger)), "ProducerLinger"},
		{"producer.compression.type", compression, "ProducerBatchCompression"},
		{"consumer.fetch.max.bytes", fmt.Sprint(cl.OptValue(kgo.FetchMaxBytes)), "FetchMaxBytes"},
		{"consumer.max.partition.fetch.bytes", fmt.Sprint(cl.OptValue(kgo.FetchMaxPartitionBytes)), "FetchMaxPartitionBytes"},
		{"consumer.fetch.min.bytes", fmt.Sprint(cl.OptValue(kgo.FetchMinBytes)), "FetchMinBytes"},
		{"consumer.fetch.max.wait.ms", ms(cl.OptValue(kgo.FetchMaxWait)), "FetchMaxWait"},
		// The stage polls up to commit.max_records at a time.
		{"consumer.max.poll.records", fmt.Sprint(commitMaxRecords), "commit.max_records"},
	}, nil
}

func codecName(c kgo.CompressionCodec) string {
	for name, want := range map[string]kgo.CompressionCodec{
		"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
	} {
		if c == want {
			return name
		}
	}
	return "none"
}

// ksArgs are the Peer's KEY=VALUE arguments; ksNote names them.
func ksArgs(ss []ksSetting) []string {
	var args []string
	for _, s := range ss {
		args = append(args, s.key+"="+s.value)
	}
	return args
}

// ksNote describes a Kafka Streams case's client settings for its note:
// ss (the matched rows), or defaults, the words for Kafka Streams' own,
// when ss is nil.
func ksNote(ss []ksSetting, defaults string) string {
	if ss == nil {
		return defaults
	}
	var parts []string
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("%s=%s", strings.TrimPrefix(strings.TrimPrefix(s.key, "producer."), "consumer."), s.value))
	}
	return "matched to exactly's stage client: " + strings.Join(parts, " ")
}

// ksRunName names a Kafka Streams run of mode in round: ks_<mode>_r<round>,
// or ks_<mode>_m_r<round> for a run with settings (the matched rows).
func ksRunName(mode string, round int, ss []ksSetting) string {
	if ss != nil {
		return fmt.Sprintf("ks_%s_m_r%d", mode, round)
	}
	return fmt.Sprintf("ks_%s_r%d", mode, round)
}
