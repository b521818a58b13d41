//go:build integration

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/topology"
)

// The windowed count case: the same per-key, per-minute count
// and sum over event time, final results only, in exactly's aggregate
// step and in Kafka Streams (exactly_once_v2, RocksDB window store with
// its changelog, suppress(untilWindowCloses)).
const (
	caseEOSWin  = "exactly EOS windowed count"
	caseKSWin   = "Kafka Streams EOSv2 windowed count, defaults"
	caseKSWinM  = "Kafka Streams EOSv2 windowed count, matched"
	windowSize  = time.Minute
	windowGrace = 10 * time.Second
	// windowJitter bounds how far an event's time runs behind the
	// input's order; below windowGrace, so that no record is late.
	windowJitter = 5 * time.Second
)

// winKey is one window of one key: the key and the window start (Unix ms).
type winKey struct {
	key   string
	start int64
}

// winResult is one window's count and sum of amount.
type winResult struct {
	n, total int64
}

// winInput is the windowed case's input topic and the results every
// correct run must write for it.
type winInput struct {
	topic  string
	total  int64 // input records, closers included
	events int   // input records without the closers
	want   map[winKey]winResult
}

// winValue is event i of the windowed input: 1 KiB of JSON keyed by key,
// with its event time ts (Unix ms) and an amount. ts and amount come
// first, as a producer that knows its consumers would write them.
func winValue(i int, key string, ts, amount int64) []byte {
	head := fmt.Appendf(nil, `{"ts":%d,"amount":%d,"key":%q,"event_id":"w-%09d","pad":"`, ts, amount, key, i)
	return padded(head, i)
}

// padded ends head with pseudo-random letters and digits and `"}` to
// recordSize bytes, as value does.
func padded(head []byte, seed int) []byte {
	const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	v := make([]byte, 0, recordSize)
	v = append(v, head...)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x77696e646f77))
	for range recordSize - len(head) - len(`"}`) {
		v = append(v, alnum[rng.IntN(len(alnum))])
	}
	return append(v, `"}`...)
}

// fillWindowed writes the windowed input: cfg.records events over
// -windowed-keys keys, their event times spread evenly over
// -windowed-minutes minutes ending a minute before now (with up to
// windowJitter of disorder), then one closer per key whose event time is
// past the last window's end plus the grace. The closers advance every
// partition's stream time so that every window of the events closes and
// is emitted; their own windows stay open and are never emitted.
func (r *runner) fillWindowed(ctx context.Context) (*winInput, error) {
	topic, err := r.k.topic(ctx, "win_in", 0)
	if err != nil {
		return nil, err
	}
	n, keys := r.cfg.records, r.cfg.winKeys
	span := int64(r.cfg.winMinutes) * windowSize.Milliseconds()
	now := time.Now().UnixMilli()
	base := (now-span)/windowSize.Milliseconds()*windowSize.Milliseconds() - 2*windowSize.Milliseconds()
	in := &winInput{topic: topic, events: n, total: int64(n + keys), want: map[winKey]winResult{}}
	var (
		mu       sync.Mutex
		firstErr error
	)
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}
	}
	logf("filling %s: %d events over %d keys and %d event-time minutes, then %d closers", topic, n, keys, r.cfg.winMinutes, keys)
	for i := range n {
		key := fmt.Sprintf("k-%03d", i%keys)
		ts := base + int64(i)*span/int64(n) - int64(i*7919)%windowJitter.Milliseconds()
		amount := int64(i % 1000)
		w := winKey{key, ts / windowSize.Milliseconds() * windowSize.Milliseconds()}
		res := in.want[w]
		res.n++
		res.total += amount
		in.want[w] = res
		r.k.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: winValue(i, key, ts, amount)}, done)
	}
	closeAt := base + span + windowSize.Milliseconds() + windowGrace.Milliseconds()
	for k := range keys {
		key := fmt.Sprintf("k-%03d", k)
		r.k.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: winValue(n+k, key, closeAt, 0)}, done)
	}
	if err := r.k.cl.Flush(ctx); err != nil {
		return nil, err
	}
	if firstErr != nil {
		return nil, fmt.Errorf("produce to %s: %w", topic, firstErr)
	}
	total, err := r.k.endSum(ctx, topic)
	if err != nil {
		return nil, err
	}
	if total != in.total {
		return nil, fmt.Errorf("%s holds %d records, want %d", topic, total, in.total)
	}
	return in, nil
}

