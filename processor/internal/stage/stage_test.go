package stage_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/audit"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/health"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/serde"
)

// produceInput writes n valid events and the bad records, and returns the
// number of bad records.
func produceInput(t *testing.T, seeds []string, n int) int {
	t.Helper()
	cl := newClient(t, seeds)
	var recs []*kgo.Record
	for i := range n {
		v := fmt.Sprintf(`{"event_id":"e-%d","amount":%d}`, i, i)
		recs = append(recs, &kgo.Record{Topic: inTopic, Key: []byte(strconv.Itoa(i)), Value: []byte(v)})
	}
	bad := [][]byte{
		[]byte(`{"event_id":`),                // truncated JSON
		[]byte("{\"event_id\":\"\xff\xfe\"}"), // invalid UTF-8
		nil,                                   // tombstone
		[]byte(`null`),                        // JSON null
		[]byte(`{"amount":1}`),                // no key field
		[]byte(`[1,2]`),                       // not an object
	}
	for i, b := range bad {
		recs = append(recs, &kgo.Record{Topic: inTopic, Key: []byte("bad-" + strconv.Itoa(i)), Value: b})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return len(bad)
}

func newStage(t *testing.T, seeds []string, opts ...stage.Option) *stage.Stage {
	t.Helper()
	return stageOf(t, seeds, "", 20*time.Millisecond, 50, opts...)
}

// runUntil runs s until its committed outputs and dead letters reach want,
// then stops it and returns Run's error.
func runUntil(t *testing.T, s *stage.Stage, want int64) error {
	t.Helper()
	return runUntilStats(t, s, func(st stage.Stats) bool { return st.Produced+st.DeadLettered >= want })
}

// checkExactlyOnce drains the output and dead-letter topics and checks that
// every event is in the output once and every bad record in the dead
// letters once.
func checkExactlyOnce(t *testing.T, seeds []string, events, bad int) {
	t.Helper()
	checkOutputsOnce(t, seeds, events)
	dlq := drain(t, seeds, dlqTopic)
	if len(dlq) != bad {
		t.Errorf("dead-letter topic has %d records, want %d", len(dlq), bad)
	}
	srcs := map[string]bool{}
	for _, r := range dlq {
		p := header(r, deadletter.HeaderSourcePartition)
		o, ok := audit.Header(r, deadletter.HeaderSourceOffset)
		if !ok {
			t.Errorf("dead letter %q has no source offset header", r.Key)
		}
		if srcs[p+"/"+o] {
			t.Errorf("two dead letters name source %s/%s", p, o)
		}
		srcs[p+"/"+o] = true
	}
}

func TestStageExactlyOnce(t *testing.T) {
	seeds := newCluster(t)
	bad := produceInput(t, seeds, 500)
	s := newStage(t, seeds)
	if err := runUntil(t, s, int64(500+bad)); err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkExactlyOnce(t, seeds, 500, bad)
}

func TestStageDeadLetterHeaders(t *testing.T) {
	seeds := newCluster(t)
	bad := produceInput(t, seeds, 0)
	if err := runUntil(t, newStage(t, seeds), int64(bad)); err != nil {
		t.Fatal(err)
	}
	dlq := drain(t, seeds, dlqTopic)
	wantReason := map[string]string{
		"bad-0": "decode", "bad-1": "decode", "bad-2": "decode", "bad-3": "decode", "bad-4": "key", "bad-5": "key",
	}
	wantErr := map[string]string{
		"bad-1": "invalid utf-8", "bad-2": "null value", "bad-3": "null value", "bad-4": `missing key field "event_id"`,
	}
	for _, r := range dlq {
		k := string(r.Key)
		if got := header(r, deadletter.HeaderReason); got != wantReason[k] {
			t.Errorf("%s: reason %q, want %q", k, got, wantReason[k])
		}
		if want, ok := wantErr[k]; ok {
			if got := header(r, deadletter.HeaderError); got != want {
				t.Errorf("%s: error %q, want %q", k, got, want)
			}
		}
		if got := header(r, deadletter.HeaderStage); got != "clean" {
			t.Errorf("%s: stage header %q", k, got)
		}
		if got := header(r, deadletter.HeaderSourceTopic); got != inTopic {
			t.Errorf("%s: source topic header %q", k, got)
		}
		if k == "bad-1" && string(r.Value) != "{\"event_id\":\"\xff\xfe\"}" {
			t.Errorf("bad-1: value changed to %q; dead letters keep the bytes as they came", r.Value)
		}
		if k == "bad-2" && r.Value != nil {
			t.Errorf("bad-2: tombstone value became %q", r.Value)
		}
	}
	if len(dlq) != bad {
		t.Fatalf("%d dead letters, want %d", len(dlq), bad)
	}
}

func TestStageCrashRecovery(t *testing.T) {
	for _, fp := range []string{failpoint.CrashBeforeCommit, failpoint.CrashAfterOffsetCommit, failpoint.CrashAfterCommit} {
		t.Run(fp, func(t *testing.T) {
			seeds := newCluster(t)
			bad := produceInput(t, seeds, 1000)
			st := crashStage(t, newStage, seeds, fp, 3)
			wantCommitted := int64(2)
			if fp == failpoint.CrashAfterCommit {
				wantCommitted = 3
			}
			if got := st.Committed; got != wantCommitted {
				t.Fatalf("committed %d transactions before the crash, want %d", got, wantCommitted)
			}
			// Same instance ID: the new producer fences the old one and
			// aborts its open transaction at once.
			restarted := newStage(t, seeds)
			if err := runUntil(t, restarted, int64(1000+bad)-st.Produced-st.DeadLettered); err != nil {
				t.Fatal(err)
			}
			checkExactlyOnce(t, seeds, 1000, bad)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  stage.Config
		want string
	}{
		{"empty", stage.Config{}, "stage is required"},
		{"bad format", stage.Config{Stage: "s", InstanceID: "i", Brokers: []string{"x:1"}, Input: "a", Output: "b", DeadLetter: "c", InputFormat: "xml"}, `input: format "xml"`},
		{"txn timeout beyond the protocol", stage.Config{Stage: "s", InstanceID: "i", Brokers: []string{"x:1"}, Input: "a", Output: "b", DeadLetter: "c", TransactionTimeout: 1000 * time.Hour}, "transaction timeout 1000h0m0s must be at most"},
		{"interval above txn timeout", stage.Config{Stage: "s", InstanceID: "i", Brokers: []string{"x:1"}, Input: "a", Output: "b", DeadLetter: "c", CommitInterval: time.Minute}, "must be below the transaction timeout"},
		{"fetch max bytes above 100 MiB", stage.Config{Stage: "s", InstanceID: "i", Brokers: []string{"x:1"}, Input: "a", Output: "b", DeadLetter: "c", FetchMaxBytes: 101 << 20}, "fetch max bytes 105906176 must be between 1024 and 104857600"},
		{"max buffered bytes below 1 MiB", stage.Config{Stage: "s", InstanceID: "i", Brokers: []string{"x:1"}, Input: "a", Output: "b", DeadLetter: "c", MaxBufferedBytes: 1000012}, "max buffered bytes 1000012 must be between 1048576 and 1073741824"},
		{"partition fetch bytes above fetch max", stage.Config{Stage: "s", InstanceID: "i", Brokers: []string{"x:1"}, Input: "a", Output: "b", DeadLetter: "c", FetchMaxBytes: 4096, MaxPartitionFetchBytes: 8192}, "max partition fetch bytes 8192 must be between 1024 and the fetch max bytes 4096"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stage.New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tc.want)
			}
			if !kafkaconn.IsFatal(err) {
				t.Fatalf("a config error must be fatal: %v", err)
			}
		})
	}
}

