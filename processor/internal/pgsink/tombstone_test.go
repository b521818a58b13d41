package pgsink

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/serde"
)

// A tombstone is a null value, or of json input Connect's wrapped null
// {"schema": ..., "payload": null}; nothing else is.
func TestIsTombstone(t *testing.T) {
	for _, tt := range []struct {
		name   string
		format string
		value  []byte
		want   bool
	}{
		{"null value", serde.JSON, nil, true},
		{"connect null payload", serde.JSON, []byte(`{"schema":{"type":"struct","fields":[]},"payload":null}`), true},
		{"payload first, spaced", serde.JSON, []byte(` { "payload" : null , "schema" : {} } `), true},
		{"connect row", serde.JSON, []byte(`{"schema":{"type":"struct"},"payload":{"id":1}}`), false},
		{"payload null beside a third field", serde.JSON, []byte(`{"schema":{},"payload":null,"id":1}`), false},
		{"payload null alone", serde.JSON, []byte(`{"payload":null}`), false},
		{"json null", serde.JSON, []byte(`null`), false},
		{"invalid json", serde.JSON, []byte(`{"schema":{},"payload":null`), false},
		{"bytes input", "bytes", []byte(`{"schema":{},"payload":null}`), false},
		{"trailing white space", serde.JSON, []byte("{\"schema\":{},\"payload\":null \n}\r\n"), true},
		{"payload's key escaped", serde.JSON, []byte(`{"schema":{"payload":1},"pay\u006coad":null}`), true},
		{"first key escaped", serde.JSON, []byte(`{"p\"ayload\\":null,"schema":{"f":"\"payload\""}}`), false},
		{"escaped payload first", serde.JSON, []byte(`{"\u0070ayload":null,"schema":{"name":"payload"},"x":"\"payload\""}`), false},
		{"escaped payload first of two", serde.JSON, []byte(`{"\u0070ayload" :null,"schema":{"payload":1}}`), true},
		{"null payload nested in a row", serde.JSON, []byte(`{"schema":{},"payload":{"payload":null}}`), false},
		{"null last, no payload", serde.JSON, []byte(`{"schema":{},"other":null}`), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewEventIDs(Config{Sink: "s", InstanceID: "verify", Brokers: []string{"127.0.0.1:9092"}, Input: "in", DeadLetter: "dlq",
				InputFormat: tt.format, DSN: "postgres://127.0.0.1/db", Table: "raw.t", EventID: "id",
				Columns: []Column{{Name: "id", Source: "$key"}, {Name: "body", Source: "$value"}}})
			if err != nil {
				t.Fatal(err)
			}
			if got := e.IsTombstone(&kgo.Record{Key: []byte("k"), Value: tt.value}); got != tt.want {
				t.Errorf("IsTombstone(%s) = %v; want %v", tt.value, got, tt.want)
			}
		})
	}
}