// windowed runs one round of the windowed count case: exactly, then
// Kafka Streams with its defaults and with the matched settings.
func (r *runner) windowed(ctx context.Context, round int) error {
	if r.win == nil {
		in, err := r.fillWindowed(ctx)
		if err != nil {
			return err
		}
		r.win = in
	}
	return r.statefulRound(ctx, round, r.exactlyWindowed, r.ksWindowed, caseKSWin, caseKSWinM)
}

// windowedTopology is the exactly stage of the windowed case.
func (r *runner) windowedTopology(name, stage, in, out, dlq string) (string, error) {
	steps := fmt.Sprintf(`    transform:
      - aggregate:
          window: { tumbling: %s }
          time: value.ts
          grace: %s
          aggregations:
            n: count
            total: { sum: value.amount }
          emit: final
`, shortDur(windowSize), shortDur(windowGrace))
	return r.writeStageTopology(name, stage, in, out, dlq, "", steps)
}

// shortDur writes d in the topology's duration units (whole minutes or
// seconds).
func shortDur(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}

func (r *runner) exactlyWindowed(ctx context.Context, round int) {
	res := caseResult{Name: caseEOSWin, Group: "windowed", Records: r.win.total,
		Note: fmt.Sprintf("aggregate step, tumbling %s on value.ts, grace %s, count and sum(amount), emit final; Pebble store, changelog in the transaction",
			shortDur(windowSize), shortDur(windowGrace))}
	defer func() { r.rep.add(res) }()
	logf("%s (round %d)", caseEOSWin, round+1)
	name := fmt.Sprintf("eos_win_r%d", round)
	stage := r.k.name(name)
	out, err := r.k.topic(ctx, name+"_out", 0)
	if err == nil {
		_, err = r.k.topicWith(ctx, topology.ChangelogTopic(stage, topology.AggregateStore), r.cfg.partitions,
			map[string]*string{"cleanup.policy": kptr("compact")})
	}
	var dlq string
	if err == nil {
		dlq, err = r.k.topic(ctx, name+"_dlq", 1)
	}
	if err == nil {
		err = r.k.awaitTopics(ctx, out, dlq, topology.ChangelogTopic(stage, topology.AggregateStore))
	}
	var path string
	if err == nil {
		path, err = r.windowedTopology(name, stage, r.win.topic, out, dlq)
	}
	if err != nil {
		res.Error = err.Error()
		return
	}
	r.exactlyStateful(ctx, &res, name, stage, path, out, r.windowedRun())
}

// ksWindowed runs the Kafka Streams peer's "window" mode over the
// windowed input (see Peer.java), with its defaults or with settings.
func (r *runner) ksWindowed(ctx context.Context, label string, round int, settings []ksSetting) {
	res := caseResult{Name: label, Group: "kstreams", Records: r.win.total,
		Note: "heap -Xms/-Xmx" + r.cfg.ksHeap + ", 1 stream thread; windowedBy(TimeWindows.ofSizeAndGrace(" + shortDur(windowSize) + ", " +
			shortDur(windowGrace) + ")).aggregate(count, sum) on a timestamp extractor of ts, suppress(untilWindowCloses), RocksDB + changelog; " +
			ksNote(settings, "Kafka Streams' client defaults")}
	defer func() { r.rep.add(res) }()
	logf("%s (round %d)", label, round+1)
	mode := fmt.Sprintf("window:%d", windowGrace.Milliseconds())
	r.ksStateful(ctx, &res, ksRunName("win", round, settings), mode, settings, r.windowedRun())
}

// windowedRun is the windowed case's input and output check.
func (r *runner) windowedRun() statefulRun {
	return statefulRun{input: r.win.topic, total: r.win.total, check: r.checkWindows}
}