// A transient failure (here a Go transform whose backing service is down
// for a while) aborts and retries the transaction: nothing is
// dead-lettered and nothing is lost or doubled.
func TestStageTransientErrorRetries(t *testing.T) {
	seeds := newCluster(t)
	produceInput(t, seeds, 300)
	fail := failTransiently(3, nil)
	p := funcPipeline(t, "flaky", func(_ context.Context, r transform.Record) ([]transform.Record, error) {
		if err := fail(r); err != nil {
			return nil, err
		}
		return []transform.Record{r}, nil
	})
	s := newStage(t, seeds, stage.WithTransform(p))
	if err := runUntil(t, s, 300+6); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Aborted == 0 {
		t.Fatalf("no transaction was aborted: %+v", st)
	}
	checkExactlyOnce(t, seeds, 300, 6)
}

// A fault that is not the record's (a lookup that is down) aborts the
// transaction at its first record: the records after it in the fetch are
// not tried, each waiting out the same fault (a registry timeout per
// record would make one attempt last records x timeout, beyond the
// transaction timeout). Once the fault passes, every record comes out
// once.
func TestStageTransientErrorAbortsAtFirstRecord(t *testing.T) {
	seeds := newCluster(t)
	produceInput(t, seeds, 200)
	var down atomic.Bool
	var calls atomic.Int64
	down.Store(true)
	p := funcPipeline(t, "lookup", func(_ context.Context, r transform.Record) ([]transform.Record, error) {
		calls.Add(1)
		if down.Load() {
			return nil, fmt.Errorf("lookup down: %w", serde.ErrTransient)
		}
		return []transform.Record{r}, nil
	})
	s := newStage(t, seeds, stage.WithTransform(p))
	stop, done := runInBackground(t, s)
	waitStats(t, s, done, func(st stage.Stats) bool { return st.Aborted >= 3 })
	// Every attempt aborts at once, so no transaction stays open long
	// enough to read as a stall: past the stall limit (health.StallMin),
	// readiness says the transactions keep aborting.
	deadline := time.Now().Add(health.StallMin + 20*time.Second)
	for err := s.Ready(); err == nil || !strings.Contains(err.Error(), "aborted and was retried"); err = s.Ready() {
		if time.Now().After(deadline) {
			t.Fatalf("Ready = %v while every transaction aborts, want not ready naming the retries", err)
		}
		<-time.After(50 * time.Millisecond)
	}
	down.Store(false)
	st := s.Stats()
	// Each attempt tried one record; one more may be in flight.
	if c := calls.Load(); c > st.Aborted+1 {
		t.Errorf("%d records tried in %d aborted transactions, want one each", c, st.Aborted)
	}
	if st.Committed != 0 || st.Produced != 0 {
		t.Errorf("committed %d transactions, %d records while the lookup was down", st.Committed, st.Produced)
	}
	waitStats(t, s, done, func(st stage.Stats) bool { return st.Produced+st.DeadLettered >= 200+6 })
	if err := s.Ready(); err != nil {
		t.Errorf("Ready = %v after the fault passed and transactions committed", err)
	}
	stop()
	checkExactlyOnce(t, seeds, 200, 6)
}

