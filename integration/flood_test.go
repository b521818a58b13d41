//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/processor/deadletter"
)

// floodKind is what the stage must do with a generated record.
type floodKind int

const (
	floodValid  floodKind = iota // a JSON object with a unique event_id: output exactly once
	floodDrop                    // valid, with "drop": true: output by a plain stage, filtered by a filtering one
	floodBad                     // not a keyable JSON object: dead-lettered exactly once
	floodHuge                    // a valid 5 MB event: its output and its dead letter are too large; an envelope
	floodEither                  // valid JSON at the edge of a decoder's depth limit: output or dead letter, once
)

// floodRecord is one input record of the flood and, once produced, where
// it landed.
type floodRecord struct {
	kind       floodKind
	what       string // e.g. "random bytes", for messages
	id         string // the event ID of valid, drop and huge records
	key, value []byte
	partition  int32
	offset     int64
}

// floodInput returns n records mixing valid events with every kind of bad
// input, and huge 5 MB events spread among them. Deterministic for a seed.
func floodInput(n, huge int, seed uint64) []*floodRecord {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	valid := func(i int, extra string) []byte {
		return fmt.Appendf(nil, `{"event_id":"v-%d","n":%d,"note":"héllo ✓ #%d"%s}`, i, i, i, extra)
	}
	key := func(i int) []byte {
		if i%7 == 0 {
			return nil // a null key; the output is keyed by event_id
		}
		return fmt.Appendf(nil, "k-%d", i)
	}
	nest := func(depth int, open, close, inner string) []byte {
		return []byte(strings.Repeat(open, depth) + inner + strings.Repeat(close, depth))
	}
	hugeEvery := math.MaxInt
	if huge > 0 {
		hugeEvery = max(n/huge, 1)
	}
	recs := make([]*floodRecord, 0, n)
	for i := range n {
		r := &floodRecord{kind: floodBad, key: key(i)}
		switch {
		case i%hugeEvery == hugeEvery/2 && i/hugeEvery < huge:
			r.kind, r.what, r.id = floodHuge, "5 MB event", fmt.Sprintf("big-%d", i)
			pad := strings.Repeat("x", 5<<20)
			r.value = fmt.Appendf(nil, `{"event_id":%q,"n":%d,"pad":"%s"}`, r.id, i, pad)
		case i%20 <= 8 || i%20 >= 17:
			r.kind, r.what, r.id = floodValid, "valid event", fmt.Sprintf("v-%d", i)
			switch i % 11 {
			case 0: // \u0000 is valid JSON; it decodes to a NUL character
				r.what, r.value = "valid event with \\u0000 in a string", valid(i, `,"nul":"a\u0000b\u0000"`)
			case 1: // a NUL character in the event ID, hence in the output key
				r.what, r.id = "valid event with \\u0000 in its event_id", fmt.Sprintf("v-%d\x00nul", i)
				r.value = fmt.Appendf(nil, `{"event_id":"v-%d\u0000nul","n":%d}`, i, i)
			default:
				r.value = valid(i, "")
			}
		case i%20 == 9:
			r.kind, r.what, r.id, r.value = floodDrop, "valid event to filter", fmt.Sprintf("v-%d", i), valid(i, `,"drop":true`)
		case i%20 == 10:
			r.what = "random bytes"
			for r.value = nil; r.value == nil || json.Valid(r.value); {
				r.value = make([]byte, 1+rng.IntN(4096))
				for j := range r.value {
					r.value[j] = byte(rng.UintN(256))
				}
			}
		case i%20 == 11:
			full := valid(i, `,"more":[1,2,{"x":"y"}]`)
			r.what, r.value = "truncated JSON", full[:1+rng.IntN(len(full)-1)]
		case i%20 == 12:
			r.what = "invalid UTF-8"
			r.value = [][]byte{
				fmt.Appendf(nil, "{\"event_id\":\"u-%d\",\"s\":\"\xff\xfe\"}", i),
				fmt.Appendf(nil, "{\"event_id\":\"u-%d\xc3\"}", i),                // a cut multi-byte sequence
				fmt.Appendf(nil, "{\"\xed\xa0\x80\":1,\"event_id\":\"u-%d\"}", i), // a UTF-16 surrogate
				fmt.Appendf(nil, "{\"event_id\":\"u-%d\xc0\xaf\"}", i),            // an overlong '/'
			}[i/20%4]
		case i%20 == 13:
			r.what = "raw NUL bytes"
			r.value = [][]byte{
				fmt.Appendf(nil, "{\"event_id\":\"z-%d\",\"s\":\"a\x00b\"}", i),
				fmt.Appendf(nil, "\x00{\"event_id\":\"z-%d\"}", i),
				fmt.Appendf(nil, "{\"event_id\":\"z-%d\"}\x00", i),
				bytes.Repeat([]byte{0}, 1+i%100),
			}[i/20%4]
		case i%20 == 14:
			r.what = "null value"
			if i/20%2 == 0 {
				r.what, r.key = "null key and null value", nil
			}
		case i%20 == 15:
			r.what = "JSON that is no keyable object"
			r.value = []byte([]string{`[1,2,3]`, `"str"`, `42`, `null`, `{}`, `{"event_id":null}`, `{"other":1}`, `true`, ``, ` `}[i/20%10])
		case i%20 == 16:
			switch i / 20 % 5 {
			case 0:
				r.what, r.value = "10,000-level nested arrays", nest(10000, "[", "]", "")
			case 1:
				r.what, r.value = "10,001-level nested arrays", nest(10001, "[", "]", "1")
			case 2:
				r.what, r.value = "10,000-level nested objects", nest(10000, `{"a":`, "}", "1")
			case 3:
				r.what, r.value = "100,000 open brackets", bytes.Repeat([]byte("["), 100000)
			case 4:
				r.kind, r.what, r.id = floodEither, "an event holding 9,999-level nested arrays", fmt.Sprintf("deep-%d", i)
				r.value = fmt.Appendf(nil, `{"event_id":%q,"d":%s}`, r.id, nest(9999, "[", "]", ""))
			}
		}
		recs = append(recs, r)
	}
	return recs
}

