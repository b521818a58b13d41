//go:build integration

package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/exactly-io/exactly/integration/opstest"
)

// txnStats is what a stage's /metrics says of its committed transactions:
// how many, how long their ends took in all, and what ended them
// (exactly_stage_transaction_commit_duration_seconds and
// exactly_stage_transaction_triggers_total).
type txnStats struct {
	Committed  float64            `json:"committed"`
	EndSeconds float64            `json:"end_seconds"`
	Triggers   map[string]float64 `json:"triggers"`
}

// since is s less what base had counted.
func (s txnStats) since(base txnStats) txnStats {
	d := txnStats{Committed: s.Committed - base.Committed, EndSeconds: s.EndSeconds - base.EndSeconds, Triggers: map[string]float64{}}
	for k, v := range s.Triggers {
		d.Triggers[k] = v - base.Triggers[k]
	}
	return d
}

// String is e.g. "412 txns, End 11.2 ms mean; caught_up 400, interval 12".
func (s txnStats) String() string {
	if s.Committed == 0 {
		return "0 txns"
	}
	var trig []string
	for _, k := range []string{"caught_up", "interval", "max_records", "isolate", "shutdown"} {
		if v := s.Triggers[k]; v > 0 {
			trig = append(trig, fmt.Sprintf("%s %.0f", k, v))
		}
	}
	return fmt.Sprintf("%.0f txns, End %.1f ms mean; %s", s.Committed, 1000*s.EndSeconds/s.Committed, strings.Join(trig, ", "))
}

// scrapeTxns reads the transaction series from the stage's /metrics at addr.
func scrapeTxns(ctx context.Context, addr string) (txnStats, error) {
	m, err := opstest.Scrape(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return txnStats{Triggers: map[string]float64{}}, err
	}
	st := txnStats{Triggers: m.ByLabel("exactly_stage_transaction_triggers_total", "trigger")}
	st.Committed, _ = m.Sum("exactly_stage_transaction_commit_duration_seconds_count", nil)
	st.EndSeconds, _ = m.Sum("exactly_stage_transaction_commit_duration_seconds_sum", nil)
	return st, nil
}
