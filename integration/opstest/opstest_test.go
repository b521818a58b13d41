package opstest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Scrape reads what client_golang serves: counters by their labels, a
// histogram as _bucket, _sum and _count; Sum matches whole labels only
// (stage="s" is not xstage="s"), ByLabel groups by one label.
func TestScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "records_total"}, []string{"stage", "xstage", "trigger"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "end_seconds", Buckets: []float64{0.1, 1}}, []string{"stage"})
	reg.MustRegister(c, h)
	c.WithLabelValues("s", "t", "caught_up").Add(3)
	c.WithLabelValues("t", "s", "interval").Add(5)
	c.WithLabelValues("s", "u", "interval").Add(7)
	h.WithLabelValues("s").Observe(0.5)
	h.WithLabelValues("s").Observe(0.25)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	m, err := Scrape(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
		n      int
	}{
		{"records_total", nil, 15, 3},
		{"records_total", map[string]string{"stage": "s"}, 10, 2},
		{"records_total", map[string]string{"xstage": "s"}, 5, 1},
		{"records_total", map[string]string{"stage": "s", "trigger": "interval"}, 7, 1},
		{"records_total", map[string]string{"stage": "none"}, 0, 0},
		{"end_seconds_count", map[string]string{"stage": "s"}, 2, 1},
		{"end_seconds_sum", nil, 0.75, 1},
		{"end_seconds_bucket", map[string]string{"le": "1"}, 2, 1},
		{"end_seconds_bucket", map[string]string{"le": "0.1"}, 0, 1},
	} {
		if got, n := m.Sum(tc.name, tc.labels); got != tc.want || n != tc.n {
			t.Errorf("Sum(%s, %v) = %v over %d series, want %v over %d", tc.name, tc.labels, got, n, tc.want, tc.n)
		}
	}
	by := m.ByLabel("records_total", "trigger")
	if len(by) != 2 || by["caught_up"] != 3 || by["interval"] != 12 {
		t.Errorf("ByLabel(trigger) = %v, want caught_up 3, interval 12", by)
	}
	if by := m.ByLabel("records_total", "stage"); by["s"] != 10 || by["t"] != 5 {
		t.Errorf("ByLabel(stage) = %v, want s 10, t 5 (not xstage's)", by)
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	if _, err := Scrape(t.Context(), down.URL); err == nil {
		t.Error("Scrape of a 503 answer: no error")
	}
}

// Addr's port is free: it can be listened on.
func TestAddr(t *testing.T) {
	a, err := Addr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("listen on Addr() %s: %v", a, err)
	}
	ln.Close()
}