// produceFlood writes recs to topic with franz-go (kcat cannot send 5 MB
// values from a line) and records where each landed.
func produceFlood(t *testing.T, topic string, recs []*floodRecord) {
	t.Helper()
	cl := kafkaClient(t, kgo.DefaultProduceTopic(topic),
		// Below the topic's max.message.bytes (6 MiB), above a 5 MB record.
		kgo.ProducerBatchMaxBytes(6_000_000), kgo.MaxBufferedBytes(256<<20))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, 1)
	for _, r := range recs {
		cl.Produce(ctx, &kgo.Record{Key: r.key, Value: r.value}, func(kr *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- fmt.Errorf("%s: %w", r.what, err):
				default:
				}
				return
			}
			r.partition, r.offset = kr.Partition, kr.Offset
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		t.Fatalf("produce to %s: %v", topic, err)
	default:
	}
}

// readCommitted returns every data record of topic, read with
// isolation.level=read_committed up to each partition's last stable offset.
func readCommitted(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	ends := committedEnds(t, topic)
	cl := readCommittedClient(t, topic,
		// Markers are returned, so the last offset of every partition is seen.
		kgo.KeepControlRecords(), kgo.FetchMaxPartitionBytes(8<<20))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	next := map[int32]int64{}
	atEnd := func() bool {
		for p, end := range ends {
			if next[p] < end {
				return false
			}
		}
		return true
	}
	var recs []*kgo.Record
	for !atEnd() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: at %v of read_committed ends %v after 2m", topic, next, ends)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("read %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			next[r.Partition] = r.Offset + 1
			if !r.Attrs.IsControl() {
				recs = append(recs, r)
			}
		})
	}
	return recs
}

// alive fails the test at once if p has exited.
func (p *proc) alive() bool {
	p.t.Helper()
	select {
	case <-p.done:
		p.t.Fatalf("exactly exited (%v) while it should be running; logs:\n%s", p.err, tail(p.logs.String(), 60))
		return false
	default:
		return true
	}
}

