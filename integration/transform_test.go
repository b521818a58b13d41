//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// TestTransformChainCrashCheck runs a stage that filters out half of the
// orders, explodes each order's items, re-keys by customer and routes by
// region to three topics, crashes it before a commit and restarts it. Each
// output topic must then hold exactly the items computed here, each once.
func TestTransformChainCrashCheck(t *testing.T) {
	const orders, poison = 3000, 5
	in, dlq := uniqueName("orders"), uniqueName("dlq")
	eu, us, other := uniqueName("items_eu"), uniqueName("items_us"), uniqueName("items_other")
	stage := uniqueName("explode")
	topo := stagesTopology{topics: []string{eu, us}, stages: []stageYAML{{
		name: stage, in: in, out: other, dlq: dlq, interval: "100ms", maxRecords: 300,
		transform: fmt.Sprintf(`
- filter: 'value.amount >= 100'
- name: items
  explode: >-
    value.items.map(it, {"event_id": value.event_id + "/" + it.sku, "order_id": value.event_id,
    "customer_id": value.customer_id, "region": value.region, "sku": it.sku, "qty": it.qty})
- key: 'value.customer_id'
- headers: { order: 'value.order_id' }
- route:
    - { when: 'value.region == "eu"', topic: %s }
    - { when: 'value.region == "us"', topic: %s }
    - { topic: %s }`, eu, us, other),
	}}}.write(t)
	exactlyCmd(t, "validate", topo)
	exactlyCmd(t, "topics", "create", topo)

	regions := []string{"eu", "us", "apac"}
	want := map[string]map[string]string{eu: {}, us: {}, other: {}} // topic -> item event ID -> customer
	var lines [][]byte
	for i := range orders {
		var items []string
		for j := range 1 + i%3 {
			items = append(items, fmt.Sprintf(`{"sku":"s%d-%d","qty":%d}`, i, j, j+1))
		}
		region, amount, cust := regions[i%3], i%200, fmt.Sprintf("c-%d", i%50)
		lines = append(lines, fmt.Appendf(nil, `o-%d|{"event_id":"o-%d","customer_id":%q,"region":%q,"amount":%d,"items":[%s]}`,
			i, i, cust, region, amount, strings.Join(items, ",")))
		if amount >= 100 {
			topic := map[string]string{"eu": eu, "us": us, "apac": other}[region]
			for j := range 1 + i%3 {
				want[topic][fmt.Sprintf("o-%d/s%d-%d", i, i, j)] = cust
			}
		}
		if i%(orders/poison) == 0 {
			lines = append(lines, fmt.Appendf(nil, `p-%d|{"event_id":"p-%d","customer_id":"c","region":"eu","amount":150,"items":"oops"}`, i, i))
		}
	}
	kcatProduce(t, in, lines)

	crashing := start(t, []string{failpointEnv + "=" + crashBeforeCommit + "@3"}, "run", "--topology", topo, "--instance-id", "it-1")
	_ = crashing.wait(2 * time.Minute)
	if !crashing.killedBySIGKILL() {
		t.Fatalf("want a SIGKILL at the failpoint, got %v", crashing.cmd.ProcessState)
	}
	total := len(want[eu]) + len(want[us]) + len(want[other])
	count := func() int { return kcatCount(t, eu) + kcatCount(t, us) + kcatCount(t, other) }
	if n := count(); n >= total {
		t.Fatalf("all %d items were out before the crash: nothing was tested", n)
	}
	restarted := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	eventually(t, 2*time.Minute, func() bool { return count() >= total && kcatCount(t, dlq) >= poison },
		func() string {
			return fmt.Sprintf("%d of %d items, %d of %d dead letters", count(), total, kcatCount(t, dlq), poison)
		})
	restarted.stop()

	for _, topic := range []string{eu, us, other} {
		seen := map[string]int{}
		for _, r := range kcatRead(t, topic) {
			var v struct {
				EventID    string `json:"event_id"`
				OrderID    string `json:"order_id"`
				CustomerID string `json:"customer_id"`
			}
			if err := json.Unmarshal([]byte(r.Value), &v); err != nil {
				t.Fatalf("%s: output %q is not JSON: %v", topic, r.Value, err)
			}
			seen[v.EventID]++
			if r.Key != v.CustomerID || r.Key != want[topic][v.EventID] {
				t.Errorf("%s: item %s keyed %q, want customer %q", topic, v.EventID, r.Key, want[topic][v.EventID])
			}
			if r.Headers["order"] != v.OrderID {
				t.Errorf("%s: item %s has order header %q, want %q", topic, v.EventID, r.Headers["order"], v.OrderID)
			}
		}
		var extra, dup, missing []string
		for id, c := range seen {
			if _, ok := want[topic][id]; !ok {
				extra = append(extra, id)
			}
			if c > 1 {
				dup = append(dup, id)
			}
		}
		for id := range want[topic] {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		slices.Sort(extra)
		slices.Sort(dup)
		slices.Sort(missing)
		if len(extra)+len(dup)+len(missing) > 0 {
			t.Errorf("%s: %d unexpected items %.5v, %d duplicated %.5v, %d missing %.5v",
				topic, len(extra), extra, len(dup), dup, len(missing), missing)
		}
	}
	dls := kcatRead(t, dlq)
	if len(dls) != poison {
		t.Fatalf("%d dead letters, want %d", len(dls), poison)
	}
	for _, r := range dls {
		if r.Headers[deadletter.HeaderReason] != deadletter.ReasonTransform || r.Headers[deadletter.HeaderStep] != "items" {
			t.Errorf("dead letter %s: reason %q step %q, want transform and items", r.Key, r.Headers[deadletter.HeaderReason], r.Headers[deadletter.HeaderStep])
		}
	}
	t.Logf("%d orders in, %d items out across 3 topics, %d dead letters", orders+poison, total, len(dls))
}
