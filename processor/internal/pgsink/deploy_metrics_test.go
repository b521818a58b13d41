package pgsink_test

// The metric names that deploy/'s dashboard and alert rules use must be
// the ones a stage and a sink export.

import (
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/deploy"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/promutil/promtest"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// exportedMetrics returns every metric name the binary exports: the stage
// and sink collectors plus the Go and process collectors that the CLI
// registers, with a series in each vector so that Gather shows it;
// histograms and summaries are expanded into their _bucket, _sum and
// _count series.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := &promtest.Recorder{}
	sm, err := stage.NewMetrics(rec)
	if err != nil {
		t.Fatal(err)
	}
	km, err := pgsink.NewMetrics(rec)
	if err != nil {
		t.Fatal(err)
	}
	// A stage and a sink, for the series only a live one has (readiness).
	if _, err := stage.New(stage.Config{Stage: "s", InstanceID: "i", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq"},
		stage.WithMetrics(sm)); err != nil {
		t.Fatal(err)
	}
	if _, err := pgsink.New(pgsink.Config{Sink: "k", InstanceID: "i", Brokers: []string{"127.0.0.1:1"}, Input: "in", DeadLetter: "dlq",
		DSN: "postgres://u@127.0.0.1:1/db", Table: "raw.events", EventID: "event_id", Columns: []pgsink.Column{{Name: "event_id", Source: "event_id"}}},
		pgsink.WithMetrics(km)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range rec.Collectors {
		promtest.Touch(t, c)
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[n], names[n+"_sum"], names[n+"_count"] = true, true, true
		default:
			names[n] = true
		}
	}
	for _, want := range []string{"exactly_stage_records_consumed_total", "exactly_sink_rows_written_total", "exactly_sink_batch_duration_seconds_bucket", "exactly_stage_ready", "exactly_sink_ready"} {
		if !names[want] {
			t.Fatalf("gathered names lack %s: %v", want, slices.Sorted(maps.Keys(names)))
		}
	}
	return names
}

var (
	// A metric name in PromQL: an identifier not followed by "(" (a
	// function) and not inside a label matcher or by/without clause.
	labelSets  = regexp.MustCompile(`\{[^}]*\}|\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\[[^\]]*\]|"[^"]*"`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promqlWord = map[string]bool{
		"sum": true, "rate": true, "increase": true, "max": true, "min": true, "avg": true, "count": true,
		"histogram_quantile": true, "time": true, "by": true, "without": true, "and": true, "or": true,
		"unless": true, "offset": true, "irate": true, "delta": true, "topk": true, "bottomk": true,
		"label_values": true, "clamp_min": true, "abs": true, "le": true,
	}
)

// metricNames returns the metric names a PromQL expression reads.
func metricNames(expr string) []string {
	var out []string
	stripped := labelSets.ReplaceAllString(expr, " ")
	for _, loc := range identifier.FindAllStringIndex(stripped, -1) {
		word := stripped[loc[0]:loc[1]]
		rest := strings.TrimLeft(stripped[loc[1]:], " ")
		if promqlWord[word] || strings.HasPrefix(rest, "(") || isNumber(word) {
			continue
		}
		out = append(out, word)
	}
	return out
}

func isNumber(s string) bool { return strings.Trim(s, "0123456789.e") == "" }

func TestGrafanaDashboardUsesExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	dash, err := deploy.LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if m := regexp.MustCompile(`label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*)`).FindStringSubmatch(v.Definition); m != nil {
			exprs = append(exprs, m[1])
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("only %d queries", len(exprs))
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("query names no metric: %s", e)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("query uses %s, which the binary does not export: %s", n, e)
			}
		}
	}
	// Every exactly metric family is on the dashboard somewhere.
	for n := range exported {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(n, "exactly_") && !used[n] && !used[base+"_bucket"] && !used[base+"_sum"] && !used[base] {
			t.Errorf("%s is exported but not on the dashboard", n)
		}
	}
}

func TestMetricNames(t *testing.T) {
	got := metricNames(`histogram_quantile(0.99, sum by (stage, le) (rate(exactly_stage_transaction_duration_seconds_bucket{stage=~"$stage"}[$__rate_interval]))) / time() - up{job="x"}`)
	want := []string{"exactly_stage_transaction_duration_seconds_bucket", "up"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// The alert rules read only metrics the binary exports.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	rf, err := deploy.LoadAlerts()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			names := metricNames(r.Expr)
			if len(names) == 0 {
				t.Errorf("alert %s names no metric: %s", r.Alert, r.Expr)
			}
			for _, m := range names {
				if !exported[m] && m != "up" { // up is Prometheus's own, per target
					t.Errorf("alert %s uses %s, which the binary does not export", r.Alert, m)
				}
			}
		}
	}
	if n < 9 {
		t.Errorf("%d alert rules, want the 9 of lag, readiness, aborts, dead letters and open transactions", n)
	}
}
