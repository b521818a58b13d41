//go:build integration

package integration

import (
	"testing"
)

// TestSinkExactArraysAndWrappingTypes: the exactness rules hold for every
// element of an array column as for a column of the element's type, and
// for the types whose casts round or wrap: money rounds to the currency's
// fraction digits, oid wraps -1 to 4294967295. Plain casts would store
// 1.234 into numeric(5,2)[] as 1.23, drop a +05 offset into timestamp[]
// and store -1 into oid as 4294967295, without a dead letter.
func TestSinkExactArraysAndWrappingTypes(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "exact_arrays", "{ event_id: event_id, na: na, ta: ta, ra: ra, tsa: tsa, va: va, tza: tza, m: m, ma: ma, o: o }",
		"event_id text PRIMARY KEY, na numeric(5,2)[], ta timestamp(0)[], ra real[], tsa timestamp[], va varchar(3)[], tza timestamptz[], m money, ma money[], o oid")
	good := map[string]typedCell{
		"na_exact":     {"na", `"{1.23,2,NULL}"`, "{1.23,2.00,NULL}"},
		"na_trailing":  {"na", `"{1.230}"`, "{1.23}"},
		"na_2d":        {"na", `"{{1.5,2},{3,4}}"`, "{{1.50,2.00},{3.00,4.00}}"},
		"na_empty":     {"na", `"{}"`, "{}"},
		"ta_exact":     {"ta", `"{\"2024-01-01T00:00:01Z\"}"`, `{"2024-01-01 00:00:01"}`},
		"ra_point":     {"ra", `"{0.5,0.1}"`, "{0.5,0.1}"},
		"ra_int_exact": {"ra", `"{16777216}"`, "{1.6777216e+07}"},
		"tsa_utc":      {"tsa", `"{\"2024-01-01T05:00:00+00:00\"}"`, `{"2024-01-01 05:00:00"}`},
		"va_fits":      {"va", `"{\"abc\",\"de\"}"`, "{abc,de}"},
		"tza_offset":   {"tza", `"{\"2024-01-01T05:00:00+05:00\"}"`, `{"2024-01-01 00:00:00+00"}`},
		"m_exact":      {"m", "1.23", "$1.23"},
		"m_text":       {"m", `"$12.30"`, "$12.30"},
		"m_grouped":    {"m", `"1,000.50"`, "$1,000.50"},
		"m_negative":   {"m", `"($1.25)"`, "-$1.25"},
		"m_zeros":      {"m", "1.2300", "$1.23"},
		"ma_text":      {"ma", `"{1.23,\"$4.00\"}"`, "{$1.23,$4.00}"},
		"o_exact":      {"o", "4294967295", "4294967295"},
	}
	bad := map[string]typedCell{
		"na_scale":       {"na", `"{1.234}"`, `field "na": '{1.234}' has an element that is not exactly a numeric(5,2)`},
		"na_2d_scale":    {"na", `"{{1,2},{3,4.567}}"`, `has an element that is not exactly a numeric(5,2)`},
		"ta_fraction":    {"ta", `"{\"2024-01-01T00:00:01.5Z\"}"`, `has an element that is not exactly a timestamp(0) without time zone`},
		"ra_int":         {"ra", `"{16777217}"`, `has an element that is not exactly a real`},
		"ra_beyond":      {"ra", `"{9223372036854775808}"`, `has an element that is not exactly a real`},
		"tsa_offset":     {"tsa", `"{\"2024-01-01T05:00:00+05\"}"`, `has an element that is not exactly a timestamp without time zone`},
		"tsa_now":        {"tsa", `"{\"now\"}"`, `has an element that is not exactly a timestamp without time zone`},
		"va_long":        {"va", `"{\"abcd\"}"`, `field "va": '{"abcd"}' has an element that is not exactly a character varying(3)`},
		"m_rounded":      {"m", "1.234", `field "m": '1.234' is not exactly a money: it would be stored as '$1.23'`},
		"m_text_rounded": {"m", `"$1.005"`, `is not exactly a money`},
		"ma_rounded":     {"ma", `"{1.234}"`, `has an element that is not exactly a money`},
		"o_wrapped":      {"o", "-1", `field "o": '-1' is not exactly a oid: it would be stored as '4294967295'`},
	}
	stored, dead := loadTypedCells(t, pool, s, topo, "coalesce(na::text, ta::text, ra::text, tsa::text, va::text, tza::text, m::text, ma::text, o::text)", good, bad, nil)
	checkStoredCells(t, stored, dead, good)
	checkRefusedCells(t, stored, dead, bad, "postgres")
}

