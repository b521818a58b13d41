package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestDemoIsExactlyOnce(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), &out, Options{Events: 2000, DedupeEvents: 500})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !sum.ExactlyOnce() || sum.Out != 2000 || sum.DeadLettered != sum.Malformed || sum.Malformed == 0 {
		t.Fatalf("summary %+v", sum)
	}
	if !strings.Contains(out.String(), "crashed at crash-before-commit@3") {
		t.Fatalf("the demo did not crash the stage:\n%s", out.String())
	}
	// 500 distinct events, every fifth resent: 100 dropped once each.
	if sum.Distinct != 500 || sum.Resent != 100 || sum.DedupeOut != 500 || sum.Deduplicated != 100 {
		t.Fatalf("dedupe phase: %+v, want 500 out and 100 deduplicated", sum)
	}
	if n := strings.Count(out.String(), "crashed at crash-before-commit@3"); n != 2 || !strings.Contains(out.String(), "deduplicated  100") {
		t.Fatalf("the dedupe phase did not crash its stage or print its count:\n%s", out.String())
	}
}

func TestSummaryDetectsFaults(t *testing.T) {
	good := Summary{In: 10, Malformed: 2, Out: 8, DeadLettered: 2}
	if !good.ExactlyOnce() {
		t.Fatal("a clean summary must be exactly once")
	}
	for name, s := range map[string]Summary{
		"duplicate":   {In: 10, Malformed: 2, Out: 9, DeadLettered: 2, Duplicates: 1},
		"missing":     {In: 10, Malformed: 2, Out: 7, DeadLettered: 2, Missing: 1},
		"missing dlq": {In: 10, Malformed: 2, Out: 8, DeadLettered: 1, MissingDLQ: 1},
		"dedupe let a duplicate through": {In: 10, Malformed: 2, Out: 8, DeadLettered: 2,
			Distinct: 5, Resent: 1, DedupeOut: 6, Deduplicated: 0, DedupeDuplicates: 1},
		"dedupe dropped an event": {In: 10, Malformed: 2, Out: 8, DeadLettered: 2,
			Distinct: 5, Resent: 1, DedupeOut: 4, Deduplicated: 2, DedupeMissing: 1},
	} {
		if s.ExactlyOnce() {
			t.Errorf("%s: ExactlyOnce() = true", name)
		}
	}
}
