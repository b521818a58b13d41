//go:build integration

package integration

import (
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor/kit"
)

// TestSinkExactRules loads the README's examples of the sink's value
// rules (section "Kafka to Postgres: the sink", "Values in typed
// columns") into typed columns: each is stored as the README says, as
// read back with a query of its own, or dead-lettered with reason
// postgres and an error naming the field (and the column, where the
// field maps to a column of another name).
func TestSinkExactRules(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "exact_rules", "{ event_id: event_id, n: n, r: r, ts: ts, tz: tz, dt: dt, ch: ch, b: b, amount: price, nn: nn, tm: tm }",
		"event_id text PRIMARY KEY, n numeric(10,2), r real, ts timestamp(3), tz timestamptz, dt date, ch char(5), b boolean, amount numeric(6,2), nn double precision, tm time")
	// good wants the column's text, bad a part of the dead-letter error.
	good := map[string]typedCell{
		"n_trailing_zero": {"n", "1.230", "1.23"},
		"r_point":         {"r", "0.1", "0.1"},
		"ts_z":            {"ts", `"2024-01-01T00:00:00.123Z"`, "2024-01-01 00:00:00.123"},
		"ts_epoch":        {"ts", `"epoch"`, "1970-01-01 00:00:00"},
		"tz_no_zone":      {"tz", `"2024-01-01T00:00:00"`, "2024-01-01 00:00:00+00"},
		"tz_offset":       {"tz", `"2024-01-01T05:00:00+05:00"`, "2024-01-01 00:00:00+00"},
		"dt_midnight_z":   {"dt", `"2024-01-01T00:00:00Z"`, "2024-01-01"},
		"ch_full":         {"ch", `"hello"`, "hello"}, // not cut to character(1)
		"b_yes":           {"b", `"yes"`, "true"},
		"nn_nan":          {"nn", `"NaN"`, "NaN"},
		// A number's type follows its text: -0 is the int 0, -0.0 the
		// double -0.
		"nn_int_minus_zero":    {"nn", "-0", "0"},
		"r_int_minus_zero":     {"r", "-0", "0"},
		"nn_double_minus_zero": {"nn", "-0.0", "-0"},
		// An integer a float holds exactly is stored, however long its
		// shortest text is (2^60, 2^26).
		"nn_exact_big_integer": {"nn", "1152921504606846976", "1.152921504606847e+18"},
		"r_exact_big_integer":  {"r", "67108864", "6.7108864e+07"},
		// 24:00:00 is a time of its own; in a timestamp, the same instant
		// as the next day's midnight.
		"tm_24": {"tm", `"24:00:00"`, "24:00:00"},
		"tm_z":  {"tm", `"10:00Z"`, "10:00:00"},
		"tz_24": {"tz", `"2024-01-01T24:00:00Z"`, "2024-01-02 00:00:00+00"},
		"ts_24": {"ts", `"2024-01-01T24:00:00"`, "2024-01-02 00:00:00"},
	}
	bad := map[string]typedCell{
		"ts_now":          {"ts", `"now"`, `field "ts": 'now' is not a fixed time`},
		"ts_precision":    {"ts", `"2024-01-01T00:00:00.1234"`, `field "ts": '2024-01-01T00:00:00.1234' is not exactly a timestamp(3) without time zone: it would be stored as '2024-01-01 00:00:00.123'`},
		"tz_micro":        {"tz", `"2024-01-01T00:00:00.1234567Z"`, `is not exactly a timestamp with time zone`},
		"dt_today":        {"dt", `"today"`, `field "dt": 'today' is not a fixed time`},
		"ch_long":         {"ch", `"hello!"`, `field "ch": 'hello!' is not exactly a character(5): it would be stored as 'hello'`},
		"price_scale":     {"price", "9.999", `field "price" (column "amount"): '9.999' is not exactly a numeric(6,2): it would be stored as '10.00'`},
		"price_cast":      {"price", `"ten"`, `field "price" (column "amount"): invalid input syntax for type numeric: "ten" (SQLSTATE 22P02)`},
		"nn_integer":      {"nn", "18014398509481985", `field "nn": '18014398509481985' is not exactly a double precision`},
		"nn_beyond_int64": {"nn", "9223372036854775808", `field "nn": '9223372036854775808' is not exactly a double precision`},
		"b_maybe":         {"b", `"maybe"`, `field "b": invalid input syntax for type boolean: "maybe" (SQLSTATE 22P02)`},
		"tm_offset":       {"tm", `"10:00+05"`, `field "tm": '10:00+05' is not exactly a time without time zone: it would be stored as '10:00:00'`},
		"tm_24_offset":    {"tm", `"24:00:00+05"`, `field "tm": '24:00:00+05' is not exactly a time without time zone`},
		"dt_24":           {"dt", `"2024-01-01T24:00:00Z"`, `field "dt": '2024-01-01T24:00:00Z' is not exactly a date: it would be stored as '2024-01-01'`},
	}
	stored, dead := loadTypedCells(t, pool, s, topo, "coalesce(n::text, r::text, ts::text, tz::text, dt::text, ch::text, b::text, amount::text, nn::text, tm::text)", good, bad)
	for k, c := range good {
		t.Run(k, func(t *testing.T) {
			if got, ok := stored[k]; !ok || got != c.want {
				t.Errorf("%s=%s: stored %q (present %v), want %q; dead letter %v", c.field, c.json, got, ok, c.want, dead[k].Headers)
			}
		})
	}
	for k, c := range bad {
		t.Run(k, func(t *testing.T) {
			if got, ok := stored[k]; ok {
				t.Fatalf("%s=%s was stored as %q, want a dead letter", c.field, c.json, got)
			}
			r, ok := dead[k]
			if !ok {
				t.Fatalf("%s=%s: neither stored nor dead-lettered", c.field, c.json)
			}
			if got := r.Headers[kit.HeaderReason]; got != "postgres" {
				t.Errorf("reason %q, want postgres", got)
			}
			e := r.Headers[kit.HeaderError]
			if !strings.Contains(e, c.want) {
				t.Errorf("%s=%s: dead-letter error %q, want it to contain %q", c.field, c.json, e, c.want)
			}
			if strings.Contains(e, "staging") || strings.Contains(e, "exactly_refuse") || strings.Contains(e, "$1") {
				t.Errorf("dead-letter error %q names the sink's internals", e)
			}
		})
	}
}
