package pgsink

import (
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// Of reads a record's event ID as the sink's rows do: of json input only
// the event ID's field, so what is elsewhere in the value (a lone
// surrogate in a field no column maps) never makes an ID missing.
func TestEventIDsOf(t *testing.T) {
	cfg := func(src string, tombstones string) Config {
		return Config{Sink: "s", InstanceID: "verify", Brokers: []string{"127.0.0.1:9092"}, Input: "in", DeadLetter: "dlq",
			InputFormat: serde.JSON, DSN: "postgres://127.0.0.1/db", Table: "raw.t", EventID: "id", Tombstones: tombstones,
			Columns: []Column{{Name: "id", Source: src}, {Name: "body", Source: topology.SourceValue}, {Name: "b", Source: "b"}}}
	}
	for _, tt := range []struct {
		name       string
		src        string
		tombstones string
		r          *kgo.Record
		want       string
		ok         bool
	}{
		{"string", "id", "", &kgo.Record{Value: []byte(`{"id":"a","b":"x"}`)}, "a", true},
		{"number by its text", "id", "", &kgo.Record{Value: []byte(`{"id":1.0}`)}, "1.0", true},
		{"negative zero by its text", "id", "", &kgo.Record{Value: []byte(`{"id":-0.0}`)}, "-0.0", true},
		{"lone surrogate elsewhere", "id", "", &kgo.Record{Value: []byte(`{"id":"s1","s":"\ud800"}`)}, "s1", true},
		{"lone surrogate in a mapped field", "id", "", &kgo.Record{Value: []byte(`{"id":"s1","b":"\ud800"}`)}, "s1", true},
		{"lone surrogate in the id", "id", "", &kgo.Record{Value: []byte(`{"id":"\ud800"}`)}, "", false},
		{"missing", "id", "", &kgo.Record{Value: []byte(`{"b":"x"}`)}, "", false},
		{"empty", "id", "", &kgo.Record{Value: []byte(`{"id":""}`)}, "", false},
		{"null", "id", "", &kgo.Record{Value: []byte(`{"id":null}`)}, "", false},
		{"not json", "id", "", &kgo.Record{Value: []byte(`{"id":`)}, "", false},
		{"key", topology.SourceKey, "", &kgo.Record{Key: []byte("k"), Value: []byte(`{}`)}, "k", true},
		{"tombstone skipped", "id", topology.TombstonesSkip, &kgo.Record{Key: []byte("k")}, "", false},
		{"tombstone deleting", "id", topology.TombstonesDelete, &kgo.Record{Key: []byte("k")}, "k", true},
		{"tombstone of a json key", "id", topology.TombstonesDelete, &kgo.Record{Key: []byte(`{"id":"k"}`)}, "k", true},
		{"tombstone of a key with a schema", "id", topology.TombstonesDelete,
			&kgo.Record{Key: []byte(`{"schema":{"type":"struct","fields":[{"type":"string","field":"id"}]},"payload":{"id":"k"}}`)}, "k", true},
		{"tombstone of a composite key", "id", topology.TombstonesDelete, &kgo.Record{Key: []byte(`{"id":"k","t":1}`)}, "", false},
		{"tombstone of a one-value key with a schema", "id", topology.TombstonesDelete,
			&kgo.Record{Key: []byte(`{"schema":{"type":"string"},"payload":"k"}`)}, "k", true},
		{"tombstone of a decimal key", "id", topology.TombstonesDelete,
			&kgo.Record{Key: []byte(`{"schema":{"type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"1"}},"payload":"AQ=="}`)}, "0.1", true},
		{"connect null payload skipped", "id", topology.TombstonesSkip, &kgo.Record{Key: []byte("k"), Value: []byte(`{"schema":{"type":"struct"},"payload":null}`)}, "", false},
		{"connect null payload deleting", "id", topology.TombstonesDelete,
			&kgo.Record{Key: []byte(`{"schema":{"type":"struct","fields":[{"type":"string","field":"id"}]},"payload":{"id":"k"}}`), Value: []byte(`{"schema":{"type":"struct"},"payload":null}`)}, "k", true},
		{"row with a schema", "id", "", &kgo.Record{Value: []byte(`{"schema":{"type":"struct","fields":[{"type":"string","field":"id"}]},"payload":{"id":"w"}}`)}, "w", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewEventIDs(cfg(tt.src, tt.tombstones))
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := e.Of(tt.r); got != tt.want || ok != tt.ok {
				t.Errorf("Of(%s) = %q, %v; want %q, %v", tt.r.Value, got, ok, tt.want, tt.ok)
			}
		})
	}
}

// A key column's type compares some values of different text as one: the
// key text of each is the one they share.
func TestKeyText(t *testing.T) {
	for _, tt := range []struct {
		t    colType
		want string
	}{
		{plainType("numeric"), "trim_scale(v)::text"},
		{colType{name: "amount", base: "numeric", full: "numeric(10,2)", mod: 655366, domain: true}, "trim_scale(v)::text"},
		{plainType("double precision"), "(CASE WHEN v = 0 THEN '0' ELSE v::text END)"},
		{plainType("real"), "(CASE WHEN v = 0 THEN '0' ELSE v::text END)"},
		{plainType("uuid"), "v::text"},
	} {
		if got := keyText("v", tt.t); got != tt.want {
			t.Errorf("keyText(%s) = %s, want %s", tt.t.name, got, tt.want)
		}
	}
	if !textKey(plainType("text")) || textKey(plainType("uuid")) || textKey(colType{name: "ids", base: "text", full: "text", mod: -1, domain: true}) {
		t.Error("textKey: only text and varchar, not a domain, compare as their text")
	}
}

// A row's $value text shares the record's bytes (recordText); the event
// ID that Of returns does not, so a caller may keep it past the record.
func TestEventIDsOfValueIsACopy(t *testing.T) {
	e, err := NewEventIDs(Config{Sink: "s", InstanceID: "verify", Brokers: []string{"127.0.0.1:9092"}, Input: "in", DeadLetter: "dlq",
		InputFormat: serde.String, DSN: "postgres://127.0.0.1/db", Table: "raw.t", EventID: "id",
		Columns: []Column{{Name: "id", Source: topology.SourceValue}}})
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Value: []byte("id-1")}
	id, ok := e.Of(r)
	if !ok || id != "id-1" {
		t.Fatalf("Of = %q, %v; want id-1", id, ok)
	}
	if row, _ := e.s.recordValue(r, nil, topology.SourceValue); unsafe.StringData(row.(string)) != &r.Value[0] {
		t.Error("the row's $value text is a copy of the record's bytes")
	}
	r.Value[0] = 'X'
	if id != "id-1" {
		t.Errorf("Of's ID %q changed with the record's bytes", id)
	}
}
