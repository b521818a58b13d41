package state

import (
	"testing"
	"time"
)

// BenchmarkAggregateUpdate folds one record into a window's accumulator,
// the work Add does per window of every record.
func BenchmarkAggregateUpdate(b *testing.B) {
	for _, bc := range []struct {
		name   string
		kinds  []string
		values func(i int) []any
	}{
		{"count", []string{"count"}, func(int) []any { return nil }},
		{"sum int", []string{"sum"}, func(i int) []any { return []any{int64(i % 1000)} }},
		{"sum double", []string{"sum"}, func(i int) []any { return []any{float64(i%1000) / 4} }},
		{"avg", []string{"avg"}, func(i int) []any { return []any{int64(i % 1000)} }},
		{"min max", []string{"min", "max"}, func(i int) []any { return []any{int64(i % 1000), int64(i % 1000)} }},
		{"first last", []string{"first", "last"}, func(i int) []any { return []any{"a", "b"} }},
		{"all", []string{"count", "sum", "min", "max", "avg", "first", "last"}, func(i int) []any {
			v := int64(i % 1000)
			return []any{nil, v, v, v, v, "a", "b"}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			a := &Aggregate{cfg: AggregateConfig{Size: time.Minute, Advance: time.Minute, Kinds: bc.kinds}, kinds: aggKindsOf(bc.kinds)}
			vals := make([][]any, 1024)
			for i := range vals {
				vals[i] = bc.values(i)
			}
			ac := &acc{A: make([]aggAcc, len(bc.kinds))}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// A window of 1024 records, so that a sum's size does not
				// grow with b.N.
				if i%len(vals) == 0 {
					ac.C, ac.T = 0, 0
					clear(ac.A)
				}
				if err := a.update(ac, "", int64(i), vals[i%len(vals)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
