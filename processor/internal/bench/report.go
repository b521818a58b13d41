//go:build integration

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

type caseResult struct {
	Name        string  `json:"name"`
	Group       string  `json:"group"` // limit, alos, eos, kstreams, windowed, join, sink
	Records     int64   `json:"records"`
	RecordsPerS float64 `json:"records_per_s"`          // steady state
	WallS       float64 `json:"wall_s,omitempty"`       // process start to the last record committed
	PeakRSSMiB  float64 `json:"peak_rss_mib,omitempty"` // getrusage ru_maxrss of the child
	CPUS        float64 `json:"cpu_s,omitempty"`        // user+system CPU of the child
	Note        string  `json:"note,omitempty"`
	Error       string  `json:"error,omitempty"`
	// Samples are the rates of the rounds (-repeat); RecordsPerS, WallS and
	// CPUS are then their medians, PeakRSSMiB the largest.
	Samples []float64 `json:"samples,omitempty"`
	walls   []float64
	cpus    []float64
}

func (c caseResult) mbPerS() float64 { return c.RecordsPerS * recordSize / (1 << 20) }

type machine struct {
	CPU      string  `json:"cpu"`
	Cores    int     `json:"cores"`
	MemGiB   float64 `json:"mem_gib"`
	Kernel   string  `json:"kernel"`
	Go       string  `json:"go"`
	Java     string  `json:"java"`
	Kafka    string  `json:"kafka"`
	Postgres string  `json:"postgres,omitempty"`
}

type ratio struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

type target struct {
	Name   string `json:"name"`
	Want   string `json:"want"`
	Got    string `json:"got"`
	Status string `json:"status"` // met, missed, n/a
}

type report struct {
	Started       time.Time        `json:"started"`
	Machine       machine          `json:"machine"`
	Params        map[string]any   `json:"params"`
	Cases         []caseResult     `json:"cases"`
	Latency       []*latencyResult `json:"latency,omitempty"`
	Ratios        []ratio          `json:"ratios"`
	Targets       []target         `json:"targets"`
	KStreamsBuild string           `json:"kstreams_build,omitempty"`
	Errors        []string         `json:"errors,omitempty"`
}

func newReport(cfg config) *report {
	return &report{
		Started: time.Now().UTC(),
		Machine: machineInfo(cfg),
		Params: map[string]any{
			"records": cfg.records, "record_bytes": recordSize, "partitions": cfg.partitions,
			"commit_interval": commitInterval.String(), "latency_for": cfg.latencyFor.String(),
			"kstreams_heap": cfg.ksHeap, "instances": 1, "repeat": cfg.repeat,
			"windowed_keys": cfg.winKeys, "windowed_minutes": cfg.winMinutes,
			"windowed_window": windowSize.String(), "windowed_grace": windowGrace.String(),
		},
	}
}

// add records a case, or one more round of a case already recorded.
func (r *report) add(c caseResult) {
	for i := range r.Cases {
		old := &r.Cases[i]
		if old.Name != c.Name {
			continue
		}
		switch {
		case c.Error != "" && old.Error == "":
			old.Note = strings.TrimPrefix(old.Note+"; a round failed: "+c.Error, "; ")
		case c.Error == "" && old.Error != "":
			*old = c
			old.Note = strings.TrimPrefix(old.Note+"; a round failed: "+old.Error, "; ")
			old.Samples, old.walls, old.cpus = []float64{c.RecordsPerS}, []float64{c.WallS}, []float64{c.CPUS}
		case c.Error == "":
			old.Samples = append(old.Samples, c.RecordsPerS)
			old.walls, old.cpus = append(old.walls, c.WallS), append(old.cpus, c.CPUS)
			old.PeakRSSMiB = max(old.PeakRSSMiB, c.PeakRSSMiB)
			old.RecordsPerS, old.WallS, old.CPUS = median(old.Samples), median(old.walls), median(old.cpus)
		}
		return
	}
	if c.Error == "" {
		c.Samples, c.walls, c.cpus = []float64{c.RecordsPerS}, []float64{c.WallS}, []float64{c.CPUS}
	}
	r.Cases = append(r.Cases, c)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rate is a case's steady-state rate, 0 if it did not run or failed.
func (r *report) rate(name string) float64 {
	for _, c := range r.Cases {
		if c.Name == name && c.Error == "" {
			return c.RecordsPerS
		}
	}
	return 0
}

func machineInfo(cfg config) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %f kB", &kb); err == nil {
			m.MemGiB = kb / (1 << 20)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command("java", "-version").CombinedOutput(); err == nil {
		m.Java, _, _ = strings.Cut(string(out), "\n")
	}
	// KAFKA_LIBS is .../kafka-<version>/libs (deploy/local/kafka.sh).
	m.Kafka = strings.TrimPrefix(filepath.Base(filepath.Dir(cfg.kafkaLibs)), "kafka-")
	return m
}