// TestSinkJSONArraysIntoArrayColumns: a JSON array into an array column is
// its elements, each by its type's rules, in every dimension: a number as
// its JSON text (1.50 into numeric(5,2)[] is 1.50, 1.234 refused), a
// string as its contents (quotes, backslashes, commas and braces kept),
// null as NULL; into jsonb[], each element's JSON. The array's JSON text
// is not cast as an array literal, which would dead-letter every such
// record (22P02).
func TestSinkJSONArraysIntoArrayColumns(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "json_arrays", "{ event_id: event_id, na: na, ia: ia, xa: xa, ba: ba, ja: ja, tza: tza }",
		"event_id text PRIMARY KEY, na numeric(5,2)[], ia bigint[], xa text[], ba boolean[], ja jsonb[], tza timestamptz[]")
	good := map[string]typedCell{
		"na_numbers":   {"na", `[1.50, 2, null, -0.0]`, "{1.50,2.00,NULL,0.00}"},
		"na_2d":        {"na", `[[1, 2], [3, 4]]`, "{{1.00,2.00},{3.00,4.00}}"},
		"na_empty":     {"na", `[]`, "{}"},
		"ia_big":       {"ia", `[9223372036854775807, -9223372036854775808]`, "{9223372036854775807,-9223372036854775808}"},
		"xa_awkward":   {"xa", `["a,b", "c\"d", "e\\f", "{g}", "NULL", "", " h "]`, `{"a,b","c\"d","e\\f","{g}","NULL",""," h "}`},
		"xa_unicode":   {"xa", `["\u00e9", "\ud83d\ude00"]`, "{é,😀}"},
		"ba_bools":     {"ba", `[true, false, null]`, "{t,f,NULL}"},
		"ja_objects":   {"ja", `[{"a": 1}, [1, 2], "s", 2.50]`, `{"{\"a\": 1}","[1, 2]","\"s\"",2.50}`},
		"tza_iso":      {"tza", `["2024-01-01T05:00:00+05:00"]`, `{"2024-01-01 00:00:00+00"}`},
		"xa_numbers":   {"xa", `[1.0, 1e2, -0]`, "{1.0,1e2,-0}"},
		"ia_as_string": {"ia", `"{1,2}"`, "{1,2}"},
	}
	bad := map[string]typedCell{
		"na_scale":    {"na", `[1.234]`, `field "na": '{"1.234"}' has an element that is not exactly a numeric(5,2)`},
		"na_ragged":   {"na", `[[1], [2, 3]]`, `field "na"`},
		"ia_fraction": {"ia", `[1.5]`, `field "ia"`},
		"ia_beyond":   {"ia", `[9223372036854775808]`, `field "ia"`},
		"ba_number":   {"ba", `[2]`, `field "ba"`},
		"tza_gap":     {"tza", `["2024-03-10 02:30 America/New_York"]`, `has an element that is not exactly a timestamp with time zone`},
	}
	// Read by the JSON rules of every path: a lone surrogate is no text,
	// and jsonb would keep the last of duplicate keys.
	badDecode := map[string]typedCell{
		"xa_lone_surrogate": {"xa", `["ok", "\ud800x"]`, `field "xa[1]"`},
		"ja_duplicate_key":  {"ja", `[{"a": 1, "a": 2}]`, `field "ja[0].a": duplicate key "a" in object`},
	}
	stored, dead := loadTypedCells(t, pool, s, topo, "coalesce(na::text, ia::text, xa::text, ba::text, ja::text, tza::text)", good, bad, badDecode)
	checkStoredCells(t, stored, dead, good)
	checkRefusedCells(t, stored, dead, bad, "postgres")
	checkRefusedCells(t, stored, dead, badDecode, "decode")
}
