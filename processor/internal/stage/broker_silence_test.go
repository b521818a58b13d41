package stage

import (
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
)

// A stage that has no partition, and no broker answering, has one broker
// silence series from its start, counting from it: the series an alert
// reads for an instance started while its brokers are unreachable, which
// never gets a lag series.
func TestBrokerSilenceSeriesFromStart(t *testing.T) {
	reg, m := promtest.Registered(t, NewMetrics)
	before := time.Now()
	if _, err := New(Config{Stage: "cut", InstanceID: "a", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq"},
		WithMetrics(m)); err != nil {
		t.Fatal(err)
	}
	if n := len(promtest.Family(t, reg, "exactly_stage_consumer_lag_records")); n != 0 {
		t.Fatalf("%d lag series before any assignment, want 0", n)
	}
	time.Sleep(20 * time.Millisecond) // the silence grows from the start
	got := promtest.Family(t, reg, "exactly_stage_broker_silence_seconds")
	if len(got) != 1 {
		t.Fatalf("%d broker silence series, want 1", len(got))
	}
	v := got[0].GetGauge().GetValue()
	if lo, hi := 0.02, time.Since(before).Seconds(); v < lo || v > hi {
		t.Errorf("broker silence %v s, want between %v and %v (since the start)", v, lo, hi)
	}
}