// waitMetrics waits until p serves /metrics on addr.
func waitMetrics(t testing.TB, p *proc, addr string) {
	t.Helper()
	eventually(t, 30*time.Second, func() bool {
		p.alive()
		code, _ := get(t, "http://"+addr+"/metrics")
		return code == 200
	}, func() string { return "no /metrics on " + addr })
}

// peakRSS returns the VmHWM (peak resident set size) of pid, in bytes.
func peakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read peak RSS: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// longestTransaction returns the upper bound of the histogram bucket that
// holds stage's longest committed transaction, and the transaction count.
func longestTransaction(t testing.TB, m map[string]float64, stage string) (bound float64, count float64) {
	t.Helper()
	count, _ = sum(m, "exactly_stage_transaction_duration_seconds_count", map[string]string{"stage": stage})
	bound = math.Inf(1)
	for series, v := range m {
		name, labels, _ := strings.Cut(series, "{")
		if name != "exactly_stage_transaction_duration_seconds_bucket" || !strings.Contains(labels, fmt.Sprintf("stage=%q", stage)) {
			continue
		}
		_, le, _ := strings.Cut(labels, `le="`)
		le, _, _ = strings.Cut(le, `"`)
		b, err := strconv.ParseFloat(le, 64)
		if err != nil {
			t.Fatalf("bucket %s: %v", series, err)
		}
		if v == count && b < bound {
			bound = b
		}
	}
	return bound, count
}