// finish computes the ratios and the target status (issues 14 and 17).
func (r *report) finish() {
	div := func(a, b float64) float64 {
		if a == 0 || b == 0 {
			return 0
		}
		return a / b
	}
	eosPass, eosCEL := r.rate(caseEOSPass), r.rate(caseEOSCEL)
	alosPass, alosCEL := r.rate(caseALOSPass), r.rate(caseALOSCEL)
	ksPass, ksCEL := r.rate(caseKSPass), r.rate(caseKSCEL)
	ksPassM, ksCELM := r.rate(caseKSPassM), r.rate(caseKSCELM)
	prod, cons := r.rate(caseProduce), r.rate(caseConsume)
	sink, sinkUpsert, cp := r.rate(caseSink), r.rate(caseSinkUpsert), r.rate(caseCopy)
	hand := r.rate(caseHandUpsert)
	sinkUpdate, handUpdate := r.rate(caseSinkUpdate), r.rate(caseHandUpdate)
	jdbcIns, jdbcUps := r.rate(caseJDBCInsertM), r.rate(caseJDBCUpsertM)
	jdbcInsD, jdbcUpsD := r.rate(caseJDBCInsert), r.rate(caseJDBCUpsert)
	eosWin, ksWin, ksWinM := r.rate(caseEOSWin), r.rate(caseKSWin), r.rate(caseKSWinM)
	eosJoin, ksJoin, ksJoinM := r.rate(caseEOSJoin), r.rate(caseKSJoin), r.rate(caseKSJoinM)
	for _, x := range []ratio{
		{"EOS 3-step CEL/EOS pass-through", div(eosCEL, eosPass)},
		{"EOS/ALOS pass-through", div(eosPass, alosPass)},
		{"EOS/ALOS 3-step CEL", div(eosCEL, alosCEL)},
		{"exactly/Kafka Streams matched pass-through", div(eosPass, ksPassM)},
		{"exactly/Kafka Streams matched 3-step", div(eosCEL, ksCELM)},
		{"exactly/Kafka Streams defaults pass-through", div(eosPass, ksPass)},
		{"exactly/Kafka Streams defaults 3-step", div(eosCEL, ksCEL)},
		{"exactly EOS pass-through/produce limit", div(eosPass, prod)},
		{"exactly EOS pass-through/consume limit", div(eosPass, cons)},
		{"exactly EOS 3-step CEL/produce limit", div(eosCEL, prod)},
		{"exactly/Kafka Streams matched windowed count", div(eosWin, ksWinM)},
		{"exactly/Kafka Streams defaults windowed count", div(eosWin, ksWin)},
		{"exactly/Kafka Streams matched join", div(eosJoin, ksJoinM)},
		{"exactly/Kafka Streams defaults join", div(eosJoin, ksJoin)},
		{"sink/COPY", div(sink, cp)},
		{"sink upsert/COPY", div(sinkUpsert, cp)},
		{"sink upsert/hand-written upsert", div(sinkUpsert, hand)},
		{"sink upsert/hand-written upsert, every key stored", div(sinkUpdate, handUpdate)},
		{"sink/Debezium JDBC sink matched, insert", div(sink, jdbcIns)},
		{"sink upsert/Debezium JDBC sink matched, upsert", div(sinkUpsert, jdbcUps)},
		{"sink/Debezium JDBC sink defaults, insert", div(sink, jdbcInsD)},
		{"sink upsert/Debezium JDBC sink defaults, upsert", div(sinkUpsert, jdbcUpsD)},
	} {
		if x.Value != 0 {
			r.Ratios = append(r.Ratios, x)
		}
	}

	atLeast := func(name string, want, got float64) {
		t := target{Name: name, Want: fmt.Sprintf(">= %.2f", want), Got: "not measured", Status: "n/a"}
		if got != 0 {
			t.Got, t.Status = fmt.Sprintf("%.3f", got), status(got >= want)
		}
		r.Targets = append(r.Targets, t)
	}
	atLeast("EOS 3-step CEL >= 0.8 x EOS pass-through", 0.8, div(eosCEL, eosPass))
	atLeast("exactly >= 2.0 x Kafka Streams matched, pass-through", 2.0, div(eosPass, ksPassM))
	atLeast("exactly >= 2.0 x Kafka Streams matched, 3-step", 2.0, div(eosCEL, ksCELM))
	atLeast("windowed count >= 1.5 x Kafka Streams matched", 1.5, div(eosWin, ksWinM))
	atLeast("windowed count >= 1.5 x Kafka Streams defaults", 1.5, div(eosWin, ksWin))
	atLeast("join >= 2.0 x Kafka Streams matched", 2.0, div(eosJoin, ksJoinM))
	atLeast("EOS >= 0.95 x ALOS, pass-through", 0.95, div(eosPass, alosPass))
	atLeast("EOS >= 0.95 x ALOS, 3-step", 0.95, div(eosCEL, alosCEL))

	for _, lt := range []struct {
		load  int
		limit time.Duration
		name  string
	}{
		{50, commitInterval + 50*time.Millisecond, "exactly p99 latency at 50% load <= commit interval + 50 ms"},
		{10, 60 * time.Millisecond, "exactly p99 latency at 10% load <= 60 ms"},
	} {
		t := target{Name: lt.name, Want: fmt.Sprintf("<= %d ms", lt.limit.Milliseconds()), Got: "not measured", Status: "n/a"}
		if l := r.latency(latExactly, lt.load); l != nil && l.Error == "" && l.Received > 0 {
			t.Got = fmt.Sprintf("%.0f ms", l.P99ms)
			t.Status = status(l.P99ms <= float64(lt.limit.Milliseconds()))
		}
		r.Targets = append(r.Targets, t)
	}

	r.peakRSS("exactly stage peak RSS at full load <= 100 MiB (max of its cases)", 100, "alos", "eos")
	atLeast("sink >= 0.7 x COPY", 0.7, div(sink, cp))
	atLeast("sink upsert >= 0.8 x hand-written upsert", 0.8, div(sinkUpsert, hand))
	atLeast("sink upsert >= 0.6 x COPY", 0.6, div(sinkUpsert, cp))
	atLeast("sink upsert >= 0.8 x hand-written upsert, every key stored", 0.8, div(sinkUpdate, handUpdate))
	atLeast("sink >= 2.0 x Debezium JDBC sink matched, insert", 2.0, div(sink, jdbcIns))
	atLeast("sink upsert >= 2.0 x Debezium JDBC sink matched, upsert", 2.0, div(sinkUpsert, jdbcUps))
	// The sink's peak RSS, insert and upsert mode alike.
	r.peakRSS("exactly sink peak RSS <= 100 MiB (max of its cases)", 100, "sink")
}

