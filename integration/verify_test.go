//go:build integration

package integration

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

// verify's memory: EXACTLY_VERIFY_EVENTS events (100k by default; the
// README's figure is for 1M) in a 6-partition input and, with lineage
// headers as a stage writes them, in its output; then verify runs in this
// process while the peak heap is sampled. A few outputs are doubled and a
// few inputs left without output, and verify must find exactly those.
func TestVerifyMemory(t *testing.T) {
	n := envInt("EXACTLY_VERIFY_EVENTS", 100000)
	in, out, dlq, stage := uniqueName("vin"), uniqueName("vout"), uniqueName("vdlq"), uniqueName("vstage")
	topo := topologyFile(t, []stageSpec{{stage, in, out, dlq}}, "100ms", "60s", 1000)
	f, err := topology.Load(topo)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cl := kafkaClient(t, kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100000))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 6, 1, nil, in); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 6, 1, nil, out); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, dlq); err != nil {
		t.Fatal(err)
	}

	// Every (n/7)th input loses its output and every (n/5)th output is
	// written twice; count them as the loop below decides, for any n.
	var lost, dup int64
	for i := range n {
		if i%(n/7) == 3 {
			lost++
		} else if i%(n/5) == 5 {
			dup++
		}
	}
	t0 := time.Now()
	var wg sync.WaitGroup
	var perr atomic.Pointer[error]
	var mu sync.Mutex
	var outs []*kgo.Record
	for i := range n {
		id := "e-" + strconv.Itoa(i)
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Topic: in, Key: []byte(id), Value: fmt.Appendf(nil, `{"event_id":%q}`, id)}, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				perr.Store(&err)
				return
			}
			if i%(n/7) == 3 {
				return // no output: lost
			}
			// As a stage writes it: the input's timestamp, which verify
			// matches to tell the input topic's incarnations apart.
			o := &kgo.Record{Topic: out, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: []kgo.RecordHeader{
				{Key: processor.HeaderLineageStage, Value: []byte(stage)},
				{Key: processor.HeaderLineageTopic, Value: []byte(in)},
				{Key: processor.HeaderLineagePartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
				{Key: processor.HeaderLineageOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
				{Key: processor.HeaderLineageIndex, Value: []byte("0")},
			}}
			mu.Lock()
			outs = append(outs, o)
			if i%(n/5) == 5 {
				outs = append(outs, o)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	if e := perr.Load(); e != nil {
		t.Fatal(*e)
	}
	for _, o := range outs {
		cl.Produce(ctx, &kgo.Record{Topic: o.Topic, Key: o.Key, Value: o.Value, Headers: o.Headers, Timestamp: o.Timestamp}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	outs = nil
	// The stage's group has committed everything: nothing is pending.
	ends, err := adm.ListEndOffsets(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	offs := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) { offs.AddOffset(in, o.Partition, o.Offset, -1) })
	if _, err := adm.CommitOffsets(ctx, "exactly-"+stage, offs); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d inputs and their outputs in %s", n, time.Since(t0).Round(time.Millisecond))

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	rep, err := processor.Verify(ctx, f, processor.VerifyOptions{EventID: "event_id", OpenTxnWait: time.Second})
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Stages[0]
	t.Logf("verify of %d events (%d records read) in %s: peak heap in use %.1f MiB (%.1f MiB before)",
		n, rep.Records, time.Duration(rep.Elapsed).Round(time.Millisecond), float64(peak.Load())/(1<<20), float64(base.HeapInuse)/(1<<20))
	if s.In != int64(n) || s.Lost != lost || s.Duplicates != dup || s.EventIDDuplicates != dup || rep.OK {
		t.Fatalf("verify: in %d lost %d duplicates %d event-ID duplicates %d ok %v; want in %d lost %d duplicates %d and not ok\n%v",
			s.In, s.Lost, s.Duplicates, s.EventIDDuplicates, rep.OK, n, lost, dup, s.Examples)
	}
}
