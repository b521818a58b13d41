// Package audit reads topics back the way a downstream consumer does, with
// isolation.level=read_committed, to check what a stage committed.
package audit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// MarkerHeader is the header key of the marker records that Drain writes.
const MarkerHeader = "exactly.audit.marker"

// Drain returns every committed record of topic, in partition order.
//
// It first appends one marker record, outside any transaction, to each
// partition, then reads from the start with read_committed until it has
// read every partition's marker. A read_committed reader cannot pass an
// open transaction (it stops at the last stable offset), so Drain returning
// proves that no transaction written before it was left open, the check
// Kafka Streams' EOS system test makes. Markers are not returned; they stay
// in the topic, carrying MarkerHeader, and readers that count records should
// skip them.
//
// seeds are the bootstrap brokers; opts are added to the clients Drain
// builds. Drain returns ctx's error if the markers are not all read in time.
func Drain(ctx context.Context, seeds []string, topic string, opts ...kgo.Opt) ([]*kgo.Record, error) {
	base := append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)
	prod, err := kgo.NewClient(append(base, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, fmt.Errorf("drain %s: %w", topic, err)
	}
	defer prod.Close()
	topics, err := kadm.NewClient(prod).ListTopics(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("drain %s: list topic: %w", topic, err)
	}
	td, ok := topics[topic]
	if !ok || td.Err != nil {
		return nil, fmt.Errorf("drain %s: topic not found: %v", topic, td.Err)
	}
	parts := td.Partitions.Numbers()
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	id := hex.EncodeToString(nonce) // tells this drain's markers from forwarded ones
	for _, p := range parts {
		rec := &kgo.Record{Topic: topic, Partition: p, Headers: []kgo.RecordHeader{{Key: MarkerHeader, Value: []byte(id)}}}
		if err := prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return nil, fmt.Errorf("drain %s: write marker to partition %d: %w", topic, p, err)
		}
	}

	cons, err := kgo.NewClient(append(base,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)...)
	if err != nil {
		return nil, fmt.Errorf("drain %s: %w", topic, err)
	}
	defer cons.Close()
	var out []*kgo.Record
	seen := map[int32]bool{}
	for len(seen) < len(parts) {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("drain %s: read %d of %d markers: %w", topic, len(seen), len(parts), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if IsMarker(r) {
				if v, _ := Header(r, MarkerHeader); v == id {
					seen[r.Partition] = true
				}
				return
			}
			out = append(out, r)
		})
	}
	return out, nil
}

// IsMarker reports whether r is a marker that a Drain wrote: no key, no
// value, and a MarkerHeader header. Stages forward markers to their output
// topic unchanged, and Drain does not return them.
func IsMarker(r *kgo.Record) bool {
	if r.Key != nil || r.Value != nil {
		return false
	}
	for _, h := range r.Headers {
		if h.Key == MarkerHeader {
			return true
		}
	}
	return false
}

// Header returns the value of the last header named key, and whether there
// was one.
func Header(r *kgo.Record, key string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == key {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}
