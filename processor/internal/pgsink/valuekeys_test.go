package pgsink

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// valueKeysSink is a json sink whose $value goes to the jsonb column body,
// after a jsonb column meta of field meta.
func valueKeysSink(t *testing.T) *Sink {
	t.Helper()
	s := newTestSink(t, func(c *Config) {
		c.Columns = []Column{{"event_id", "event_id"}, {"meta", "meta"}, {"body", topology.SourceValue}, {"n", "n"}}
	})
	s.types = []colType{plainType("text"), plainType("jsonb"), plainType("jsonb"), plainType("bigint")}
	return s
}

// A json value going to a jsonb column has its keys checked at every depth
// in the pass that decodes its fields: a duplicate anywhere, in a field
// that no column maps too, dead-letters the record with reason decode,
// naming the column and the key's path, as a check of the column's text
// would; the first column in error is the one named.
func TestValueKeysOnePass(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        string // the dead letter's error, "" for a row
	}{
		{"flat", `{"event_id":"e1","n":1,"pad":"x"}`, ""},
		{"nested", `{"event_id":"e1","a":{"b":[{"c":1},{"d":{"e":2}}]},"meta":{"k":"v"}}`, ""},
		{"duplicate in an unmapped field", `{"event_id":"e1","a":{"b":1,"b":2}}`,
			`column "body": field "a.b": duplicate key "b" in object`},
		{"duplicate deep in an array", `{"event_id":"e1","a":[1,{"z":{"y":1,"\u0079":2}}]}`,
			`column "body": field "a[1].z.y": duplicate key "y" in object (written "y" and "\u0079")`},
		{"an earlier column's duplicate is named first", `{"event_id":"e1","meta":{"x":1,"x":2}}`,
			`column "meta": field "meta.x": duplicate key "x" in object`},
		{"a top-level duplicate stays a decode error", `{"event_id":"e1","a":1,"a":2}`,
			`field "a": duplicate key "a" in object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := valueKeysSink(t)
			r := &kgo.Record{Topic: "in", Value: []byte(tc.value)}
			if _, _, keys, err := s.decodeRow(r); keys == nil && err == nil {
				t.Fatal("the value's keys were not checked in its decode")
			}
			o, ok, err := s.toOp(r)
			if tc.want == "" {
				if err != nil || !ok || o.row[2] != tc.value {
					t.Fatalf("toOp = %v, %v, %v; want the row with body %s", o.row, ok, err, tc.value)
				}
				return
			}
			var re *dlq.RecordError
			if !errors.As(err, &re) || re.Reason != deadletter.ReasonDecode || re.Err.Error() != tc.want {
				t.Fatalf("toOp error %v, want reason %s, %q", err, deadletter.ReasonDecode, tc.want)
			}
			if !errors.Is(err, serde.ErrDuplicateKey) {
				t.Fatalf("toOp error %v is no serde.ErrDuplicateKey", err)
			}
		})
	}
}

// The verdict of the one pass is the one each column's check of its own
// text gives: the same rows and the same errors for every value.
func TestValueKeysSameAsColumnCheck(t *testing.T) {
	values := []string{
		`{"event_id":"e1","n":1}`, `{"event_id":"e1","meta":[{"a":1,"a":1}]}`, `{"event_id":"e1","x":{"a":1,"\u0061":2}}`,
		`{"event_id":"e1","meta":"{\"a\":1,\"a\":2}"}`, `{"event_id":"e1","n":"x","x":{"a":{},"a":[]}}`,
		`{"event_id":"","x":{"q":1,"q":1}}`, `{"n":1}`, `[{"a":1,"a":2}]`, `"{}"`, `{"event_id":"\udc00"}`,
		`{"event_id":"e1","x":[[[{"k":[{"j":1,"j":2}]}]]]}`,
	}
	for i, v := range values {
		s := valueKeysSink(t)
		r := &kgo.Record{Topic: "in", Offset: int64(i), Value: []byte(v)}
		got, gotOK, gotErr := s.toOp(r)
		// Each column checks its own text: no verdict from the decode.
		obj, err := serde.JSONFields(r.Value, s.fieldSources)
		var want op
		var wantOK bool
		wantErr := err
		if err != nil {
			wantErr = &dlq.RecordError{Reason: deadletter.ReasonDecode, Err: err}
		} else {
			want, wantOK, wantErr = s.rowOpSchema(r, obj, nil)
		}
		if !reflect.DeepEqual(got, want) || gotOK != wantOK || fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || reason(gotErr) != reason(wantErr) {
			t.Errorf("%s: one pass %v, %v, %v; column checks %v, %v, %v", v, got.row, gotOK, gotErr, want.row, wantOK, wantErr)
		}
	}
}

func reason(err error) string {
	var re *dlq.RecordError
	if errors.As(err, &re) {
		return string(re.Reason)
	}
	return ""
}