// TestBadInputFlood floods two stages that read the same input topic with
// every kind of malformed record, 5 MB events among them: a plain JSON
// stage (the pass-through path, which never decodes a record whole) and a
// stage with a filter step (the decoding path). Each must keep running and
// account for every input record exactly once: output, dead letter or
// filtered out, never two of them and never twice. The 5 MB events are too
// large for the output topic (1 MB) and their dead letters for the
// dead-letter topic (1 MB): each must end as a size-bounded envelope,
// without a transaction waiting out the transaction timeout.
//
// EXACTLY_FLOOD_RECORDS sets the record count (default 100000,
// about 30 s here), EXACTLY_FLOOD_HUGE the number of 5 MB
// events (default 3), EXACTLY_FLOOD_SEED the generator's seed, and EXACTLY_FLOOD_MAX_RSS_MB
// the peak RSS allowed (default 1024). The binary is built without -race,
// so that the peak RSS is the product's, not the race detector's.
func TestBadInputFlood(t *testing.T) {
	n := envInt("EXACTLY_FLOOD_RECORDS", 100000)
	huge := envInt("EXACTLY_FLOOD_HUGE", 3)
	seed := uint64(envInt("EXACTLY_FLOOD_SEED", int(time.Now().UnixNano()%1e9)))
	maxRSS := int64(envInt("EXACTLY_FLOOD_MAX_RSS_MB", 1024)) << 20
	const txnTimeout = 60 * time.Second
	t.Logf("%d records, %d of them 5 MB, seed %d (EXACTLY_FLOOD_SEED to replay)", n, huge, seed)

	in := uniqueName("flood_in")
	type stage struct {
		name, out, dlq string
		filters        bool
	}
	stages := []stage{
		{name: uniqueName("flood_plain"), out: uniqueName("flood_out"), dlq: uniqueName("flood_dlq")},
		{name: uniqueName("flood_filter"), out: uniqueName("flood_out"), dlq: uniqueName("flood_dlq"), filters: true},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nkafka:\n  brokers: [%q]\n  transaction_timeout: %s\ntopics:\n", brokers(t), txnTimeout)
	fmt.Fprintf(&b, "  - { name: %s, partitions: 3, config: { max.message.bytes: \"6291456\" } }\n", in)
	for _, s := range stages {
		// The output and dead-letter topics keep the broker's default
		// max.message.bytes, about 1 MB.
		fmt.Fprintf(&b, "  - { name: %s, partitions: 3 }\n  - { name: %s, partitions: 1 }\n", s.out, s.dlq)
	}
	b.WriteString("stages:\n")
	for _, s := range stages {
		st := stageYAML{
			name: s.name, in: in, out: s.out, dlq: s.dlq,
			format: "json", key: "event_id", interval: "100ms", maxRecords: 250,
		}
		if s.filters {
			st.transform = "- filter: '!has(value.drop)'"
		}
		b.WriteString(st.yaml())
	}
	topo := writeFile(t, "topology.yaml", b.String())
	exactlyCmd(t, "topics", "create", topo)

	recs := floodInput(n, huge, seed)
	started := time.Now()
	produceFlood(t, in, recs)
	bySource := make(map[[2]int64]*floodRecord, len(recs))
	kinds := map[floodKind]int{}
	for _, r := range recs {
		bySource[[2]int64{int64(r.partition), r.offset}] = r
		kinds[r.kind]++
	}
	if len(bySource) != n {
		t.Fatalf("%d distinct input positions for %d records", len(bySource), n)
	}
	t.Logf("produced in %s: %d valid, %d valid to filter, %d bad, %d huge, %d at the depth limit",
		time.Since(started).Round(time.Millisecond), kinds[floodValid], kinds[floodDrop], kinds[floodBad], kinds[floodHuge], kinds[floodEither])

	bin := buildBin(t, false, "../cmd/exactly")
	addr := freeAddr(t)
	started = time.Now()
	p := startBin(t, bin, nil, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", addr)
	waitMetrics(t, p, addr)
	accounted := func(m map[string]float64, s stage) (consumed, out, dead, filtered float64) {
		st := map[string]string{"stage": s.name}
		consumed, _ = sum(m, "exactly_stage_records_consumed_total", st)
		out, _ = sum(m, "exactly_stage_records_produced_total", st)
		dead, _ = sum(m, "exactly_stage_records_dead_lettered_total", st)
		filtered, _ = sum(m, "exactly_stage_records_filtered_total", st)
		return
	}
	var m map[string]float64
	progress := func() string {
		var parts []string
		for _, s := range stages {
			c, o, d, f := accounted(m, s)
			parts = append(parts, fmt.Sprintf("%s: consumed %v, out %v + dead letters %v + filtered %v of %d", s.name, c, o, d, f, n))
		}
		return strings.Join(parts, "; ")
	}
	// Done when every stage's committed transactions account for every
	// input record; the process must stay up all along. The bound only
	// catches a stall: on a loaded 2-core machine (a CI run beside a
	// cluster run) the filter stage once needed more than 5 minutes.
	eventually(t, 12*time.Minute, func() bool {
		p.alive()
		m = scrape(t, addr)
		for _, s := range stages {
			_, o, d, f := accounted(m, s)
			if o+d+f < float64(n) {
				return false
			}
		}
		return true
	}, progress)
	elapsed := time.Since(started)
	p.alive()
	rss := peakRSS(t, p.cmd.Process.Pid)
	m = scrape(t, addr)
	t.Logf("all %d records accounted for in %s; peak RSS (VmHWM) %.1f MiB; %s", n, elapsed.Round(time.Millisecond), float64(rss)/(1<<20), progress())

	for _, s := range stages {
		st := map[string]string{"stage": s.name}
		consumed, out, dead, filtered := accounted(m, s)
		// consumed counts polls: the records of aborted transactions
		// (refused records, see below) are polled again.
		if consumed < float64(n) || out+dead+filtered != float64(n) {
			t.Errorf("%s: consumed %v, out %v + dead letters %v + filtered %v = %v; want %d", s.name, consumed, out, dead, filtered, out+dead+filtered, n)
		}
		if v, _ := sum(m, "exactly_stage_transactions_aborted_total", map[string]string{"stage": s.name, "reason": abortError}); v != 0 {
			t.Errorf("%s: %v transactions failed to end (reason %q)", s.name, v, abortError)
		}
		if v, _ := sum(m, "exactly_stage_session_rebuilds_total", st); v != 0 {
			t.Errorf("%s: the Kafka session was rebuilt %v times", s.name, v)
		}
		longest, txns := longestTransaction(t, m, s.name)
		if longest > txnTimeout.Seconds()/2 {
			t.Errorf("%s: the longest of %v committed transactions took up to %vs, over half the transaction timeout %s", s.name, txns, longest, txnTimeout)
		}
		retried, _ := sum(m, "exactly_stage_transactions_aborted_total", map[string]string{"stage": s.name, "reason": abortRetry})
		byReason := map[string]float64{}
		for _, reason := range []string{deadletter.ReasonDecode, deadletter.ReasonKey, deadletter.ReasonTransform, deadletter.ReasonEncode, deadletter.ReasonProduce} {
			byReason[reason], _ = sum(m, "exactly_stage_records_dead_lettered_total", map[string]string{"stage": s.name, "reason": reason})
		}
		t.Logf("%s: %v committed transactions, the longest ≤ %vs; %v aborted and retried (refused records); dead letters by reason %v",
			s.name, txns, longest, retried, byReason)
	}
	if rss > maxRSS {
		t.Errorf("peak RSS %.1f MiB, over the %d MiB allowed (EXACTLY_FLOOD_MAX_RSS_MB)", float64(rss)/(1<<20), maxRSS>>20)
	}
	p.alive()
	p.stop()

	for _, s := range stages {
		checkFlood(t, s.name, in, s.out, s.dlq, s.filters, bySource, m)
	}
}

// checkFlood requires that every input record of the flood is in the
// output of stage exactly once, or in its dead-letter topic exactly once,
// or, for a filtering stage's records to drop, in neither.
func checkFlood(t *testing.T, stage, in, out, dlq string, filters bool, bySource map[[2]int64]*floodRecord, m map[string]float64) {
	t.Helper()
	seen := map[[2]int64]string{} // input position -> "output" or "dead letter"
	source := func(r *kgo.Record, what, partHeader, offHeader string) (*floodRecord, bool) {
		ps, _ := header(r, partHeader)
		offs, _ := header(r, offHeader)
		p, err1 := strconv.ParseInt(ps, 10, 32)
		o, err2 := strconv.ParseInt(offs, 10, 64)
		if err1 != nil || err2 != nil {
			t.Errorf("%s: %s at %d@%d names no source (%s=%q, %s=%q)", stage, what, r.Partition, r.Offset, partHeader, ps, offHeader, offs)
			return nil, false
		}
		pos := [2]int64{p, o}
		src, ok := bySource[pos]
		if !ok {
			t.Errorf("%s: %s at %d@%d names source %d@%d, which is no input record", stage, what, r.Partition, r.Offset, p, o)
			return nil, false
		}
		if prev, dup := seen[pos]; dup {
			t.Errorf("%s: input %d@%d (%s) is both in the %s and in the %s", stage, p, o, src.what, prev, what)
		}
		seen[pos] = what
		return src, true
	}

	outs := readCommitted(t, out)
	ids := map[string]int{}
	for _, r := range outs {
		src, ok := source(r, "output", processor.HeaderLineagePartition, processor.HeaderLineageOffset)
		if !ok {
			continue
		}
		switch {
		case src.kind == floodValid, src.kind == floodDrop && !filters, src.kind == floodEither:
		default:
			t.Errorf("%s: input %d@%d (%s) was output; want it dead-lettered or filtered", stage, src.partition, src.offset, src.what)
			continue
		}
		ids[src.id]++
		if string(r.Key) != src.id {
			t.Errorf("%s: output of %s keyed %q, want its event_id %q", stage, src.what, r.Key, src.id)
		}
		if !bytes.Equal(r.Value, src.value) {
			t.Errorf("%s: output of %s holds %.80q, want the input's bytes %.80q", stage, src.what, r.Value, src.value)
		}
	}

	dls := readCommitted(t, dlq)
	envelopes, maxDL := 0, 0
	for _, r := range dls {
		maxDL = max(maxDL, len(r.Value))
		src, ok := source(r, "dead letter", deadletter.HeaderSourcePartition, deadletter.HeaderSourceOffset)
		if !ok {
			continue
		}
		reason, _ := header(r, deadletter.HeaderReason)
		errText, _ := header(r, deadletter.HeaderError)
		if reason == "" || errText == "" {
			t.Errorf("%s: dead letter of %s lacks a reason or error: %q, %q", stage, src.what, reason, errText)
		}
		if topic, _ := header(r, deadletter.HeaderSourceTopic); topic != in {
			t.Errorf("%s: dead letter of %s names source topic %q, want %q", stage, src.what, topic, in)
		}
		switch src.kind {
		case floodBad, floodEither:
			if !bytes.Equal(r.Key, src.key) || !bytes.Equal(r.Value, src.value) || (r.Value == nil) != (src.value == nil) {
				t.Errorf("%s: dead letter of %s: key %q and %d value bytes, want the input's key %q and %d bytes", stage, src.what, r.Key, len(r.Value), src.key, len(src.value))
			}
		case floodHuge:
			envelopes++
			omitted, _ := header(r, deadletter.HeaderValueOmitted)
			if r.Value != nil || omitted != strconv.Itoa(len(src.value)) || reason != deadletter.ReasonProduce || !bytes.Equal(r.Key, src.key) {
				t.Errorf("%s: dead letter of %s: reason %q, %d value bytes, key %q, %s=%q; want an envelope: reason %s, no value, key %q, %s=%d",
					stage, src.what, reason, len(r.Value), r.Key, deadletter.HeaderValueOmitted, omitted, deadletter.ReasonProduce, src.key, deadletter.HeaderValueOmitted, len(src.value))
			}
		default:
			t.Errorf("%s: %s was dead-lettered (%s: %s); want it output", stage, src.what, reason, errText)
		}
	}

	// Whatever is in neither topic was filtered out: exactly the valid
	// events marked drop, and only by the filtering stage.
	filtered, outputs, deadLetters, either := 0, 0, 0, 0
	for pos, src := range bySource {
		where, ok := seen[pos]
		switch {
		case !ok && src.kind == floodDrop && filters:
			filtered++
		case !ok:
			t.Errorf("%s: input %d@%d (%s) is in neither the output nor the dead letters: lost", stage, pos[0], pos[1], src.what)
		case where == "output":
			outputs++
		default:
			deadLetters++
		}
		if src.kind == floodEither && where == "output" {
			either++
		}
		if (src.kind == floodValid || src.kind == floodDrop && !filters) && ids[src.id] != 1 {
			t.Errorf("%s: event %q is in the output %d times, want once", stage, src.id, ids[src.id])
		}
	}
	if len(outs) != outputs || len(dls) != deadLetters {
		t.Errorf("%s: %d outputs and %d dead letters read, but they name %d and %d distinct inputs", stage, len(outs), len(dls), outputs, deadLetters)
	}
	if outputs+deadLetters+filtered != len(bySource) {
		t.Errorf("%s: out %d + dead letters %d + filtered %d = %d, want %d", stage, outputs, deadLetters, filtered, outputs+deadLetters+filtered, len(bySource))
	}
	st := map[string]string{"stage": stage}
	mo, _ := sum(m, "exactly_stage_records_produced_total", st)
	md, _ := sum(m, "exactly_stage_records_dead_lettered_total", st)
	mf, _ := sum(m, "exactly_stage_records_filtered_total", st)
	if mo != float64(len(outs)) || md != float64(len(dls)) || mf != float64(filtered) {
		t.Errorf("%s: metrics say out %v, dead letters %v, filtered %v; the topics hold %d, %d and %d filtered", stage, mo, md, mf, len(outs), len(dls), filtered)
	}
	t.Logf("%s: in %d = out %d + dead letters %d (%d envelopes; largest dead letter %d bytes) + filtered %d; %d of the events at the depth limit were output",
		stage, len(bySource), outputs, deadLetters, envelopes, maxDL, filtered, either)
}

// TestSlowTransform runs a Go transform that blocks for 20 s, ignoring its
// context, on one record, under a 10 s transaction timeout. The record
// must be dead-lettered as timed out after the per-record deadline (half
// the transaction timeout), every other event output exactly once, and the
// stage keep running: no transaction aborted by the broker, no replay loop.
func TestSlowTransform(t *testing.T) {
	const events = 300
	bin := buildBin(t, true, "./testdata/slowbin")
	in, out, dlq, stage := uniqueName("slow_in"), uniqueName("slow_out"), uniqueName("slow_dlq"), uniqueName("slow")
	topo := stagesTopology{txnTimeout: "10s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, format: "json", key: "event_id", interval: "100ms", maxRecords: 100,
		transform: "- func: slow",
	}}}.write(t)
	if out, err := exec.Command(bin, "validate", topo).CombinedOutput(); err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	exactlyCmd(t, "topics", "create", topo)
	lines := func(from, to int) [][]byte {
		var ls [][]byte
		for i := from; i < to; i++ {
			ls = append(ls, fmt.Appendf(nil, `k-%d|{"event_id":"e-%d","n":%d}`, i, i, i))
		}
		return ls
	}
	kcatProduce(t, in, lines(0, events))

	addr := freeAddr(t)
	started := time.Now()
	p := startBin(t, bin, nil, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", addr)
	waitMetrics(t, p, addr)
	st := map[string]string{"stage": stage}
	var m map[string]float64
	eventually(t, 2*time.Minute, func() bool {
		p.alive()
		m = scrape(t, addr)
		o, _ := sum(m, "exactly_stage_records_produced_total", st)
		d, _ := sum(m, "exactly_stage_records_dead_lettered_total", st)
		return o+d >= events
	}, func() string {
		o, _ := sum(m, "exactly_stage_records_produced_total", st)
		d, _ := sum(m, "exactly_stage_records_dead_lettered_total", st)
		return fmt.Sprintf("out %v + dead letters %v of %d", o, d, events)
	})
	t.Logf("all %d events accounted for %s after the start", events, time.Since(started).Round(time.Millisecond))

	// Outlive the abandoned call (20 s), then send more: the stage still
	// works, and nothing the abandoned call returns late shows up.
	time.Sleep(time.Until(started.Add(25 * time.Second)))
	p.alive()
	kcatProduce(t, in, lines(events, events+100))
	eventually(t, time.Minute, func() bool {
		p.alive()
		m = scrape(t, addr)
		o, _ := sum(m, "exactly_stage_records_produced_total", st)
		return o >= events+100-1
	}, func() string {
		o, _ := sum(m, "exactly_stage_records_produced_total", st)
		return fmt.Sprintf("out %v of %d", o, events+100-1)
	})
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"exactly_stage_records_produced_total", st, events + 100 - 1},
		{"exactly_stage_records_dead_lettered_total", st, 1},
		{"exactly_stage_records_dead_lettered_total", map[string]string{"stage": stage, "reason": deadletter.ReasonTransform}, 1},
		{"exactly_stage_transactions_aborted_total", st, 0},
		{"exactly_stage_session_rebuilds_total", st, 0},
	} {
		if got, _ := sum(m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	p.alive()
	p.stop()

	seen := map[string]int{}
	for _, r := range readCommitted(t, out) {
		seen[string(r.Key)]++
	}
	for i := range events + 100 {
		id := "e-" + strconv.Itoa(i)
		want := 1
		if id == "e-13" {
			want = 0
		}
		if seen[id] != want {
			t.Errorf("%s: event %s is in the output %d times, want %d", out, id, seen[id], want)
		}
		delete(seen, id)
	}
	if len(seen) > 0 {
		t.Errorf("%s: unexpected outputs %v", out, seen)
	}
	dls := readCommitted(t, dlq)
	if len(dls) != 1 {
		t.Fatalf("%s: %d dead letters, want 1 (e-13)", dlq, len(dls))
	}
	r := dls[0]
	reason, _ := header(r, deadletter.HeaderReason)
	errText, _ := header(r, deadletter.HeaderError)
	step, _ := header(r, deadletter.HeaderStep)
	if string(r.Key) != "k-13" || reason != deadletter.ReasonTransform || !strings.Contains(errText, "timed out") || !utf8.Valid(r.Value) ||
		!strings.Contains(string(r.Value), `"e-13"`) {
		t.Errorf("dead letter: key %q, reason %q, step %q, error %q, value %q; want k-13's record, reason transform, an error saying timed out",
			r.Key, reason, step, errText, r.Value)
	}
	t.Logf("e-13 dead-lettered: reason %s, step %q, error %q", reason, step, errText)
}
