//go:build integration

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type latencyResult struct {
	Case       string  `json:"case"`
	TargetRate int     `json:"target_rate_per_s"`
	Rate       float64 `json:"achieved_rate_per_s"`
	Records    int     `json:"records"`
	Received   int     `json:"received"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	Error      string  `json:"error,omitempty"`
}

// latency runs the exactly-once 3-step CEL stage on fresh topics and
// produces into it at a fixed rate, by default half its measured maximum.
// Each record's latency is from its producer timestamp (set just before
// Produce; outputs keep the input's timestamp) to the moment a
// read_committed consumer of the output receives it.
func (r *runner) latency(ctx context.Context) error {
	rate := r.cfg.latencyRate
	if rate == 0 {
		max := r.rep.rate(caseEOSCEL)
		if max == 0 {
			return errors.New("no exactly-once rate to take half of: run the eos case too, or pass -latency-rate")
		}
		rate = int(max / 2)
	}
	n := int(float64(rate) * r.cfg.latencyFor.Seconds())
	res := &latencyResult{Case: caseEOSCEL, TargetRate: rate, Records: n}
	r.rep.Latency = res
	logf("latency: %s at %d records/s for %s", caseEOSCEL, rate, r.cfg.latencyFor)

	in, err := r.k.topic(ctx, "lat_in", 0)
	if err != nil {
		return err
	}
	p, group, err := r.startStage(ctx, "lat_eos_cel", in, true, "")
	if err != nil {
		return err
	}
	outTopic := r.k.name("lat_eos_cel_out")
	defer func() {
		u, _ := p.stop()
		res.PeakRSSMiB = u.PeakRSSMiB
	}()
	if err := r.waitStable(ctx, group, p); err != nil {
		res.Error = err.Error()
		return nil
	}

	seeds := strings.Split(r.cfg.brokers, ",")
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(outTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(in), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		return err
	}
	defer prod.Close()
	// Both clients connect and learn their metadata before the clock runs.
	if err := prod.Ping(ctx); err != nil {
		return err
	}

	lats := make([]time.Duration, 0, n)
	got, consDone := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		defer close(consDone)
		for cctx.Err() == nil {
			fs := cons.PollFetches(cctx)
			now := time.Now()
			fs.EachRecord(func(rec *kgo.Record) {
				lats = append(lats, now.Sub(rec.Timestamp))
			})
			if len(lats) >= n {
				once.Do(func() { close(got) })
				return
			}
		}
	}()

	var (
		mu      sync.Mutex
		prodErr error
	)
	start := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	sent := 0
	for sent < n {
		select {
		case <-ctx.Done():
			tick.Stop()
			return ctx.Err()
		case <-tick.C:
		}
		due := min(n, int(time.Since(start).Seconds()*float64(rate)))
		for ; sent < due; sent++ {
			prod.Produce(ctx, &kgo.Record{Key: []byte(eventID(sent)), Value: value(sent), Timestamp: time.Now()},
				func(_ *kgo.Record, err error) {
					if err != nil {
						mu.Lock()
						prodErr = errors.Join(prodErr, err)
						mu.Unlock()
					}
				})
		}
	}
	tick.Stop()
	res.Rate = float64(n) / time.Since(start).Seconds()
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	perr := prodErr
	mu.Unlock()
	if perr != nil {
		res.Error = fmt.Sprintf("produce: %v", perr)
	}
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		res.Error = "timed out waiting for the outputs"
	case <-p.exited:
		res.Error = p.failure().Error()
	}
	ccancel()
	<-consDone
	lat := slices.Clone(lats[:min(len(lats), n)])
	res.Received = len(lat)
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(p float64) float64 { return ms(lat[min(len(lat)-1, int(p*float64(len(lat))))]) }
		res.P50ms, res.P99ms, res.MaxMs = q(0.50), q(0.99), ms(lat[len(lat)-1])
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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
