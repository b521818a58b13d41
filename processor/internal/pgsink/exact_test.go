package pgsink

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Each type family gets the check that refuses what its cast would
// round, cut or move; other types are a plain cast without the modifier.
func TestCastExpr(t *testing.T) {
	numeric102 := colType{name: "numeric(10,2)", base: "numeric", full: "numeric(10,2)", mod: 655366}
	tests := []struct {
		name string
		t    colType
		want []string // substrings, in order
		not  []string
	}{
		{"plain", plainType("uuid"), []string{"c0::uuid"}, []string{"CASE", refuseFunc}},
		{"numeric unconstrained", plainType("numeric"), []string{"c0::numeric"}, []string{"CASE"}},
		{"numeric scale", numeric102, []string{"CASE WHEN c0 IS NULL THEN NULL", "WHEN c0::numeric = c0::numeric(10,2) THEN c0::numeric(10,2)", "ELSE " + refuseFunc + "(NULL::numeric(10,2), 'col'"}, nil},
		// Integer text is read through numeric: the int -0 is 0.
		{"real", plainType("real"), []string{"c0 !~ '" + integerRE + "' OR (CASE WHEN (c0::numeric < -9223372036854775808", "& -abs(c0::int8)) < 16777216 END", "THEN (CASE WHEN c0 ~ '" + integerRE + "' THEN c0::numeric::text ELSE c0 END)::real"}, nil},
		{"double", plainType("double precision"), []string{"& -abs(c0::int8)) < 9007199254740992 END"}, nil},
		{"timestamp", plainType("timestamp without time zone"), []string{"WHEN lower(c0) ~ '" + relativeTimeRE + "' AND c0::timestamp without time zone IS NOT NULL THEN " + refuseFunc, "c0::timestamp = (c0::timestamptz AT TIME ZONE 'UTC') AND c0 !~ '" + subMicroRE + "'"}, nil},
		{"timestamptz precision", colType{name: "timestamp(3) with time zone", base: "timestamp with time zone", full: "timestamp(3) with time zone", mod: 3}, []string{"c0::timestamptz = c0::timestamp(3) with time zone", "THEN c0::timestamp(3) with time zone"}, []string{"AT TIME ZONE"}},
		// 24:00:00 is a time of its own: no AT TIME ZONE, which wraps it
		// to 00:00:00.
		{"time", plainType("time without time zone"), []string{"c0::timetz = c0::time::timetz", "THEN c0::time without time zone"}, []string{"AT TIME ZONE"}},
		// A date refuses a time of day beyond microseconds, which the
		// timestamp reading rounds away, and a second of 60.
		{"date", plainType("date"), []string{"CASE WHEN c0 ~ '" + plainDateRE + "' THEN true ELSE c0::date = c0::timestamp AND c0::date = (c0::timestamptz AT TIME ZONE 'UTC') END", "c0 !~ '" + subMicroRE + "'", "c0 !~ '" + secondSixtyRE + "'"}, nil},
		{"time second 60", plainType("time without time zone"), []string{"c0 !~ '" + secondSixtyRE + "'"}, nil},
		{"timetz second 60", plainType("time with time zone"), []string{"c0 !~ '" + subMicroRE + "' AND c0 !~ '" + secondSixtyRE + "'"}, nil},
		// An integer beyond int64 is refused in serde's words.
		{"double beyond int64", plainType("double precision"), []string{"WHEN c0 ~ '" + integerRE + "' AND (c0::numeric < -9223372036854775808 OR c0::numeric > 9223372036854775807) THEN " + refuseFunc, "integer %s is beyond the range of a 64-bit integer (int64)"}, nil},
		{"varchar", colType{name: "character varying(3)", base: "character varying", full: "character varying(3)", mod: 7}, []string{"WHEN char_length(c0) <= 3 THEN c0::character varying(3)"}, []string{"lower(c0)"}},
		{"char unconstrained", colType{name: "character", base: "character", full: "character", mod: -1}, []string{"c0::bpchar"}, []string{"CASE"}},
		{"bit", colType{name: "bit(4)", base: "bit", full: "bit(4)", mod: 4}, []string{"c0::varbit"}, []string{"CASE"}},
		{"domain", colType{name: "money2", base: "numeric", full: "numeric(10,2)", mod: 655366, domain: true}, []string{"THEN (c0::numeric(10,2))::money2", "NULL::money2"}, nil},
		{"other modifier", colType{name: "interval day", base: "interval", full: "interval day", mod: 1}, []string{"c0::interval"}, []string{"CASE", "day"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := castExpr("c0", "col", tt.t)
			rest := got
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("castExpr = %s\nlacks (in order) %s", got, w)
				}
				rest = rest[i+len(w):]
			}
			for _, n := range tt.not {
				if strings.Contains(got, n) {
					t.Errorf("castExpr = %s\nhas %s", got, n)
				}
			}
		})
	}
}

