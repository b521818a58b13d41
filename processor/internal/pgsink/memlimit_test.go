package pgsink

import (
	"log/slog"
	"slices"
	"testing"
)

func TestMemoryLimitRisesWithLargestBatch(t *testing.T) {
	var set []int64
	s := &Sink{cfg: Config{FetchMaxBytes: 4 << 20}, log: slog.New(slog.DiscardHandler)}
	s.growMemoryLimit(&batch{bytes: 1 << 20}) // no limit asked: nothing set
	WithMemoryLimit(func(n int64) { set = append(set, n) })(s)
	s.startMemoryLimit()
	const mib = 1 << 20
	for _, b := range []*batch{
		{records: 10000, bytes: 10000 * 1024}, // raises
		{records: 100, bytes: 100 * 1024},     // smaller: kept
		{records: 10000, bytes: 10000 * 2048}, // raises
	} {
		s.growMemoryLimit(b)
	}
	want := []int64{
		40 * mib,
		40*mib + 10000*(1024+memRecordOverhead),
		40*mib + 10000*(2048+memRecordOverhead),
	}
	if !slices.Equal(set, want) {
		t.Fatalf("limits set %v, want %v", set, want)
	}
}
