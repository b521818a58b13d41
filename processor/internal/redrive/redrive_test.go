package redrive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/stage"
)

// deadLetter is the dead letter a stage writes for input in.
func deadLetter(stage string, in *kgo.Record) *kgo.Record {
	dl := dlq.DeadLetter("dlq", stage, in, &dlq.RecordError{Reason: deadletter.ReasonTransform, Step: "fail", Err: errors.New("boom")})
	dl.Partition, dl.Offset = 0, 42
	return dl
}

// input is a record of topic "in" written by an upstream stage "up": it
// carries that stage's lineage headers, and "trace".
func input(count string) *kgo.Record {
	r := &kgo.Record{Topic: "in", Partition: 2, Offset: 7, Key: []byte("k"), Value: []byte(`{"n":1}`),
		Timestamp: time.UnixMilli(1700000000123),
		Headers: []kgo.RecordHeader{
			{Key: stage.HeaderLineageStage, Value: []byte("up")},
			{Key: "trace", Value: []byte("t1")},
			{Key: stage.HeaderLineageTopic, Value: []byte("raw")},
			{Key: stage.HeaderLineagePartition, Value: []byte("0")},
			{Key: stage.HeaderLineageOffset, Value: []byte("113")},
			{Key: stage.HeaderLineageIndex, Value: []byte("0")},
		}}
	if count != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderCount, Value: []byte(count)})
	}
	return r
}

func TestParseAndRecord(t *testing.T) {
	dl, ok := Parse(deadLetter("s", input("2")))
	if !ok {
		t.Fatal("source headers not found")
	}
	if dl.Stage != "s" || dl.Reason != deadletter.ReasonTransform || dl.Step != "fail" || dl.Error != "boom" || dl.Count != 2 {
		t.Fatalf("parsed %+v", dl)
	}
	out := dl.Record()
	// No timestamp: the producer writes the time of writing, from which
	// the input's retention counts.
	if out.Topic != "in" || out.Partition != 2 || string(out.Key) != "k" || string(out.Value) != `{"n":1}` || !out.Timestamp.IsZero() {
		t.Fatalf("record %+v", out)
	}
	// The original headers, then the count and the original timestamp:
	// no exactly.dlq.* header, and no lineage of the upstream stage,
	// which did not write this record.
	want := []kgo.RecordHeader{{Key: "trace", Value: []byte("t1")}, {Key: HeaderCount, Value: []byte("3")},
		{Key: deadletter.HeaderRedriveTimestamp, Value: []byte("1700000000123")}}
	if len(out.Headers) != len(want) {
		t.Fatalf("headers %v, want %v", out.Headers, want)
	}
	for i := range want {
		if out.Headers[i].Key != want[i].Key || string(out.Headers[i].Value) != string(want[i].Value) {
			t.Fatalf("headers %v, want %v", out.Headers, want)
		}
	}
}

// bigInput is input("") with the value {"n":9007199254740993} (2^53 + 1).
func bigInput() *kgo.Record { return valueInput(`{"n":9007199254740993}`) }

// valueInput is input("") with the value v.
func valueInput(v string) *kgo.Record {
	r := input("")
	r.Value = []byte(v)
	return r
}

