//go:build integration

package integration

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// TestSinkExactRules loads the README's examples of the sink's value
// rules (section "Kafka to Postgres: the sink", "Values in typed
// columns") into typed columns: each is stored as the README says, as
// read back with a query of its own, or dead-lettered with reason
// postgres and an error naming the field (and the column, where the
// field maps to a column of another name).
func TestSinkExactRules(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "exact_rules", "{ event_id: event_id, n: n, r: r, ts: ts, tz: tz, dt: dt, ch: ch, b: b, amount: price, nn: nn, tm: tm, ttz: ttz, j: j, js: js }",
		"event_id text PRIMARY KEY, n numeric(10,2), r real, ts timestamp(3), tz timestamptz, dt date, ch char(5), b boolean, amount numeric(6,2), nn double precision, tm time, ttz timetz, j jsonb, js json")
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
		"tm_59": {"tm", `"23:59:59"`, "23:59:59"},
		// A json column keeps the bytes as they came, duplicates and all;
		// jsonb stores an object without them.
		"js_dup":  {"js", `{"a":1,"a":2}`, `{"a":1,"a":2}`},
		"j_plain": {"j", `{"a":1,"b":[{"c":2}]}`, `{"a": 1, "b": [{"c": 2}]}`},
	}
	// A duplicate key at any depth of a value jsonb would read: jsonb
	// would keep the last copy.
	badDecode := map[string]typedCell{
		"j_dup":        {"j", `{"a":1,"a":2}`, `field "j.a": duplicate key "a" in object`},
		"j_nested_dup": {"j", `{"a":{"b":1,"b":1}}`, `field "j.a.b": duplicate key "b" in object`},
		"j_array_dup":  {"j", `[{"a":1,"a":2}]`, `field "j[0].a": duplicate key "a" in object`},
		"j_string_dup": {"j", `"{\"a\":1,\"a\":2}"`, `field "j.a": duplicate key "a" in object`},
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
		"nn_beyond_int64": {"nn", "9223372036854775808", `field "nn": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64) (SQLSTATE 22000)`},
		"b_maybe":         {"b", `"maybe"`, `field "b": invalid input syntax for type boolean: "maybe" (SQLSTATE 22P02)`},
		"tm_offset":       {"tm", `"10:00+05"`, `field "tm": '10:00+05' is not exactly a time without time zone: it would be stored as '10:00:00'`},
		"tm_24_offset":    {"tm", `"24:00:00+05"`, `field "tm": '24:00:00+05' is not exactly a time without time zone`},
		"dt_24":           {"dt", `"2024-01-01T24:00:00Z"`, `field "dt": '2024-01-01T24:00:00Z' is not exactly a date: it would be stored as '2024-01-01'`},
		// A time of day finer than a microsecond, which a date would drop
		// as a timestamp rounds it.
		"dt_sub_micro":         {"dt", `"2024-01-01T00:00:00.0000001Z"`, `field "dt": '2024-01-01T00:00:00.0000001Z' is not exactly a date: it would be stored as '2024-01-01'`},
		"dt_sub_micro_no_zone": {"dt", `"2024-01-01 00:00:00.0000001"`, `is not exactly a date`},
		"dt_sub_micro_half":    {"dt", `"2024-01-01T00:00:00.0000005Z"`, `is not exactly a date`},
		// A second of 60 moves the value to the next minute.
		"tm_second_60":       {"tm", `"23:59:60"`, `field "tm": '23:59:60' is not exactly a time without time zone: it would be stored as '24:00:00'`},
		"tm_second_60_00":    {"tm", `"00:00:60"`, `it would be stored as '00:01:00'`},
		"tm_second_60_basic": {"tm", `"235960"`, `it would be stored as '24:00:00'`},
		"ttz_second_60":      {"ttz", `"23:59:60+05"`, `field "ttz": '23:59:60+05' is not exactly a time with time zone: it would be stored as '24:00:00+05'`},
		"ts_second_60":       {"ts", `"2024-01-01T23:59:60"`, `it would be stored as '2024-01-02 00:00:00'`},
		"tz_second_60":       {"tz", `"2024-01-01T23:59:60Z"`, `it would be stored as '2024-01-02 00:00:00+00'`},
		"dt_second_60":       {"dt", `"2024-01-01T23:59:60Z"`, `is not exactly a date`},
	}
	stored, dead := loadTypedCells(t, pool, s, topo, "coalesce(n::text, r::text, ts::text, tz::text, dt::text, ch::text, b::text, amount::text, nn::text, tm::text, ttz::text, j::text, js::text)", good, bad, badDecode)
	checkStoredCells(t, stored, dead, good)
	checkRefusedCells(t, stored, dead, badDecode, "decode")
	checkRefusedCells(t, stored, dead, bad, "postgres")
}

