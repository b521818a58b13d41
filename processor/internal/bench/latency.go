//go:build integration

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/integration/opstest"
)

type latencyResult struct {
	Case       string  `json:"case"`
	LoadPct    int     `json:"load_pct"` // of the full-load rate
	TargetRate int     `json:"target_rate_per_s"`
	Rate       float64 `json:"achieved_rate_per_s"`
	Records    int     `json:"records"`
	Received   int     `json:"received"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// AckP50ms and AckP99ms are the input producer's share: from a
	// record's timestamp to its acknowledgement by the broker.
	AckP50ms float64 `json:"ack_p50_ms"`
	AckP99ms float64 `json:"ack_p99_ms"`
	// CPU is what the harness, the stage, the broker and the machine
	// used while records were produced.
	CPU *cpuShares `json:"cpu,omitempty"`
	// Cost is the CPU per record of each party, over the whole run.
	Cost *cpuCost `json:"cpu_cost,omitempty"`
	// Txns is what the stage's metrics say of its transactions over the
	// run (exactly only).
	Txns  *txnStats `json:"transactions,omitempty"`
	Error string    `json:"error,omitempty"`
}

// defaultLatencyLoads are the loads of the latency case, in percent of
// the full-load rate (-latency-loads).
const defaultLatencyLoads = "50,10"

// Latency case names.
const (
	latExactly  = "exactly EOS 3-step CEL"
	latKStreams = "Kafka Streams EOSv2 3-step JSON, defaults"
)

// latency feeds the exactly-once 3-step CEL stage and the Kafka Streams
// peer's 3-step stage (default settings), each on fresh topics, at the
// same fixed rates: 50% and 10% of the full-load rate, by default the
// measured maximum of exactly's EOS 3-step case. Each record's latency is
// from its producer timestamp (set just before Produce; outputs keep the
// input's timestamp) to the moment a read_committed consumer of the
// output receives it.
func (r *runner) latency(ctx context.Context) error {
	full := r.cfg.latencyFull
	if full == 0 {
		full = int(r.rep.rate(caseEOSCEL))
		if full == 0 {
			return errors.New("no exactly-once rate to take a share of: run the eos case too, or pass -latency-full")
		}
	}
	if r.rep.KStreamsBuild == "" {
		if err := r.buildKStreams(ctx); err != nil {
			logf("latency: %v", err)
		}
	}
	for _, load := range r.cfg.latencyLoads {
		rate := max(1, full*load/100)
		for _, c := range []string{latExactly, latKStreams} {
			if c == latKStreams && !r.cfg.latencyPeers {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			res := &latencyResult{Case: c, LoadPct: load, TargetRate: rate, Records: max(1, int(float64(rate)*r.cfg.latencyFor.Seconds()))}
			r.rep.Latency = append(r.rep.Latency, res)
			if c == latKStreams && r.rep.KStreamsBuild == "" {
				res.Error = "the Kafka Streams peer did not build"
				continue
			}
			if err := r.latencyOne(ctx, res); err != nil {
				res.Error = err.Error()
			}
		}
	}
	return nil
}

// latencyOne runs one latency measurement, filling res.
func (r *runner) latencyOne(ctx context.Context, res *latencyResult) error {
	logf("latency: %s at %d records/s (%d%% load) for %s", res.Case, res.TargetRate, res.LoadPct, r.cfg.latencyFor)
	tag := fmt.Sprintf("lat%d_eos_cel", res.LoadPct)
	if res.Case == latKStreams {
		tag = fmt.Sprintf("lat%d_ks_cel", res.LoadPct)
	}
	in, err := r.k.topic(ctx, tag+"_in", 0)
	if err != nil {
		return err
	}
	lc := &latencyCase{in: in}
	if res.Case == latKStreams {
		err = r.startLatencyKStreams(ctx, lc, tag)
	} else {
		err = r.startLatencyStage(ctx, lc, tag)
	}
	defer lc.cleanup()
	if err != nil {
		return err
	}
	defer func() {
		u, _ := lc.p.stop()
		res.PeakRSSMiB = u.PeakRSSMiB
	}()
	if err := r.waitStable(ctx, lc.group, lc.p); err != nil {
		return err
	}
	var txn0 txnStats
	if lc.metricsAddr != "" {
		txn0, _ = scrapeTxns(ctx, lc.metricsAddr)
	}

	n := res.Records
	seeds := strings.Split(r.cfg.brokers, ",")
	cons, prod, err := latencyClients(ctx, seeds, lc.outTop, in)
	if err != nil {
		return err
	}
	defer cons.Close()
	defer prod.Close()
	// The values are made before the clock runs: making a 1 KiB value
	// costs the harness more CPU than producing it, CPU the stage and the
	// broker share on a small machine. Keys stay unique.
	vals := make([][]byte, min(n, 1<<14))
	for i := range vals {
		vals[i] = value(i)
	}

	lats := make([]time.Duration, 0, n)
	got, consDone := make(chan struct{}), make(chan struct{})
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		defer close(consDone)
		lats = consumeLatencies(cctx, cons, n, lats, got)
	}()

	brokerPID := listenerPID(seeds[0])
	// The broker's background use (other clients of a shared broker),
	// to take out of its cost.
	idle0 := markCPU(lc.p.cmd.Process.Pid, brokerPID)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Second):
	}
	idle := markCPU(lc.p.cmd.Process.Pid, brokerPID).since(idle0).Broker
	cpu0 := markCPU(lc.p.cmd.Process.Pid, brokerPID)
	werr, err := produceAtRate(ctx, prod, res, vals, cpu0, brokerPID, lc.p)
	if err != nil {
		return err
	}
	werr = errors.Join(werr, r.awaitOutputs(ctx, lc, res, got, latencyMarks{cpu0: cpu0, idle: idle, txn0: txn0, brokerPID: brokerPID}))
	ccancel()
	<-consDone
	res.setLatencies(lats, n)
	return werr
}

// latencyMarks are what a latency measurement read before its run, to
// take out of what it reads after.
type latencyMarks struct {
	cpu0      cpuMark
	idle      float64 // the broker's background CPU before the run
	txn0      txnStats
	brokerPID int
}

// awaitOutputs waits for every output, then fills res's CPU cost and
// transaction counts; the error says why not every output came.
func (r *runner) awaitOutputs(ctx context.Context, lc *latencyCase, res *latencyResult, got <-chan struct{}, m latencyMarks) error {
	select {
	case <-got:
	case <-time.After(max(30*time.Second, 4*r.cfg.latencyFor)):
		// A stage that fell behind is given time to catch up, so that
		// its latency shows how far behind it fell.
		return errors.New("timed out waiting for the outputs")
	case <-lc.p.exited:
		return lc.p.failure()
	}
	done := markCPU(lc.p.cmd.Process.Pid, m.brokerPID)
	// The broker's background use again, after the run: the mean of
	// the two is taken out.
	select {
	case <-ctx.Done():
	case <-time.After(3 * time.Second):
	}
	after := markCPU(lc.p.cmd.Process.Pid, m.brokerPID).since(done).Broker
	c := done.cost(m.cpu0, res.Records, (m.idle+after)/2)
	res.Cost = &c
	if lc.metricsAddr != "" {
		if t, err := scrapeTxns(ctx, lc.metricsAddr); err == nil {
			t = t.since(m.txn0)
			res.Txns = &t
		}
	}
	return nil
}

// latencyCase is the process under measurement: what it reads and
// writes, and how to clean up after it.
type latencyCase struct {
	p                 *proc
	in, group, outTop string
	metricsAddr       string // of a stage; "" for Kafka Streams
	cleanup           func()
}

// startLatencyKStreams starts the Kafka Streams application of case tag.
func (r *runner) startLatencyKStreams(ctx context.Context, lc *latencyCase, tag string) error {
	lc.cleanup = func() {}
	var err error
	if lc.outTop, err = r.k.topic(ctx, tag+"_out", 0); err != nil {
		return err
	}
	lc.group = r.k.group(r.k.name(tag))
	state, err := os.MkdirTemp("", "bench-kstreams-")
	if err != nil {
		return err
	}
	lc.cleanup = func() { os.RemoveAll(state) }
	lc.p, err = r.startKStreams(tag, lc.group, lc.in, lc.outTop, "cel", state, nil)
	return err
}

// startLatencyStage starts the stage of case tag, with its metrics and,
// with -profile, its CPU profile at this load beside -profile's.
func (r *runner) startLatencyStage(ctx context.Context, lc *latencyCase, tag string) error {
	lc.cleanup = func() {}
	var err error
	if lc.metricsAddr, err = opstest.Addr(); err != nil {
		return err
	}
	prof := ""
	if r.cfg.profile != "" {
		prof = filepath.Join(filepath.Dir(r.cfg.profile), tag+".prof")
	}
	if lc.p, lc.group, err = r.startStage(ctx, tag, lc.in, true, "", prof, "--metrics-addr", lc.metricsAddr); err != nil {
		return err
	}
	lc.outTop = r.k.name(tag + "_out")
	return nil
}

// latencyClients returns a read_committed consumer of outTop and a
// producer to in, both connected, with their metadata, before the clock
// runs.
func latencyClients(ctx context.Context, seeds []string, outTop, in string) (cons, prod *kgo.Client, err error) {
	cons, err = kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(outTop),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	prod, err = kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(in), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		cons.Close()
		return nil, nil, err
	}
	if err = prod.Ping(ctx); err == nil {
		err = cons.Ping(ctx)
	}
	if err != nil {
		cons.Close()
		prod.Close()
		return nil, nil, err
	}
	return cons, prod, nil
}

// consumeLatencies appends to lats the latency of each output consumed,
// until there are n (closing got) or ctx ends.
func consumeLatencies(ctx context.Context, cons *kgo.Client, n int, lats []time.Duration, got chan struct{}) []time.Duration {
	for ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		now := time.Now()
		fs.EachRecord(func(rec *kgo.Record) {
			lats = append(lats, now.Sub(rec.Timestamp))
		})
		if len(lats) >= n {
			close(got)
			return lats
		}
	}
	return lats
}

// produceAtRate produces res.Records records of vals at res.TargetRate and flushes them,
// filling res's rate, CPU shares and acknowledgement times. werr is the
// produce error to report with the result; err ends the measurement.
func produceAtRate(ctx context.Context, prod *kgo.Client, res *latencyResult, vals [][]byte, cpu0 cpuMark, brokerPID int, p *proc) (werr, err error) {
	n := res.Records
	var (
		mu      sync.Mutex
		prodErr error
		acks    = make([]time.Duration, 0, n)
	)
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < n; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		due := min(n, int(time.Since(start).Seconds()*float64(res.TargetRate)))
		for ; sent < due; sent++ {
			prod.Produce(ctx, &kgo.Record{Key: []byte(eventID(sent)), Value: vals[sent%len(vals)], Timestamp: time.Now()},
				func(r *kgo.Record, err error) {
					mu.Lock()
					if err != nil {
						prodErr = errors.Join(prodErr, err)
					} else {
						acks = append(acks, time.Since(r.Timestamp))
					}
					mu.Unlock()
				})
		}
	}
	tick.Stop()
	res.Rate = float64(n) / time.Since(start).Seconds()
	cpu := markCPU(p.cmd.Process.Pid, brokerPID).since(cpu0)
	res.CPU = &cpu
	if err := prod.Flush(ctx); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	res.AckP50ms, res.AckP99ms = quantileMs(acks, 0.50), quantileMs(acks, 0.99)
	if prodErr != nil {
		return fmt.Errorf("produce: %w", prodErr), nil
	}
	return nil, nil
}

// setLatencies sets res's count and quantiles from the first n of lats.
func (res *latencyResult) setLatencies(lats []time.Duration, n int) {
	lat := slices.Clone(lats[:min(len(lats), n)])
	res.Received = len(lat)
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) float64 { return ms(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
		res.P50ms, res.P99ms, res.MaxMs = q(0.50), q(0.99), ms(lat[len(lat)-1])
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// quantileMs is the q quantile of ds in milliseconds (ds is sorted in
// place), 0 for none.
func quantileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ms(ds[min(len(ds)-1, int(q*float64(len(ds))))])
}

// waitStable waits until the stage's group has settled on its members.
func (r *runner) waitStable(ctx context.Context, group string, p *proc) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return p.failure()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		gs, err := r.k.adm.DescribeGroups(ctx, group)
		if err != nil {
			continue
		}
		if g, ok := gs[group]; ok && g.State == "Stable" && len(g.Members) > 0 {
			return nil
		}
	}
	return fmt.Errorf("group %s did not become stable in 60 s", group)
}
