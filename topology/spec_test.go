package topology

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestSpecCoversEveryField: every field of the file's types has a
// definition with a doc line, and every definition names a field.
func TestSpecCoversEveryField(t *testing.T) {
	used := map[string]bool{}
	for _, n := range settings() {
		if strings.TrimSpace(n.doc) == "" {
			t.Errorf("%s: no doc in spec", n.path)
		}
		used[n.path], used[typeKey(n.parent, n.name)] = true, true
		for _, b := range []any{n.def, n.min, n.max} {
			if b == nil || n.typ == reflect.TypeFor[bool]() {
				continue
			}
			bt := reflect.TypeOf(b)
			switch {
			case n.typ == durationType:
				if bt != reflect.TypeFor[time.Duration]() {
					t.Errorf("%s: bound or default %v is a %s, want time.Duration", n.path, b, bt)
				}
			case bt.Kind() != n.typ.Kind() && !(bt.Kind() == reflect.Int && n.typ.Kind() >= reflect.Int && n.typ.Kind() <= reflect.Int64):
				t.Errorf("%s: bound or default %v is a %s, want %s", n.path, b, bt, n.typ)
			}
		}
	}
	for k := range spec {
		if !used[k] {
			t.Errorf("spec key %q names no field", k)
		}
	}
}

func TestDefaultAndBounds(t *testing.T) {
	if got := Default[time.Duration]("sinks[].commit.interval"); got != 200*time.Millisecond {
		t.Errorf("sink commit interval default = %s", got)
	}
	if got := Default[int32]("stages[].fetch_max_bytes"); got != 2<<20 {
		t.Errorf("stage fetch_max_bytes default = %d", got)
	}
	if got := Default[string]("stages[].input.format"); got != "json" {
		t.Errorf("format default = %q", got)
	}
	if lo, hi := Bounds[time.Duration]("sinks[].postgres.timeout"); lo != time.Second || hi != time.Hour {
		t.Errorf("postgres timeout bounds = %s, %s", lo, hi)
	}
	if got := Allowed("sinks[].postgres.mode"); strings.Join(got, ",") != "insert,upsert" {
		t.Errorf("mode allowed = %q", got)
	}
	if got := Default[string]("sinks[].postgres.positions_table"); got != "exactly_positions" {
		t.Errorf("positions table default = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("Default of an unknown setting did not panic")
		}
	}()
	Default[int]("stages[].nope")
}

// TestEmptyEnumRejected: an enum setting written empty is a mistake, not
// a request for its default: it is reported where it was written, with
// the values allowed. Left out, it takes its default.
func TestEmptyEnumRejected(t *testing.T) {
	withDSN := env(map[string]string{"PG_DSN": secretDSN})
	inSink := func(setting string) string {
		return sinkHead + strings.Replace(sink, "      event_id: event_id\n", "      event_id: event_id\n      "+setting+"\n", 1)
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"tombstones", inSink(`tombstones: ""`), `t.yaml:16:19: sinks[0].postgres.tombstones: must not be empty (valid: skip, delete)`},
		{"mode", inSink(`mode: ""`), `t.yaml:16:13: sinks[0].postgres.mode: must not be empty (valid: insert, upsert)`},
		{"types", inSink(`types: ""`), `t.yaml:16:14: sinks[0].postgres.types: must not be empty (valid: declared, from_schema)`},
		{"envelope", inSink(`envelope: ""`), `t.yaml:16:17: sinks[0].postgres.envelope: must not be empty (valid: none, debezium)`},
		{"format", sinkHead + strings.Replace(sink, "format: json", `format: ""`, 1),
			`t.yaml:10:34: sinks[0].input.format: must not be empty (valid: json, string, bytes, avro)`},
		{"emit", withSteps("      - aggregate: { window: { tumbling: 1m }, aggregations: { n: count }, emit: \"\" }\n"),
			`t.yaml:14:82: stages[0].transform[0].aggregate.emit: must not be empty (valid: final, update)`},
		{"mechanism", strings.Replace(head, `brokers: ["127.0.0.1:9092"]`, "brokers: [\"127.0.0.1:9092\"]\n  sasl: { mechanism: \"\" }", 1) + "stages:\n" + stage,
			`t.yaml:4:22: kafka.sasl.mechanism: must not be empty (valid: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, tc.src, withDSN, tc.want)
		})
	}
	f := check(t, sinkHead+sink, withDSN)
	if pg := f.Sinks[0].Postgres; pg.Tombstones != "skip" || pg.Mode != "insert" || pg.Types != "declared" || f.Sinks[0].Input.Format != "json" {
		t.Errorf("left out: tombstones %q, mode %q, types %q, format %q; want the defaults", pg.Tombstones, pg.Mode, pg.Types, f.Sinks[0].Input.Format)
	}
}

// TestOfflineEnumTakesDefault: an enum whose ${VAR} is unknown offline is
// not reported empty, and the checks that depend on it see its default.
func TestOfflineEnumTakesDefault(t *testing.T) {
	src := sinkHead + strings.Replace(sink, "      event_id: event_id\n", "      event_id: event_id\n      mode: ${SINK_MODE}\n", 1)
	f, err := parse("t.yaml", []byte(src), env(map[string]string{"PG_DSN": secretDSN}), true)
	if err != nil {
		t.Fatalf("offline: %v", err)
	}
	if got := f.Sinks[0].Postgres.Mode; got != "insert" {
		t.Errorf("mode = %q, want the default insert", got)
	}
}
