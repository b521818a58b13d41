//go:build integration

package pgsink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
)

// BenchmarkSinkVsCopy measures the sink against the floor Postgres sets:
// "sink" loads b.N events (~256-byte JSON, 3 partitions, default commit
// settings) from Kafka into a table (event_id text primary key, body
// jsonb), exactly once; "copy" loads the same rows into a table of the
// same shape with one plain pgx CopyFrom, and nothing else; "sink-upsert"
// is "sink" in upsert mode. All report
// rows/s. The sink's time runs from Run until the last row committed, so
// it includes joining the group and creating the tables, which "copy"'s
// does not; the sinks also report load-rows/s, timed from the first
// record polled, and start-s, the start-up before it. Run with a fixed
// count:
//
//	go test -tags integration -run '^$' -bench BenchmarkSinkVsCopy -benchtime 200000x ./integration/
func BenchmarkSinkVsCopy(b *testing.B) {
	pad := strings.Repeat("x", 256-70)
	value := func(i int) []byte {
		return fmt.Appendf(nil, `{"event_id":"e-%d","n":%d,"pad":%q}`, i, i, pad)
	}
	pool := pgPool(b)
	ctx := context.Background()

	sinkBench := func(mode string) func(b *testing.B) {
		return func(b *testing.B) {
			s := newSinkSpec("sp_bench_" + mode)
			benchInput(b, map[string]int32{s.in: 3, s.dlq: 1}, s.in, func(i int) *kgo.Record {
				return &kgo.Record{Key: fmt.Appendf(nil, "e-%d", i), Value: value(i)}
			})
			sink, err := pgsink.New(pgsink.Config{
				Sink: s.name, InstanceID: "bench", Brokers: []string{brokers(b)},
				Input: s.in, DeadLetter: s.dlq, DSN: pgDSN(b),
				Table: s.table(), PositionsTable: s.positions(), EventID: "event_id",
				Columns: []pgsink.Column{{Name: "event_id", Source: "event_id"}, {Name: "body", Source: "$value"}},
				Mode:    mode,
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.schema}.Sanitize()+" CASCADE") })
			var firstRecord time.Time // when the sink had polled its first record
			started, elapsed := benchRun(b, 2*time.Millisecond, sink.Run, func() bool {
				st := sink.Stats()
				if firstRecord.IsZero() && st.Consumed > 0 {
					firstRecord = time.Now()
				}
				return st.Rows >= int64(b.N)
			})
			if firstRecord.IsZero() {
				firstRecord = started
			}
			loading := elapsed - firstRecord.Sub(started)
			st := sink.Stats()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
			// The same, without the start-up (setup, group join,
			// positions): from the first record polled, as "copy"
			// starts with its rows in hand. Not the headline figure.
			b.ReportMetric(float64(b.N)/loading.Seconds(), "load-rows/s")
			b.ReportMetric(firstRecord.Sub(started).Seconds(), "start-s")
			b.ReportMetric(float64(st.Committed), "txns")
		}
	}
	b.Run("sink", sinkBench("insert"))
	b.Run("sink-upsert", sinkBench("upsert"))

	b.Run("copy", func(b *testing.B) {
		schema := uniqueName("it_bench_copy")
		tbl := pgx.Identifier{schema, "events"}
		for _, q := range []string{
			"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
			"CREATE TABLE " + tbl.Sanitize() + " (event_id text PRIMARY KEY, body jsonb)",
		} {
			if _, err := pool.Exec(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		b.Cleanup(func() { _, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE") })
		rows := make([][]any, b.N)
		for i := range rows {
			rows[i] = []any{fmt.Sprintf("e-%d", i), value(i)}
		}
		b.ResetTimer()
		started := time.Now()
		n, err := pool.CopyFrom(ctx, tbl, []string{"event_id", "body"}, pgx.CopyFromRows(rows))
		elapsed := time.Since(started)
		b.StopTimer()
		if err != nil || n != int64(b.N) {
			b.Fatalf("copy: %d rows, %v", n, err)
		}
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
	})
}
