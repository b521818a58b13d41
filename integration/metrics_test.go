//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/exactly-io/exactly/integration/opstest"
)

// scrape reads addr's /metrics (opstest.Scrape) and returns every sample
// by its series text, e.g.
// `exactly_stage_records_produced_total{stage="s", topic="t"}`.
func scrape(t testing.TB, addr string) map[string]float64 {
	t.Helper()
	m, err := opstest.Scrape(context.Background(), "http://"+addr+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitMetric scrapes addr until the sum of the series of name with labels
// is want, and returns that scrape; it fails the test after timeout.
func waitMetric(t testing.TB, addr, name string, labels map[string]string, want float64, timeout time.Duration) map[string]float64 {
	t.Helper()
	var m map[string]float64
	eventually(t, timeout, func() bool {
		m = scrape(t, addr)
		v, _ := sum(m, name, labels)
		return v == want
	}, func() string {
		v, _ := sum(m, name, labels)
		return fmt.Sprintf("%s %v, want %v", name, v, want)
	})
	return m
}

// sum adds the samples of metric name whose labels include want, and
// returns how many series matched (opstest.Samples.Sum).
func sum(m map[string]float64, name string, want map[string]string) (float64, int) {
	return opstest.Samples(m).Sum(name, want)
}

// freeAddr is opstest.FreeAddr, for the tests that serve an ops endpoint.
var freeAddr = opstest.FreeAddr

// get is opstest.Get.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	return opstest.Get(url)
}

// The counters on /metrics match what was sent, output and dead-lettered;
// lag against the LSO reads 0 once caught up on a transactionally written
// topic; /readyz turns ready.
func TestMetricsMatchTheRun(t *testing.T) {
	const events, bad = 2000, 20
	in, out, dlq, stage := uniqueName("raw"), uniqueName("clean"), uniqueName("dlq"), uniqueName("metrics")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 500)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, in, crashInput(events, bad))

	addr := opstest.FreeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", addr)
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= events && kcatCount(t, dlq) >= bad },
		func() string { return fmt.Sprintf("%d of %d out", kcatCount(t, out), events) })
	waitReady(t, addr, 30*time.Second)

	st := map[string]string{"stage": stage}
	m := waitMetric(t, addr, "exactly_stage_records_produced_total", st, events, 10*time.Second)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
		series int // series that must exist
	}{
		{"exactly_stage_records_consumed_total", map[string]string{"stage": stage, "topic": in}, events + bad, 1},
		{"exactly_stage_records_produced_total", map[string]string{"stage": stage, "topic": out}, events, 1},
		{"exactly_stage_records_dead_lettered_total", map[string]string{"stage": stage, "reason": "decode"}, bad, 1},
		{"exactly_stage_records_filtered_total", st, 0, 1},
		{"exactly_stage_consumer_lag_records", map[string]string{"stage": stage, "topic": in}, 0, 3},
	} {
		got, n := sum(m, c.name, c.labels)
		if got != c.want || n < c.series {
			t.Errorf("%s%v = %v over %d series, want %v over at least %d", c.name, c.labels, got, n, c.want, c.series)
		}
	}
	if n, _ := sum(m, "exactly_stage_transactions_committed_total", st); n < 1 {
		t.Errorf("transactions_committed_total = %v", n)
	}
	if code, body := get(t, "http://"+addr+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d %s", code, body)
	}
	p.stop()
}