// The session settings that reading a value depends on are the sink's,
// whatever the DSN spells: DateStyle DMY would read 1/2/2024 as February 1.
func TestSetSessionParams(t *testing.T) {
	params := map[string]string{"DateStyle": "ISO, DMY", "IntervalStyle": "sql_standard", "TimeZone": "Asia/Tokyo", "application_name": "x", "Client_Encoding": "LATIN1"}
	setSessionParams(params)
	want := map[string]string{"datestyle": "ISO, MDY", "intervalstyle": "postgres", "timezone": "UTC", "application_name": "x",
		"timezone_abbreviations": "Default", "extra_float_digits": "3", "lc_monetary": "C", "xmloption": "content",
		"array_nulls": "on", "standard_conforming_strings": "on", "client_encoding": "UTF8"}
	if !maps.Equal(params, want) {
		t.Errorf("setSessionParams = %v, want %v", params, want)
	}
}

// A value going to a jsonb column, as its JSON text or as a string that
// jsonb parses, has no duplicate key at any depth; the other values are
// not checked.
func TestJSONBKeys(t *testing.T) {
	for _, tt := range []struct {
		v    any
		src  string
		want string
	}{
		{`{"a":1,"b":{"c":2}}`, "o", ""},
		{`{"a":1,"a":2}`, "o", `field "o.a": duplicate key "a" in object`},
		{`[{"a":{"b":1,"b":1}}]`, "o", `field "o[0].a.b": duplicate key "b" in object`},
		{`{"id":"x","o":{"a":1,"a":2}}`, "$value", `field "o.a": duplicate key "a" in object`},
		{`not json {`, "o", ""}, // Postgres refuses it (22P02)
		{nil, "o", ""},
	} {
		err := jsonbKeys(tt.v, tt.src)
		if got := fmt.Sprint(err); (tt.want == "" && err != nil) || (tt.want != "" && got != tt.want) {
			t.Errorf("jsonbKeys(%v, %s) = %v, want %q", tt.v, tt.src, err, tt.want)
		}
	}
}

// Event IDs compare in the type without its modifier, never in
// character(1) or bit(1).
func TestKeyType(t *testing.T) {
	for _, tt := range []struct {
		t    colType
		want string
	}{
		{plainType("uuid"), "uuid"},
		{colType{name: "character(8)", base: "character", full: "character(8)", mod: 12}, "bpchar"},
		{colType{name: "bit(8)", base: "bit", full: "bit(8)", mod: 8}, "varbit"},
		{colType{name: "character varying(8)", base: "character varying", full: "character varying(8)", mod: 12}, "character varying"},
		{colType{name: "ids", base: "text", full: "text", mod: -1, domain: true}, "ids"},
	} {
		if got := keyType(tt.t); got != tt.want {
			t.Errorf("keyType(%s) = %s, want %s", tt.t.name, got, tt.want)
		}
	}
}

// A field's rejection names the field, the column only when it differs,
// and never Postgres's "where" (a staging column or a parameter).
func TestFieldError(t *testing.T) {
	pe := &pgconn.PgError{Code: "22021", Message: `invalid byte sequence for encoding "UTF8": 0x00`, Where: "COPY exactly_sink_staging, line 1, column c8", ColumnName: "c8"}
	for _, tt := range []struct {
		field, column, want string
	}{
		{"tx", "tx", `field "tx": invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`},
		{"note", "tx", `field "note" (column "tx"): invalid byte sequence for encoding "UTF8": 0x00 (SQLSTATE 22021)`},
	} {
		e := &fieldError{field: tt.field, column: tt.column, pe: pe}
		if got := e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
		if sqlState(e) != "22021" || !IsDataError(e) {
			t.Errorf("SQLSTATE lost: %q", sqlState(e))
		}
	}
}

// A DSN without connect_timeout gets DefaultConnectTimeout, so that a
// server that accepts the connection and never answers cannot hold the
// sink for ever; a DSN that sets one, 0 included, keeps it.
func TestConnectTimeoutDefault(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		want time.Duration
	}{
		{"postgres://u@127.0.0.1:5432/db", DefaultConnectTimeout},
		{"host=127.0.0.1 user=u dbname=db", DefaultConnectTimeout},
		{"postgres://u@127.0.0.1:5432/db?connect_timeout=3", 3 * time.Second},
		{"host=127.0.0.1 user=u connect_timeout=0", 0},
	} {
		cc, err := pgx.ParseConfig(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		withConnectTimeout(tc.dsn, cc)
		if cc.ConnectTimeout != tc.want {
			t.Errorf("%s: connect timeout %v, want %v", tc.dsn, cc.ConnectTimeout, tc.want)
		}
	}
}