// windowOut is one output record of either system: exactly's aggregate
// output ({"key","window":{"start_ms"},"results":{"n","total"}}) or the
// peer's ({"key","start_ms","n","total"}).
type windowOut struct {
	Key     string `json:"key"`
	StartMs *int64 `json:"start_ms"`
	N       *int64 `json:"n"`
	Total   *int64 `json:"total"`
	Window  struct {
		StartMs *int64 `json:"start_ms"`
	} `json:"window"`
	Results struct {
		N     *int64 `json:"n"`
		Total *int64 `json:"total"`
	} `json:"results"`
}

func (o windowOut) normal() (winKey, winResult, error) {
	start, n, total := o.StartMs, o.N, o.Total
	if start == nil {
		start, n, total = o.Window.StartMs, o.Results.N, o.Results.Total
	}
	if start == nil || n == nil || total == nil || o.Key == "" {
		return winKey{}, winResult{}, errors.New("no key, window start, n or total")
	}
	return winKey{o.Key, *start}, winResult{*n, *total}, nil
}

// checkWindows reads topic read_committed and sets res.Error unless it
// holds exactly the expected windows, each once, with the expected count
// and sum: a run that is fast but wrong does not count.
func (r *runner) checkWindows(ctx context.Context, res *caseResult, topic string) {
	got, dups, bad, err := r.readWindows(ctx, topic, len(r.win.want))
	if err != nil {
		res.Error = "check results: " + err.Error()
		return
	}
	var problems []string
	if bad > 0 {
		problems = append(problems, fmt.Sprintf("%d unreadable results", bad))
	}
	if dups > 0 {
		problems = append(problems, fmt.Sprintf("%d windows emitted more than once", dups))
	}
	var missing, wrong, extra int
	var sum int64
	for w, want := range r.win.want {
		g, ok := got[w]
		switch {
		case !ok:
			missing++
		case g != want:
			wrong++
		}
	}
	for w, g := range got {
		sum += g.n
		if _, ok := r.win.want[w]; !ok {
			extra++
		}
	}
	if missing+wrong+extra > 0 {
		problems = append(problems, fmt.Sprintf("%d windows missing, %d wrong, %d unexpected", missing, wrong, extra))
	}
	if sum != int64(r.win.events) {
		problems = append(problems, fmt.Sprintf("counts sum to %d, want %d", sum, r.win.events))
	}
	if len(problems) > 0 {
		res.Error = "wrong results: " + strings.Join(problems, "; ")
		return
	}
	res.Note += fmt.Sprintf("; checked: %d windows, each once, counts and sums as computed, counts sum to %d", len(got), sum)
}

// readWindows reads every committed record of topic, read_committed: it
// polls until it has want results, then until a poll of a second brings
// nothing more, to see any extra ones. dups counts windows seen again, bad unreadable values.
func (r *runner) readWindows(ctx context.Context, topic string, want int) (map[winKey]winResult, int, int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(r.cfg.brokers, ",")...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, 0, 0, err
	}
	defer cl.Close()
	got := map[winKey]winResult{}
	var seen, dups, bad int
	deadline := time.Now().Add(60 * time.Second)
	extra := false
	for {
		wait := 5 * time.Second
		if extra {
			wait = time.Second
		}
		pctx, cancel := context.WithTimeout(ctx, wait)
		before := seen
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, 0, 0, err
		}
		fs.EachRecord(func(rec *kgo.Record) {
			seen++
			var o windowOut
			if err := json.Unmarshal(rec.Value, &o); err != nil {
				bad++
				return
			}
			w, v, err := o.normal()
			if err != nil {
				bad++
				return
			}
			if _, ok := got[w]; ok {
				dups++
			}
			got[w] = v
		})
		switch {
		case extra && seen == before:
			return got, dups, bad, nil
		case seen >= want:
			extra = true
		case time.Now().After(deadline):
			return got, dups, bad, nil // the check reports what is missing
		}
	}
}
