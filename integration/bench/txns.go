//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	st := txnStats{Triggers: map[string]float64{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		series, labels, _ := strings.Cut(name, "{")
		switch series {
		case "exactly_stage_transaction_commit_duration_seconds_count":
			st.Committed += v
		case "exactly_stage_transaction_commit_duration_seconds_sum":
			st.EndSeconds += v
		case "exactly_stage_transaction_triggers_total":
			if _, t, ok := strings.Cut(labels, `trigger="`); ok {
				t, _, _ = strings.Cut(t, `"`)
				st.Triggers[t] += v
			}
		}
	}
	return st, sc.Err()
}

// freeAddr is a free 127.0.0.1 port's address.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
