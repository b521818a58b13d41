// Package opstest is for the tests and harnesses of several packages (the
// CLI's tests, the integration tests, integration/bench and statebench)
// that run an exactly process with its ops endpoint: an address to serve
// it on, and what its /readyz and /metrics answer.
package opstest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// Addr returns a loopback address (127.0.0.1:port) whose port is free
// now; another process may take it before the caller listens on it.
func Addr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// FreeAddr is Addr for a test: it fails t when no port is free.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// VMStatus is procfs's reading of /proc/PID/status: VmHWM (the peak
// resident set) and VmRSS in bytes among it; zero once pid has exited.
func VMStatus(pid int) procfs.ProcStatus {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}
	}
	st, _ := p.NewStatus()
	return st
}

// Get returns the status code and body of url, or 0 and the error's text
// when it cannot be read (the process is not listening yet).
func Get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Samples is one scrape of a /metrics endpoint: each sample's value by
// its series text, the metric name and then its labels sorted by name,
// e.g. `exactly_stage_records_produced_total{stage="s", topic="t"}`. A
// histogram or summary gives its _bucket (or quantile), _sum and _count
// series, as the Prometheus server would store them.
type Samples map[string]float64

// Scrape reads url, a Prometheus text exposition (format 0.0.4), with
// the Prometheus client library's own parser (prometheus/common/expfmt).
// It fails on a transport error, a status other than 200, or a line the
// parser refuses.
func Scrape(ctx context.Context, url string) (Samples, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	list := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		list = append(list, f)
	}
	vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, list...)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	out := make(Samples, len(vec))
	for _, s := range vec {
		out[s.Metric.String()] = float64(s.Value)
	}
	return out, nil
}

// Sum adds the samples of metric name whose labels include every one of
// want (nil: all of name's series), and returns how many series matched.
func (m Samples) Sum(name string, want map[string]string) (float64, int) {
	total, n := 0.0, 0
	for series, v := range m {
		metric, labels, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		if hasLabels(labels, want) {
			total += v
			n++
		}
	}
	return total, n
}

// ByLabel adds the samples of metric name by the value of its label key:
// for exactly_stage_transaction_triggers_total and "trigger", the count
// of each trigger.
func (m Samples) ByLabel(name, key string) map[string]float64 {
	out := map[string]float64{}
	for series, v := range m {
		metric, labels, _ := strings.Cut(series, "{")
		if metric != name {
			continue
		}
		if _, rest, ok := strings.Cut(" "+labels, " "+key+`="`); ok {
			val, _, _ := strings.Cut(rest, `"`)
			out[val] += v
		}
	}
	return out
}

// hasLabels reports whether labels, the text of a series between its
// braces (`a="x", b="y"}`), holds each label of want with its value.
func hasLabels(labels string, want map[string]string) bool {
	for k, v := range want {
		if !strings.Contains(" "+labels, fmt.Sprintf(" %s=%q", k, v)) {
			return false
		}
	}
	return true
}