func TestClassify(t *testing.T) {
	envelope := deadLetter("s", input(""))
	envelope.Value = nil
	envelope.Headers = append(envelope.Headers, kgo.RecordHeader{Key: deadletter.HeaderValueOmitted, Value: []byte("2000000")})
	noSource := &kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: deadletter.HeaderStage, Value: []byte("s")}}}
	otherInput := input("")
	otherInput.Topic = "elsewhere"
	bigPartition := input("")
	bigPartition.Partition = 9
	// A dead letter of a record from the year 3000: sent back, the Go
	// client would write another timestamp (kafkaconn.CheckWritableTimestamp).
	farFuture := input("")
	farFuture.Timestamp = time.UnixMilli(32503680000000)
	tests := []struct {
		name  string
		rec   *kgo.Record
		where string
		check func(Report) bool
	}{
		{"redriven", deadLetter("s", input("")), "", func(r Report) bool { return r.Redriven == 1 }},
		{"redriven again under the limit", deadLetter("s", input("2")), "", func(r Report) bool { return r.Redriven == 1 }},
		{"at the limit", deadLetter("s", input("3")), "", func(r Report) bool {
			return len(r.Exhausted) == 1 && strings.Contains(r.Exhausted[0].Why, "redriven 3 times")
		}},
		{"another stage", deadLetter("t", input("")), "", func(r Report) bool { return r.OtherStage == 1 }},
		{"envelope", envelope, "", func(r Report) bool {
			return len(r.Unredrivable) == 1 && strings.Contains(r.Unredrivable[0].Why, "in/2@7")
		}},
		{"no source headers", noSource, "", func(r Report) bool { return len(r.Unredrivable) == 1 }},
		{"another source topic", deadLetter("s", otherInput), "", func(r Report) bool { return len(r.Unredrivable) == 1 }},
		{"partition gone", deadLetter("s", bigPartition), "", func(r Report) bool { return len(r.Unredrivable) == 1 }},
		{"timestamp the client cannot write", deadLetter("s", farFuture), "", func(r Report) bool {
			return len(r.Unredrivable) == 1 && strings.Contains(r.Unredrivable[0].Why, "32503680000000 ms")
		}},
		{"where selects", deadLetter("s", input("")), `reason == "transform" && value.n == 1.0 && headers.trace == "t1"`, func(r Report) bool { return r.Redriven == 1 }},
		{"where rejects", deadLetter("s", input("")), `step != "fail"`, func(r Report) bool { return r.NotSelected == 1 }},
		// 2^53 + 1 is not 2^53: the int is not rounded to a double first.
		{"where compares an int with a double exactly", deadLetter("s", bigInput()), `value.n != 9007199254740992.0`, func(r Report) bool { return r.Redriven == 1 }},
		// A field with no exact value (the dead letter's reason, often)
		// fails only an expression that reads it, as in a stage: the
		// value was handed over as its text, and value.n was "no such key".
		{"where reads a field beside one with no exact value", deadLetter("s", valueInput(`{"n":9007199254740993,"v":1e400,"s":"\ud800"}`)),
			`value.n > 9007199254740992.0 && has(value.v) && size(value) == 3`, func(r Report) bool { return r.Redriven == 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := Compile(tt.where)
			if err != nil {
				t.Fatal(err)
			}
			r := &run{cfg: Config{Stage: "s", Input: "in", MaxRedrives: 3}, sel: sel, parts: 3}
			var rep Report
			out, skip := r.redrive(tt.rec, &rep)
			if !tt.check(rep) {
				t.Fatalf("report %+v", rep)
			}
			if skip != (rep.Redriven == 0) || (out == nil) != skip {
				t.Fatalf("skip %v, record %v, report %+v", skip, out, rep)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	for _, src := range []string{`reason ==`, `nosuchvar == 1`, `"a string"`} {
		t.Run(src, func(t *testing.T) {
			if _, err := Compile(src); !errors.Is(err, ErrUsage) {
				t.Fatalf("Compile(%q) = %v, want a usage error", src, err)
			}
		})
	}
}

func TestReportPrint(t *testing.T) {
	rep := Report{Read: 4, Redriven: 1, NotSelected: 1,
		Exhausted:    []Ref{{Partition: 0, Offset: 5, Why: "redriven 3 times already (limit 3): boom"}},
		Unredrivable: []Ref{{Partition: 0, Offset: 6, Why: "envelope"}}}
	var b strings.Builder
	rep.Print(&b, "dlq", "in")
	want := `redrive dlq -> in: 4 read, 1 redriven, 1 not selected, 0 of other stages, 1 at the redrive limit, 1 not redrivable
  at limit dlq/0@5: redriven 3 times already (limit 3): boom
  not redrivable dlq/0@6: envelope
`
	if b.String() != want {
		t.Fatalf("report:\n%s\nwant:\n%s", b.String(), want)
	}
}

// Match reads a field when the expression reads it: one with no exact
// value is an error naming it, and a field beside it is read as it is.
func TestMatchReadsOnlyWhatItNames(t *testing.T) {
	dl := DeadLetter{Value: []byte(`{"n":2.50,"v":1e400}`)}
	for _, tc := range []struct {
		where, err string
		want       bool
	}{
		{where: `value.n == 2.5`, want: true},
		{where: `type(value.n) == double && type(value) == map`, want: true},
		{where: `value.v > 0.0`, err: `field "v": number 1e400 is beyond the range of a double`},
	} {
		sel, err := Compile(tc.where)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sel.Match(dl)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, %v; want an error naming %q", tc.where, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.where, got, err, tc.want)
		}
	}
}

// A redriven record that fails again keeps its original timestamp: the
// stage took it from the header, its dead letter names it, and the next
// redrive writes it in the header again, once.
func TestRedriveAgainKeepsOriginalTimestamp(t *testing.T) {
	in := input("1")
	in.Timestamp = time.UnixMilli(1700000000123)
	in.Headers = append(in.Headers, kgo.RecordHeader{Key: deadletter.HeaderRedriveTimestamp, Value: []byte("1700000000123")})
	dl, ok := Parse(deadLetter("s", in))
	if !ok {
		t.Fatal("source headers not found")
	}
	out := dl.Record()
	var got []string
	for _, h := range out.Headers {
		if h.Key == deadletter.HeaderRedriveTimestamp {
			got = append(got, string(h.Value))
		}
	}
	if len(got) != 1 || got[0] != "1700000000123" || !out.Timestamp.IsZero() {
		t.Fatalf("timestamp %v, %s headers %v; want the time of writing and one header 1700000000123", out.Timestamp, deadletter.HeaderRedriveTimestamp, got)
	}
}
