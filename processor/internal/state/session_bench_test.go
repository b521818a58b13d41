package state

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkSessionTxn runs transactions of 500 records over keys with
// open sessions, stream time advancing in each: the per-record cost of
// Add (a key's sessions read) and Finish (every open session read to
// find the closed ones).
func BenchmarkSessionTxn(b *testing.B) {
	for _, keys := range []int{1_000, 20_000} {
		b.Run(fmt.Sprintf("%d keys", keys), func(b *testing.B) {
			cfg := AggregateConfig{Gap: time.Hour, Kinds: []string{"count", "sum"}}
			a := restoredAgg(b, openDB(b), cfg, 0)
			var cl changelog
			var ts int64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += 500 {
				tx := a.Begin(cl.emit)
				for j := i; j < min(i+500, b.N); j++ {
					ts++
					if _, _, err := tx.Add(0, fmt.Appendf(nil, "k-%d", j%keys), ts, []any{nil, int64(j)}); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := tx.Finish(); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(nil); err != nil {
					b.Fatal(err)
				}
				cl.recs = cl.recs[:0]
			}
		})
	}
}
