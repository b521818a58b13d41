//go:build integration

package integration

import (
	"testing"
)

// TestSinkExactArraysAndWrappingTypes: the exactness rules hold for every
// element of an array column as for a column of the element's type, and
// for the types whose casts round or wrap: money rounds to the currency's
// fraction digits, oid wraps -1 to 4294967295. Before, these were plain
// casts, and 1.234 into numeric(5,2)[] was stored as 1.23, a +05 offset
// into timestamp[] dropped, -1 into oid stored as 4294967295, without a
// dead letter.
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
