package stage

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
	"github.com/exactly-io/exactly/topology/topologytest"
)

// keyStage returns a stage keyed by field ev with the transform steps
// (none: the pass-through path). It is never run: the tests call
// recordOutputs.
func keyStage(t *testing.T, steps string) *Stage {
	t.Helper()
	var opts []Option
	if steps != "" {
		f, err := topology.Parse("k.yaml", []byte(topologytest.Stage("127.0.0.1:1", "s", 1, "    key: ev\n    transform:\n"+steps)), nil)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := transform.Compile(f, transform.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, WithTransform(ps["s"]))
	}
	s, err := New(Config{Stage: "s", InstanceID: "i1", Brokers: []string{"127.0.0.1:1"}, Input: "in", Output: "out", DeadLetter: "dlq", KeyField: "ev"}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKeyFieldReads: the stage's key field reads the top-level
// object, so a value whose top-level keys are not unique is a dead letter
// (reason key) naming the duplicate, on the pass-through path and after
// transform steps alike, and never keyed by one of the copies. Duplicates
// inside a nested object, which the key lookup does not read, pass. A
// number key is its text when it has an exact value, else a dead letter.
func TestKeyFieldReads(t *testing.T) {
	tests := []struct {
		name, in string
		key      string // the output key, or
		wantErr  string // the dead letter's error
		inexact  bool   // wantErr is serde.ErrInexact's, not ErrDuplicateKey's
	}{
		{name: "unique", in: `{"ev":"a1","s":"x"}`, key: "a1"},
		{name: "the key field twice", in: `{"ev":"t20","s":"x","ev":"t20b"}`, wantErr: `field "ev": duplicate key "ev" in object`},
		{name: "another field twice", in: `{"ev":"t02","s":"a","s":"b"}`, wantErr: `field "s": duplicate key "s" in object`},
		{name: "an escaped duplicate", in: `{"ev":"t01","s":"a","\u0073":"b"}`, wantErr: `field "s": duplicate key "s" in object (written "s" and "\u0073")`},
		{name: "the key field escaped", in: `{"\u0065v":"t03","ev":"t03b"}`, wantErr: `field "ev": duplicate key "ev" in object (written "\u0065v" and "ev")`},
		{name: "a nested object is not read", in: `{"ev":"n1","n":{"a":1,"a":2},"l":[{"q":1,"q":2}]}`, key: "n1"},
		{name: "a large object", in: `{"ev":"b1",` + strings.Repeat(`"p":0,`, 40) + `"z":1}`, wantErr: `field "p": duplicate key "p" in object`},
		// A number key is read as a key step reads it: its text, if it
		// has an exact value; 1e400 and 2^63 are refused here, as a key
		// step refuses them.
		{name: "a number keeps its text", in: `{"ev":1E2}`, key: "1E2"},
		{name: "int64 max", in: `{"ev":9223372036854775807}`, key: "9223372036854775807"},
		{name: "minus zero", in: `{"ev":-0}`, key: "-0"},
		{name: "beyond int64", in: `{"ev":9223372036854775808}`, inexact: true, wantErr: `field "ev": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		{name: "below int64", in: `{"ev":-9223372036854775809}`, inexact: true, wantErr: `is beyond the range of a 64-bit integer`},
		{name: "overflows a double", in: `{"ev":1e400}`, inexact: true, wantErr: `field "ev": number 1e400 is beyond the range of a double`},
		{name: "underflows a double", in: `{"ev":1e-400}`, inexact: true, wantErr: `field "ev": number 1e-400 underflows to zero`},
	}
	stages := map[string]string{
		"pass-through":     "",
		"unrelated filter": "      - filter: 'true'\n",
		"reads another":    "      - filter: 'has(value.z) || true'\n",
	}
	for path, steps := range stages {
		s := keyStage(t, steps)
		if (steps == "") != s.passJSON {
			t.Fatalf("%s: pass-through %v", path, s.passJSON)
		}
		for _, tc := range tests {
			t.Run(path+"/"+tc.name, func(t *testing.T) {
				outs, err := s.recordOutputs(context.Background(), &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte(tc.in)})
				if tc.wantErr != "" {
					var re *dlq.RecordError
					want := serde.ErrDuplicateKey
					if tc.inexact {
						want = serde.ErrInexact
					}
					if !errors.As(err, &re) || re.Reason != deadletter.ReasonKey || !errors.Is(err, want) || !strings.Contains(err.Error(), tc.wantErr) {
						t.Fatalf("outputs %v, error %v; want a %q dead letter with %q", outs, err, deadletter.ReasonKey, tc.wantErr)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(outs) != 1 || string(outs[0].Key) != tc.key || string(outs[0].Value) != tc.in {
					t.Fatalf("outputs %v, want one keyed %q with the input's bytes", outs, tc.key)
				}
			})
		}
	}
}