// An output the broker refuses (here: larger than the producer's batch
// limit) does not stall the stage: the record is located by retrying one
// input record per transaction, and dead-lettered with reason produce.
func TestStageRefusedOutputIsDeadLettered(t *testing.T) {
	seeds := newCluster(t)
	bad := produceInput(t, seeds, 200)
	p := funcPipeline(t, "pad", func(_ context.Context, r transform.Record) ([]transform.Record, error) {
		if m, ok := r.Value.(map[string]any); ok && m["event_id"] == "e-7" {
			m["pad"] = strings.Repeat("x", 5000)
		}
		return []transform.Record{r}, nil
	})
	s := newStage(t, seeds, stage.WithTransform(p), stage.WithKafkaOptions(kgo.ProducerBatchMaxBytes(4096)))
	if err := runUntil(t, s, int64(200+bad)); err != nil {
		t.Fatal(err)
	}
	outs := drain(t, seeds, outTopic)
	seen := keyCounts(outs)
	if len(outs) != 199 || seen["e-7"] != 0 || seen["e-8"] != 1 {
		t.Fatalf("%d outputs (e-7: %d), want 199 without e-7", len(outs), seen["e-7"])
	}
	dlq := drain(t, seeds, dlqTopic)
	produce := 0
	for _, r := range dlq {
		if reason := header(r, deadletter.HeaderReason); reason == deadletter.ReasonProduce {
			produce++
		}
	}
	if len(dlq) != bad+1 || produce != 1 {
		t.Fatalf("%d dead letters (%d with reason produce), want %d with 1", len(dlq), produce, bad+1)
	}
}