// peakRSS adds the target that the largest peak RSS of the cases of
// groups is at most limit MiB (issues 14 and 17).
func (r *report) peakRSS(name string, limit float64, groups ...string) {
	t := target{Name: name, Want: fmt.Sprintf("<= %.0f MiB", limit), Got: "not measured", Status: "n/a"}
	peak := 0.0
	for _, c := range r.Cases {
		if slices.Contains(groups, c.Group) && c.Error == "" && c.PeakRSSMiB > peak {
			peak = c.PeakRSSMiB
		}
	}
	if peak > 0 {
		t.Got, t.Status = fmt.Sprintf("%.0f MiB", peak), status(peak <= limit)
	}
	r.Targets = append(r.Targets, t)
}

// latency is the latency result of case c at load percent, or nil.
func (r *report) latency(c string, load int) *latencyResult {
	for _, l := range r.Latency {
		if l.Case == c && l.LoadPct == load {
			return l
		}
	}
	return nil
}

func status(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func (r *report) print(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "\nexactly bench, %s: %d cores (%s), %.0f GiB, Linux %s, %s, Kafka %s, Postgres %s\n",
		r.Started.Format("2006-01-02 15:04 UTC"), m.Cores, m.CPU, m.MemGiB, m.Kernel, m.Go, m.Kafka, m.Postgres)
	fmt.Fprintf(w, "%v records x %d B JSON, %v partitions, commit interval %s, one instance each; stage cases: median of %v rounds\n\n",
		r.Params["records"], recordSize, r.Params["partitions"], commitInterval, r.Params["repeat"])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\trecords/s\tMiB/s\twall s\tpeak RSS MiB\tCPU s\t")
	for _, c := range r.Cases {
		if c.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t  %s\n", c.Name, c.Error)
			continue
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.1f\t%s\t%s\t%s\t\n", c.Name, c.RecordsPerS, c.mbPerS(),
			opt(c.WallS, "%.1f"), opt(c.PeakRSSMiB, "%.0f"), opt(c.CPUS, "%.1f"))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nnotes:")
	for _, c := range r.Cases {
		if c.Note != "" {
			fmt.Fprintf(w, "  %s: %s\n", c.Name, c.Note)
		}
	}
	if len(r.Latency) > 0 {
		fmt.Fprintln(w, "\nlatency (producer timestamp to a read_committed reader), the same rate for both:")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "case\tload\trecords/s\treceived\tp50 ms\tp99 ms\tmax ms\tack p50/p99 ms\tCPU cores harness/stage/broker/machine\tCPU µs/record h/s/b\tneeds cores\tpeak RSS MiB\t")
		for _, l := range r.Latency {
			cpu, cost, need := "-", "-", "-"
			if c := l.CPU; c != nil {
				cpu = fmt.Sprintf("%.2f/%.2f/%.2f/%.2f of %d", c.Harness, c.Stage, c.Broker, c.Machine, c.Cores)
			}
			if c := l.Cost; c != nil {
				cost = fmt.Sprintf("%.0f/%.0f/%.0f", c.HarnessUs, c.StageUs, c.BrokerUs)
				need = fmt.Sprintf("%.2f", c.cores(float64(l.TargetRate)))
			}
			fmt.Fprintf(tw, "%s\t%d%%\t%.0f\t%d/%d\t%.0f\t%.0f\t%.0f\t%.0f/%.0f\t%s\t%s\t%s\t%s\t", l.Case, l.LoadPct, l.Rate, l.Received, l.Records,
				l.P50ms, l.P99ms, l.MaxMs, l.AckP50ms, l.AckP99ms, cpu, cost, need, opt(l.PeakRSSMiB, "%.0f"))
			if l.Error != "" {
				fmt.Fprintf(tw, "  %s", l.Error)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		for _, l := range r.Latency {
			if l.Txns != nil {
				fmt.Fprintf(w, "  %s at %d%%: %s\n", l.Case, l.LoadPct, l.Txns)
			}
		}
		fmt.Fprintln(w, "  CPU cores: used while producing (machine: every process, other users' too); CPU µs/record: harness (producer and reader), stage, broker (less its background use),")
		fmt.Fprintln(w, "  first record produced to last read; needs cores: those three at the target rate, which a 2-core machine must hold with room to spare for latency")
	}
	fmt.Fprintln(w, "\nratios:")
	for _, x := range r.Ratios {
		fmt.Fprintf(w, "  %-44s %.2f\n", x.Name, x.Value)
	}
	fmt.Fprintln(w, "\ntargets:")
	for _, t := range r.Targets {
		fmt.Fprintf(w, "  %-66s want %-10s got %-10s %s\n", t.Name, t.Want, t.Got, t.Status)
	}
	if r.KStreamsBuild != "" {
		fmt.Fprintf(w, "\nKafka Streams peer: %s\n", r.KStreamsBuild)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}

func opt(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// write saves <time>.json and .png, and copies them to latest.json and
// latest.png.
// hasThroughput reports whether any throughput case was measured.
func (r *report) hasThroughput() bool {
	for _, c := range r.Cases {
		if c.Error == "" && c.RecordsPerS > 0 {
			return true
		}
	}
	return false
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	stamp := r.Started.Format("20060102-150405")
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	jsonPath := filepath.Join(dir, stamp+".json")
	for _, p := range []string{jsonPath, filepath.Join(dir, "latest.json")} {
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if !r.hasThroughput() {
		// A latency-only run has no bars to draw.
		fmt.Fprintf(os.Stderr, "wrote %s (no chart: no throughput case)\n", jsonPath)
		return nil
	}
	pngPath := filepath.Join(dir, stamp+".png")
	if err := r.plot(pngPath); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	png, err := os.ReadFile(pngPath)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "latest.png"), png, 0o644)
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s\n", jsonPath, pngPath)
	return err
}