// TestSinkExactSession: a record's outcome depends on neither the DSN's
// session settings nor the records before it. The DSN sets DateStyle
// DMY, which the sink overrides with PostgreSQL's default (ISO, MDY):
// "1/2/2024" is January 2. In a date event-ID column, an ID the column
// cannot hold exactly is a dead letter even after an equal ID in the same
// batch, which DISTINCT ON would otherwise drop as its duplicate, and so
// is a record with such a value in another column. $value
// into jsonb with a duplicate key at any depth is a dead letter.
func TestSinkExactSession(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "sb_exact_session", "{ event_id: d, tag: id, v: $value, n: n }",
		"event_id date PRIMARY KEY, tag text, v jsonb, n numeric(10,2)")
	lines := [][]byte{
		[]byte(`f1|{"id":"f1","d":"2024-01-01"}`),
		[]byte(`f2|{"id":"f2","d":"2024-01-01T23:30:00-05:00"}`),
		[]byte(`f3|{"id":"f3","d":"2024-01-01T00:00:00.0000001Z"}`),
		[]byte(`f4|{"id":"f4","d":"1/2/2024"}`),
		[]byte(`f5|{"id":"f5","d":"2024-03-01","o":{"b":{"c":1,"c":2}}}`),
		[]byte(`f6|{"id":"f6","d":"2024-01-01","n":1.234}`),
	}
	kcatProduce(t, s.in, lines)
	sep := "?"
	if strings.Contains(pgDSN(t), "?") {
		sep = "&"
	}
	p := startSink(t, topo, "a1", "PG_DSN="+pgDSN(t)+sep+"options=-c%20DateStyle%3DISO%2CDMY")
	eventually(t, time.Minute, func() bool {
		rows, _ := rowStats(t, pool, s.table())
		return rows == 2 && kcatCount(t, s.dlq) == 4
	}, func() string { return fmt.Sprintf("%d dead letters", kcatCount(t, s.dlq)) })
	p.stop()
	stored := tableRows(t, pool, s.table(), "tag")
	if want := map[string]string{"2024-01-01": "f1", "2024-01-02": "f4"}; !maps.Equal(stored, want) {
		t.Errorf("stored %v, want %v", stored, want)
	}
	wantDead := map[string][2]string{
		"f2": {"postgres", `field "d" (column "event_id"): '2024-01-01T23:30:00-05:00' is not exactly a date`},
		"f3": {"postgres", `field "d" (column "event_id"): '2024-01-01T00:00:00.0000001Z' is not exactly a date`},
		"f5": {"decode", `field "o.b.c": duplicate key "c" in object`},
		// Another mapped value, as the event ID: refused, not dropped as
		// a duplicate of f1.
		"f6": {"postgres", `field "n": '1.234' is not exactly a numeric(10,2)`},
	}
	for _, r := range kcatReadJSON(t, s.dlq) {
		w, ok := wantDead[r.Key]
		if !ok {
			t.Errorf("dead letter %s: %v", r.Key, r.Headers)
			continue
		}
		if got := r.Headers[deadletter.HeaderReason]; got != w[0] {
			t.Errorf("%s: reason %q, want %q", r.Key, got, w[0])
		}
		if e := r.Headers[deadletter.HeaderError]; !strings.Contains(e, w[1]) {
			t.Errorf("%s: error %q, want it to contain %q", r.Key, e, w[1])
		}
	}
}

