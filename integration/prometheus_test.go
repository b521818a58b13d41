//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/deploy"
	"github.com/exactly-io/exactly/integration/syncbuf"
)

// promAPI is a Prometheus HTTP API answer.
type promAPI struct {
	Status string          `json:"status"`
	Error  string          `json:"error"`
	Data   json.RawMessage `json:"data"`
}

func promGet(t testing.TB, base, path string, q url.Values) (json.RawMessage, error) {
	t.Helper()
	resp, err := http.Get(base + path + "?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var a promAPI
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if a.Status != "success" {
		return nil, fmt.Errorf("%s %v: %s", path, q, a.Error)
	}
	return a.Data, nil
}

// promQuery evaluates expr now and returns how many series it gave.
func promQuery(t testing.TB, base, expr string) (int, error) {
	data, err := promGet(t, base, "/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return 0, err
	}
	var v struct {
		Result []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, err
	}
	return len(v.Result), nil
}

// startPrometheus runs Debian's prometheus on a free loopback port,
// scraping targets every second and evaluating rules every second, and
// returns its base URL.
func startPrometheus(t *testing.T, rules string, targets ...string) string {
	t.Helper()
	bin := tool(t, "prometheus", "deploy/local/up.sh installs it (apt-get install prometheus)")
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [%q]\nscrape_configs:\n  - job_name: exactly\n    static_configs:\n      - targets: [%s]\n",
		rules, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logs := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus logs:\n%s", tail(logs.String(), 40))
		}
	})
	base := "http://" + addr
	eventually(t, 30*time.Second, func() bool {
		code, _ := get(t, base+"/-/ready")
		return code == http.StatusOK
	}, func() string { return "prometheus ready: " + tail(logs.String(), 10) })
	return base
}

// dashboardQueries returns the PromQL of every panel target and template
// variable of the shipped dashboard, with Grafana's variables made plain
// PromQL: $__rate_interval a minute, the selectors of $stage, $sink and
// $job everything. label_values(metric, label) becomes metric.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	dash, err := deploy.LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	plain := strings.NewReplacer("$__rate_interval", "1m", "$stage", ".*", "$sink", ".*", "$job", ".*")
	var out []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			out = append(out, plain.Replace(tg.Expr))
		}
	}
	lv := regexp.MustCompile(`^label_values\(([a-zA-Z_:][a-zA-Z0-9_:]*),\s*([a-zA-Z_]+)\)$`)
	for _, v := range dash.Templating.List {
		if m := lv.FindStringSubmatch(v.Definition); m != nil {
			out = append(out, fmt.Sprintf("count by (%s) (%s)", m[2], m[1]))
		}
	}
	return out
}

// Against a real Prometheus scraping a running stage and sink: every
// query of the Grafana dashboard returns at least one series, the alert
// rules pass promtool and load, each evaluates without error, and
// ExactlySinkNotReady goes pending or firing for a sink whose database
// does not answer.
func TestDashboardAndAlertsOnPrometheus(t *testing.T) {
	promtool := tool(t, "promtool", "deploy/local/up.sh installs it (apt-get install prometheus)")
	rules, err := filepath.Abs("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	// A stage with dead letters.
	in, out, dlq, stage := uniqueName("prom_raw"), uniqueName("prom_clean"), uniqueName("prom_dlq"), uniqueName("prom")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 200)
	exactlyCmd(t, "topics", "create", topo)
	kcatProduce(t, in, crashInput(600, 12))
	stageAddr := freeAddr(t)
	start(t, nil, "run", "--topology", topo, "--instance-id", "prom-1", "--metrics-addr", stageAddr)

	// A sink with dead letters (bad JSON).
	sk := newSinkSpec("prom")
	sinkTopo := sinkTopology(t, sk)
	kcatProduce(t, sk.in, append(events("p", 0, 300), []byte(`bad-1|{"event_id":`), []byte(`bad-2|not json`)))
	sinkAddr := freeAddr(t)
	start(t, nil, "sink", "--topology", sinkTopo, "--instance-id", "prom-1", "--metrics-addr", sinkAddr)

	// A sink whose database never answers: never ready.
	broken := newSinkSpec("promdown")
	brokenTopo := sinkTopology(t, broken)
	brokenAddr := freeAddr(t)
	start(t, []string{"PG_DSN=postgres://nobody@" + freeAddr(t) + "/none?connect_timeout=1"},
		"sink", "--topology", brokenTopo, "--instance-id", "prom-1", "--metrics-addr", brokenAddr)

	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out) >= 600 && kcatCount(t, dlq) >= 12 },
		func() string { return fmt.Sprintf("stage: %d of 600 out", kcatCount(t, out)) })
	pool := pgPool(t)
	waitSinkDone(t, pool, sk, 300, 2*time.Minute)

	prom := startPrometheus(t, rules, stageAddr, sinkAddr, brokenAddr)

	queries := dashboardQueries(t)
	if len(queries) < 30 {
		t.Fatalf("only %d dashboard queries", len(queries))
	}
	empty := func() []string {
		var bad []string
		for _, q := range queries {
			n, err := promQuery(t, prom, q)
			if err != nil || n == 0 {
				bad = append(bad, fmt.Sprintf("%s: %d series, %v", q, n, err))
			}
		}
		return bad
	}
	var missing []string
	eventually(t, time.Minute, func() bool { missing = empty(); return len(missing) == 0 },
		func() string { return "dashboard queries without data:\n  " + strings.Join(missing, "\n  ") })

	// Every alert rule loaded and evaluates without error.
	rf, err := deploy.LoadAlerts()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			want[r.Alert] = r.Expr
			if _, err := promQuery(t, prom, r.Expr); err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
		}
	}
	if len(want) < 9 {
		t.Errorf("only %d alert rules", len(want))
	}
	eventually(t, 30*time.Second, func() bool {
		data, err := promGet(t, prom, "/api/v1/rules", nil)
		if err != nil {
			return false
		}
		var v struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if json.Unmarshal(data, &v) != nil {
			return false
		}
		ok := 0
		for _, g := range v.Groups {
			for _, r := range g.Rules {
				if _, known := want[r.Name]; known && r.Health == "ok" {
					ok++
				}
				if r.LastError != "" {
					t.Errorf("rule %s: %s", r.Name, r.LastError)
				}
			}
		}
		return ok == len(want)
	}, func() string { return "not every rule loaded and evaluated ok" })

	// The not-ready sink trips its alert (pending: its for: is 5m).
	eventually(t, 30*time.Second, func() bool {
		n, err := promQuery(t, prom, fmt.Sprintf(`ALERTS{alertname="ExactlySinkNotReady",sink=%q}`, broken.name))
		return err == nil && n > 0
	}, func() string { return "ExactlySinkNotReady is neither pending nor firing for " + broken.name })
	// And not for the healthy ones.
	for _, q := range []string{
		fmt.Sprintf(`ALERTS{alertname="ExactlySinkNotReady",sink=%q}`, sk.name),
		fmt.Sprintf(`ALERTS{alertname="ExactlyStageNotReady",stage=%q}`, stage),
	} {
		if n, err := promQuery(t, prom, q); err != nil || n != 0 {
			t.Errorf("%s: %d series, %v; want none", q, n, err)
		}
	}
}