// A record that merely carries the audit marker header is an event like
// any other; only a real marker (no key, no value) is forwarded.
func TestStageDoesNotDropSpoofedMarkers(t *testing.T) {
	seeds := newCluster(t)
	cl := newClient(t, seeds)
	hdr := []kgo.RecordHeader{{Key: audit.MarkerHeader, Value: []byte("x")}}
	if err := cl.ProduceSync(context.Background(),
		&kgo.Record{Topic: inTopic, Value: []byte(`{"event_id":"e-0"}`), Headers: hdr},
		&kgo.Record{Topic: inTopic, Value: []byte(`{"event_id":"e-1"}`)},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := runUntil(t, newStage(t, seeds), 2); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, seeds, 2, 0)
}

// At-least-once runs the same loop without transactions; with no crash,
// every event still comes out once.
func TestStageAtLeastOnce(t *testing.T) {
	seeds := newCluster(t)
	bad := produceInput(t, seeds, 500)
	s := stageOf(t, seeds, stage.AtLeastOnce, 20*time.Millisecond, 50)
	if err := runUntil(t, s, int64(500+bad)); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, seeds, 500, bad)
}

// A record too large for the output topic and for the dead-letter topic
// ends as a size-bounded envelope in the dead letters, and the stream goes
// on.
func TestStageOversizedRecordBecomesEnvelope(t *testing.T) {
	seeds := newCluster(t)
	cl := newClient(t, seeds)
	big := `{"event_id":"big","pad":"` + strings.Repeat("x", 6000) + `"}`
	recs := []*kgo.Record{{Topic: inTopic, Key: []byte("big"), Value: []byte(big)}}
	for i := range 50 {
		recs = append(recs, &kgo.Record{Topic: inTopic, Value: fmt.Appendf(nil, `{"event_id":"e-%d"}`, i)})
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := newStage(t, seeds, stage.WithKafkaOptions(kgo.ProducerBatchMaxBytes(4096)))
	if err := runUntil(t, s, 51); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, seeds, 50, 1)
	dlq := drain(t, seeds, dlqTopic)
	omitted := header(dlq[0], deadletter.HeaderValueOmitted)
	if dlq[0].Value != nil || omitted != strconv.Itoa(len(big)) || string(dlq[0].Key) != "big" {
		t.Fatalf("dead letter: key %q, %d value bytes, omitted %q; want an envelope of %d bytes", dlq[0].Key, len(dlq[0].Value), omitted, len(big))
	}
}

// A step that makes a value JSON null (explode of a list holding null)
// dead-letters its input record, naming the null value: the literal null
// is no event, and the next stage or the sink would refuse it as one.
// Sent on, it would only be dead-lettered downstream instead.
func TestStageNullOutputValueIsDeadLettered(t *testing.T) {
	seeds := newCluster(t)
	cl := newClient(t, seeds)
	recs := []*kgo.Record{
		{Topic: inTopic, Key: []byte("a"), Value: []byte(`{"event_id":"a","items":[{"event_id":"a1"},null]}`)},
		{Topic: inTopic, Key: []byte("b"), Value: []byte(`{"event_id":"b","items":[{"event_id":"b1"},{"event_id":"b2"}]}`)},
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	s := newStage(t, seeds, stage.WithTransform(cleanPipeline(t, nil, "      - explode: 'value.items'\n")))
	if err := runUntil(t, s, 3); err != nil {
		t.Fatal(err)
	}
	out, dead := drain(t, seeds, outTopic), drain(t, seeds, dlqTopic)
	got := map[string]bool{}
	for _, r := range out {
		got[string(r.Value)] = true
	}
	if len(out) != 2 || !got[`{"event_id":"b1"}`] || !got[`{"event_id":"b2"}`] {
		t.Fatalf("outputs %v, want b's two elements only", got)
	}
	if len(dead) != 1 || string(dead[0].Key) != "a" || header(dead[0], deadletter.HeaderReason) != deadletter.ReasonEncode || !strings.Contains(header(dead[0], deadletter.HeaderError), "JSON null") {
		t.Fatalf("dead letters %d (%v), want record a naming the null value", len(dead), dead[0].Headers)
	}
}