// TestSinkNamedZoneLocalTimes: a local time in a named time zone that the
// zone's clocks skip (a daylight-saving gap) or show twice (the clock
// goes back) names no single instant. PostgreSQL reads it all the same,
// as an instant the text does not name (2024-03-10 02:30 in New York as
// 03:30 EDT) or as one of the two it names; the sink dead-letters it,
// naming the field, in every time type and in an array. Times in a named
// zone that name one instant, abbreviations and offsets are stored.
func TestSinkNamedZoneLocalTimes(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "zone_gaps", "{ event_id: event_id, tz: tz, ts: ts, ttz: ttz, tza: tza }",
		"event_id text PRIMARY KEY, tz timestamptz, ts timestamp, ttz timetz, tza timestamptz[]")
	good := map[string]typedCell{
		"tz_summer":        {"tz", `"2024-07-01 12:00 America/New_York"`, "2024-07-01 16:00:00+00"},
		"tz_after_overlap": {"tz", `"2024-10-27 02:30 Europe/London"`, "2024-10-27 02:30:00+00"},
		"tz_abbreviation":  {"tz", `"2024-03-10 02:30 EST"`, "2024-03-10 07:30:00+00"},
		"tz_offset":        {"tz", `"2024-11-03T01:30:00-04:00"`, "2024-11-03 05:30:00+00"},
		"tz_pm":            {"tz", `"2024-03-10 02:30 pm"`, "2024-03-10 14:30:00+00"},
		"tz_zulu":          {"tz", `"2024-03-10T02:30:00Z"`, "2024-03-10 02:30:00+00"},
		"ts_london_winter": {"ts", `"2024-01-10 01:30 Europe/London"`, "2024-01-10 01:30:00"},
		"tza_fine":         {"tza", `"{\"2024-07-01 12:00 America/New_York\",\"2024-03-10 02:30 EST\"}"`, `{"2024-07-01 16:00:00+00","2024-03-10 07:30:00+00"}`},
	}
	bad := map[string]typedCell{
		"tz_gap":       {"tz", `"2024-03-10 02:30 America/New_York"`, `field "tz": '2024-03-10 02:30 America/New_York' names no single instant: 2024-03-10 02:30:00 is skipped in time zone America/New_York`},
		"tz_gap_posix": {"tz", `"2024-03-10 02:30 EST5EDT"`, `is skipped in time zone EST5EDT`},
		"tz_overlap":   {"tz", `"2024-11-03 01:30 america/new_york"`, `occurs twice in time zone america/new_york (its clocks go back): it names two instants, 2024-11-03 05:30:00 and 2024-11-03 06:30:00 UTC`},
		// Lord Howe's clocks go back by 30 minutes.
		"tz_overlap_half_hour": {"tz", `"2024-04-07 01:45 Australia/Lord_Howe"`, `occurs twice in time zone Australia/Lord_Howe`},
		// At UTC's offset in winter, a time the column would keep as
		// written, but the clocks skip it.
		"ts_gap_london": {"ts", `"2024-03-31 01:30 Europe/London"`, `field "ts": '2024-03-31 01:30 Europe/London' names no single instant`},
		"ttz_gap":       {"ttz", `"2024-03-10 02:30 America/New_York"`, `field "ttz": '2024-03-10 02:30 America/New_York' names no single instant`},
		"tza_gap":       {"tza", `"{\"2024-07-01 12:00 America/New_York\",\"2024-03-10 02:30 America/New_York\"}"`, `field "tza": '{"2024-07-01 12:00 America/New_York","2024-03-10 02:30 America/New_York"}' has an element that is not exactly a timestamp with time zone`},
	}
	stored, dead := loadTypedCells(t, pool, s, topo, "coalesce(tz::text, ts::text, ttz::text, tza::text)", good, bad)
	checkStoredCells(t, stored, dead, good)
	checkRefusedCells(t, stored, dead, bad, "postgres")
}

// TestSinkKeyAndValueIntoBytea: $key and $value into bytea columns are the
// record's bytes as they came, never read as bytea's text input, which
// would store the keys \x41 and \101 (four bytes each) as the one byte
// 0x41 and refuse a key that is no UTF-8 (22021).
func TestSinkKeyAndValueIntoBytea(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "key_bytea", "{ event_id: event_id, kb: $key, vb: $value }",
		"event_id text PRIMARY KEY, kb bytea, vb bytea")
	lines := [][]byte{
		[]byte(`\x41|{"event_id":"k1"}`),
		[]byte(`\101|{"event_id":"k2"}`),
		append([]byte{0xff, 0xfe}, []byte(`|{"event_id":"k3","s":"a\\nb"}`)...),
	}
	kcatProduce(t, s.in, lines)
	p := startSink(t, topo, "a1")
	eventually(t, time.Minute, func() bool { n, _ := rowStats(t, pool, s.table()); return n == len(lines) },
		func() string { return fmt.Sprintf("%d dead letters", kcatCount(t, s.dlq)) })
	p.stop()
	got := tableRows(t, pool, s.table(), "encode(kb, 'hex') || ' ' || encode(vb, 'hex')")
	hexOf := func(b string) string { return fmt.Sprintf("%x", b) }
	want := map[string]string{
		"k1": hexOf(`\x41`) + " " + hexOf(`{"event_id":"k1"}`),
		"k2": hexOf(`\101`) + " " + hexOf(`{"event_id":"k2"}`),
		"k3": "fffe " + hexOf(`{"event_id":"k3","s":"a\\nb"}`),
	}
	if !maps.Equal(got, want) {
		t.Errorf("stored (key hex, value hex) %v, want %v", got, want)
	}
}
