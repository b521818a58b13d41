package pgsink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// colType is a target column's type as the catalog gives it.
type colType struct {
	// name is the column's type with its modifier, as format_type
	// writes it: "numeric(10,2)", "character varying(3)", "uuid", or a
	// domain's name.
	name string
	// base is the type without a modifier, of a domain its base type:
	// "numeric", "character varying", "timestamp without time zone".
	base string
	// full is base with the modifier (a domain's base type modifier for a
	// domain): "numeric(10,2)".
	full string
	// mod is the modifier (pg_attribute.atttypmod, or the domain's
	// typtypmod); -1 for none.
	mod int32
	// domain is whether name is a domain over base.
	domain bool
	// eq is the equality operator of base, schema-qualified
	// ("OPERATOR(ext.=)"), when base has one of its own: an extension's
	// type such as citext, whose operators resolve by search_path
	// otherwise and, off it, fall back to text's (case-sensitive) while
	// the primary key's index compares with citext's. "" for a type whose
	// = is another's (varchar's is text's): then plain =.
	eq string
}

// eqOp is t's equality operator for a WHERE: t.eq, or "=".
func eqOp(t colType) string {
	if t.eq != "" {
		return t.eq
	}
	return "="
}

// plainType is the colType of a type without modifier.
func plainType(name string) colType { return colType{name: name, base: name, full: name, mod: -1} }

// readTypesSQL reads the target's columns: name, type with modifier, base
// type (a domain's, one level down) without and with its modifier, the
// modifier, and whether the type is a domain.
const readTypesSQL = `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
	format_type(coalesce(d.typbasetype, a.atttypid), NULL),
	format_type(coalesce(d.typbasetype, a.atttypid), coalesce(d.typtypmod, a.atttypmod)),
	coalesce(d.typtypmod, a.atttypmod), d.oid IS NOT NULL,
	coalesce((SELECT format('OPERATOR(%I.=)', n.nspname) FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
		WHERE o.oprname = '=' AND o.oprleft = coalesce(d.typbasetype, a.atttypid) AND o.oprright = o.oprleft ORDER BY o.oid LIMIT 1), '')
FROM pg_attribute a LEFT JOIN pg_type d ON d.oid = a.atttypid AND d.typtype = 'd'
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`

// refuseFunc raises the row error of a value its column cannot hold
// exactly (SQLSTATE refuseCode, the target column in the error's column
// field). The sink creates it on each connection, in pg_temp, beside the
// staging table. Volatile, so the planner never evaluates it while it
// plans: only a row that reaches it raises.
const (
	refuseCode = "22000" // data_exception
	refuseFunc = "pg_temp.exactly_refuse"
	refuseSQL  = `CREATE OR REPLACE FUNCTION ` + refuseFunc + `(t anyelement, col text, msg text) RETURNS anyelement
LANGUAGE plpgsql VOLATILE AS $exactly$
BEGIN
	RAISE EXCEPTION USING ERRCODE = '` + refuseCode + `', MESSAGE = msg, COLUMN = col;
	RETURN t;
END $exactly$`
)

// localTimeFunc returns why time text t names no single instant, or NULL:
// a local time in a named time zone ('2024-03-10 02:30
// America/New_York') that the zone's clocks skip (a daylight-saving gap)
// or show twice (the clock goes back). PostgreSQL reads such text all the
// same: a skipped time with the offset before the gap (02:30 as 03:30
// EDT), a doubled one as standard time ("Date/Time Input
// Interpretation", B.1, in the PostgreSQL documentation), which would
// store an instant the text does not name, or one of two it names. The
// zone is the text's last word; an abbreviation (EST, CEST) or an offset
// is a fixed offset, whose times are all single instants, and a word that
// is no zone (pm, BC) or text without a date is left to the cast. The
// sink creates it with refuseFunc.
const (
	localTimeFunc = "pg_temp.exactly_local_time"
	localTimeSQL  = `CREATE OR REPLACE FUNCTION ` + localTimeFunc + `(t text) RETURNS text
LANGUAGE plpgsql STABLE AS $exactly$
DECLARE
	z text := substring(t from '([A-Za-z][A-Za-z0-9_/+-]*)[[:space:]]*$');
	i timestamptz;
	w timestamp;
	before interval;
	after interval;
BEGIN
	IF z IS NULL OR lower(z) IN ('z', 'zulu', 'utc', 'ut', 'gmt') THEN
		RETURN NULL;
	END IF;
	BEGIN
		i := t::timestamptz;
		w := t::timestamp; -- the local time as written: the zone is ignored
		IF (i AT TIME ZONE z) <> w THEN
			RETURN format('%s is skipped in time zone %s (its clocks jump over it): PostgreSQL would read it as %s there',
				w, z, (i AT TIME ZONE z));
		END IF;
		before := (i - interval '1 day') AT TIME ZONE z - (i - interval '1 day') AT TIME ZONE 'UTC';
		after := (i + interval '1 day') AT TIME ZONE z - (i + interval '1 day') AT TIME ZONE 'UTC';
		IF before <> after AND ((w - before) AT TIME ZONE 'UTC') AT TIME ZONE z = w
			AND ((w - after) AT TIME ZONE 'UTC') AT TIME ZONE z = w THEN
			RETURN format('%s occurs twice in time zone %s (its clocks go back): it names two instants, %s and %s UTC; write it with an offset to name one',
				w, z, least(w - before, w - after), greatest(w - before, w - after));
		END IF;
	EXCEPTION WHEN invalid_datetime_format OR invalid_parameter_value OR datetime_field_overflow OR invalid_time_zone_displacement_value OR feature_not_supported THEN
		RETURN NULL; -- no date, no zone (pm): the cast decides
	END;
	RETURN NULL;
END $exactly$`
)

// createTempFuncs creates, on connection c, in pg_temp, the functions the
// sink's statements call (refuseFunc, localTimeFunc).
func createTempFuncs(ctx context.Context, c *pgx.Conn) error {
	for _, q := range []string{refuseSQL, localTimeSQL} {
		if _, err := c.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// sessionParams are the settings of the sink's connections that the
// reading of a value's text, and the checks of castExpr, depend on, set
// whatever the DSN says (a DSN's parameter or its options=-c, or a
// role's or database's default), so that one record gets one value.
// Each is at PostgreSQL's own default except TimeZone and
// extra_float_digits; see "Client Connection Defaults" and "Version and
// Platform Compatibility" in the PostgreSQL documentation:
//
//   - TimeZone UTC: a time without a zone into timestamptz is read as
//     UTC, and a timestamp's text is compared with its UTC reading
//     (20.11.2, Locale and Formatting).
//   - DateStyle 'ISO, MDY': 1/2/2024 is January 2 (with DMY it would
//     be February 1), and a date's text, as the checks' messages and
//     exactly verify's keys give it, is ISO 8601 (20.11.2).
//   - IntervalStyle postgres: with sql_standard, the sign of
//     '-1 2:03:04' would apply to every field (20.11.2; 8.5.4).
//   - timezone_abbreviations Default: the abbreviations a time's zone
//     may name ('EST', 'CEST'), and what offset each is (20.11.2).
//   - extra_float_digits 3: a float's text is the shortest that reads
//     back to it, PostgreSQL 12 and later (20.11.2).
//   - lc_monetary C: money's input and output syntax (which character
//     is the decimal point, which separates thousands) would otherwise
//     follow the server's locale or the DSN's (20.11.2).
//   - xmloption content: an xml column's input is read as content, not
//     refused if it is not a single document (20.11.1, Statement
//     Behavior).
//   - array_nulls on: an unquoted NULL in an array's text is a null
//     element, not the string 'NULL' (20.13.1).
//   - standard_conforming_strings on: a backslash in the sink's SQL
//     string literals (a column's name in an error) is itself (20.13.1).
//   - client_encoding UTF8: the sink's text is UTF-8, which Postgres
//     converts to the database's encoding, refusing a character it
//     cannot hold (22P05); by default the session takes the database's
//     encoding, and a LATIN1 database would read the UTF-8 bytes of "é"
//     as two characters (23.3.3).
var sessionParams = map[string]string{
	"timezone":                    "UTC",
	"datestyle":                   "ISO, MDY",
	"intervalstyle":               "postgres",
	"timezone_abbreviations":      "Default",
	"extra_float_digits":          "3",
	"lc_monetary":                 "C",
	"xmloption":                   "content",
	"array_nulls":                 "on",
	"standard_conforming_strings": "on",
	"client_encoding":             "UTF8",
}

// DefaultConnectTimeout bounds connecting to PostgreSQL (the TCP
// connection, TLS and authentication) when the DSN sets no
// connect_timeout: a server that accepts the connection and never answers
// would otherwise hold the sink for ever, silent, since libpq's default,
// which pgx follows, is to wait without end. The attempt then fails and
// is retried with backoff, and /readyz names it.
const DefaultConnectTimeout = 15 * time.Second

// withConnectTimeout gives cc, parsed from dsn, DefaultConnectTimeout
// unless dsn sets connect_timeout (0 included: the user's choice).
func withConnectTimeout(dsn string, cc *pgx.ConnConfig) {
	if cc.ConnectTimeout == 0 && !strings.Contains(dsn, "connect_timeout") {
		cc.ConnectTimeout = DefaultConnectTimeout
	}
}

// Connect opens one connection to dsn as the sink's own are opened:
// with sessionParams and DefaultConnectTimeout (unless the DSN sets one).
// A DSN that does not parse is errBadDSN: the parse error would quote it,
// password and all.
func Connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errBadDSN
	}
	withConnectTimeout(dsn, cc)
	setSessionParams(cc.RuntimeParams)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

// setSessionParams sets sessionParams in params, a connection's runtime
// parameters, in place of any spelling of them the DSN gave.
func setSessionParams(params map[string]string) {
	for k, v := range sessionParams {
		for set := range params {
			if strings.EqualFold(set, k) {
				delete(params, set)
			}
		}
		params[k] = v
	}
}

// nameSessions names the sink's sessions "exactly sink NAME" in
// pg_stat_activity (application_name), unless the DSN or PGAPPNAME
// named them: an operator can then find, or end, one sink's sessions.
func nameSessions(params map[string]string, sink string) {
	for k := range params {
		if strings.EqualFold(k, "application_name") {
			return
		}
	}
	params["application_name"] = "exactly sink " + sink
}

// moneyRoundedRE matches money text with a nonzero digit beyond the
// second after the point, which money's input would round.
const moneyRoundedRE = `[.][0-9]{2}[0-9]*[1-9]`

// plainDateRE matches a date alone, year-month-day, as dateText
// writes one.
const plainDateRE = `^[0-9]{4,}-[0-9]{2}-[0-9]{2}( BC)?$`

// SQL regular expressions of the checks (POSIX classes: no backslashes,
// whatever standard_conforming_strings says).
const (
	// relativeTimeRE: a word for a time relative to now ('now',
	// 'today', 'tomorrow', 'yesterday'), which a replay would read as
	// another time.
	relativeTimeRE = `(^|[^a-z])(now|today|tomorrow|yesterday)([^a-z]|$)`
	// subMicroRE: a fraction of a second beyond microseconds, which
	// Postgres rounds (and a date drops).
	subMicroRE = `[.][0-9]{6}[0-9]*[1-9]`
	// secondSixtyRE: a second of 60 (a leap second, "23:59:60", or
	// "235960" in the basic form), which Postgres accepts and moves to
	// the next minute: 23:59:60 is stored as 24:00:00, 00:00:60 as
	// 00:01:00.
	secondSixtyRE = `((^|[^0-9])[0-9]{1,2}:[0-9]{1,2}:0*60|(^|[Tt[:space:]])[0-9]{4}60)([^0-9]|$)`
	// zoneWordRE: time text that ends in a word of two or more
	// characters, which may name a time zone (localTimeFunc).
	zoneWordRE = `[A-Za-z][A-Za-z0-9_/+-]+[[:space:]]*$`
	// integerRE: integer text, which a float column must hold exactly.
	integerRE = `^[[:space:]]*[-+]?[0-9]+[[:space:]]*$`
)

// castExpr returns the SQL expression that turns staging text x (a column
// reference or a parameter) into a value of column col of type t, or
// raises a row error (SQLSTATE refuseCode, through refuseFunc) for a value
// the column cannot hold exactly (see values.md, "Values in typed columns"):
//
//   - numeric(p,s), timestamp(p), time(p) and the like: the value must
//     read the same with and without the modifier (1.234 into
//     numeric(10,2) is refused, 1.230 is stored as 1.23);
//   - character varying(n), character(n): at most n characters, even
//     if the rest is spaces (which a cast to the type trims silently);
//   - real, double precision: integer text must be exact (16777217 into
//     real is refused), as the JSON and Avro paths read numbers; text
//     with a point or an exponent is read as the nearest float;
//   - timestamp, date, time: no zone or offset that changes the value
//     (read under TimeZone UTC, so Z and +00:00 are fine), and for date
//     no time of day;
//   - every time type: no word for a time relative to now, and no
//     fraction of a second beyond microseconds.
//
// Other types are a plain cast, which is exact or fails. bit(n) is cast
// as bit varying, so that a string of another length fails as the column
// is assigned (22026) rather than being padded or cut by the cast.
// exactFloatInteger is the SQL test that integer text x is a value of
// the float type base exactly: within int64 (integers beyond it are
// refused on every path), and its odd part (the integer without its
// factors of 2) within the type's significand, 2^53 for double precision
// and 2^24 for real (IEEE 754). The float's own text cannot tell: it is
// the shortest text that reads back as the float, so 2^60 would read as
// 1152921504606847000 and be refused though a double holds it.
func exactFloatInteger(x, base string) string {
	significand := int64(1) << 53
	if base == "real" {
		significand = 1 << 24
	}
	n := x + "::numeric"
	return fmt.Sprintf("(CASE WHEN %[4]s THEN false"+
		" WHEN %[1]s = 0 OR %[1]s = -9223372036854775808 THEN true"+
		" ELSE abs(%[2]s::int8) / (abs(%[2]s::int8) & -abs(%[2]s::int8)) < %[3]d END)", n, x, significand, beyondInt64(x))
}

// beyondInt64 is the SQL test that integer text x is beyond int64.
func beyondInt64(x string) string {
	return fmt.Sprintf("(%[1]s::numeric < -9223372036854775808 OR %[1]s::numeric > 9223372036854775807)", x)
}

func castExpr(x, col string, t colType) string {
	if elem, ok := arrayElement(t); ok {
		return arrayCastExpr(x, col, t, elem)
	}
	checks, value, target, plain := scalarChecks(x, t)
	if plain != "" {
		return plain
	}
	cast := withDomain(fmt.Sprintf("%s::%s", value, target), t)
	if len(checks) == 0 {
		return cast
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CASE WHEN %s IS NULL THEN NULL", x)
	if isTimeType(t.base) {
		// The cast after the match: text that is no time at all
		// ('yesterday-ish') fails as the type's input (22007).
		fmt.Fprintf(&b, " WHEN lower(%s) ~ '%s' AND %s::%s IS NOT NULL THEN %s", x, relativeTimeRE, x, keyType(t),
			refuseCall(x, col, t, fmt.Sprintf("format('%%s is not a fixed time: it names a time relative to now, which a replay would read as another', %s)", quotedValue(x))))
		fmt.Fprintf(&b, " WHEN %s ~ '%s' AND %s(%s) IS NOT NULL THEN %s", x, zoneWordRE, localTimeFunc, x,
			refuseCall(x, col, t, fmt.Sprintf("format('%%s names no single instant: %%s', %s, %s(%s))", quotedValue(x), localTimeFunc, x)))
	}
	if t.base == "real" || t.base == "double precision" {
		// In the words of every other path (serde), though a float may
		// hold the value: its type follows its text, an int.
		fmt.Fprintf(&b, " WHEN %s ~ '%s' AND %s THEN %s", x, integerRE, beyondInt64(x),
			refuseCall(x, col, t, fmt.Sprintf("format('integer %%s is beyond the range of a 64-bit integer (int64)', left(btrim(%s), 100) || CASE WHEN char_length(btrim(%s)) > 100 THEN '...' ELSE '' END)", x, x)))
	}
	fmt.Fprintf(&b, " WHEN %s THEN %s ELSE %s END", strings.Join(checks, " AND "), cast,
		refuseCall(x, col, t, fmt.Sprintf("format('%%s is not exactly a %%s: it would be stored as %%s', %s, %s, quote_literal(%s::%s::text))",
			quotedValue(x), quoteLiteral(t.full), x, t.full)))
	return b.String()
}

// scalarChecks returns the checks that text x is exactly a value of t, a
// type that is no array, the text the cast reads (value) and the type it
// casts to (target); or, for a type whose cast needs no check, the whole
// expression (plain).
func scalarChecks(x string, t colType) (checks []string, value, target, plain string) {
	target = t.full
	value = x // the text the cast reads
	switch t.base {
	case "numeric":
		if t.mod >= 0 {
			checks = append(checks, fmt.Sprintf("%s::numeric = %s::%s", x, x, t.full))
		}
	case "real", "double precision":
		checks = append(checks, fmt.Sprintf("(%s !~ '%s' OR %s)", x, integerRE, exactFloatInteger(x, t.base)))
		// Integer text is an int on every path, and the int -0 is 0:
		// read through numeric, which has no negative zero. Other text
		// is a float's (-0.0 stays -0).
		value = fmt.Sprintf("(CASE WHEN %s ~ '%s' THEN %s::numeric::text ELSE %s END)", x, integerRE, x, x)
	case "character varying", "character":
		if t.mod >= 4 {
			checks = append(checks, fmt.Sprintf("char_length(%s) <= %d", x, t.mod-4))
		} else if t.base == "character" {
			target = "bpchar" // "character" alone is character(1)
		}
	case "money":
		// The cast rounds to the currency's fraction digits, 2 under the
		// sessions' lc_monetary=C: 1.234 would be stored as $1.23. Any
		// text money's input takes ($12.30, 1,000.50, ($1.25)) is fine
		// with no nonzero digit past the second after the point; an
		// exponent, which money's input reads as no number, fails there.
		checks = append(checks, fmt.Sprintf("%s !~ '%s'", x, moneyRoundedRE))
	case "oid", "xid", "xid8", "cid":
		// The casts wrap: -1 would be stored as 4294967295.
		checks = append(checks, fmt.Sprintf("%s::numeric = %s::%s::text::numeric", x, x, t.base))
	case "bit", "bit varying":
		// The column's assignment checks the length exactly.
		return nil, "", "", withDomain(fmt.Sprintf("%s::varbit", x), t)
	case "timestamp without time zone":
		checks = append(checks, fmt.Sprintf("%s::timestamp = (%s::timestamptz AT TIME ZONE 'UTC')", x, x))
		checks = append(checks, timeChecks(x, "timestamp", t)...)
	case "timestamp with time zone":
		checks = append(checks, timeChecks(x, "timestamptz", t)...)
	case "time without time zone":
		// An offset is kept only if it is UTC's: the time with its zone
		// equals the time read without it, in UTC (the session's zone).
		// Compared as timetz, not through AT TIME ZONE, which would wrap
		// 24:00:00, a time of its own that the column stores as written,
		// to 00:00:00.
		checks = append(checks, fmt.Sprintf("%s::timetz = %s::time::timetz", x, x))
		checks = append(checks, timeChecks(x, "time", t)...)
	case "time with time zone":
		checks = append(checks, timeChecks(x, "timetz", t)...)
	case "date":
		// The time of day is checked as a timestamp reads it, which
		// rounds a fraction beyond microseconds (to midnight, for
		// 00:00:00.0000001): timeChecks refuse those first. A date alone
		// has no time of day to drop, and skips the check: a timestamp
		// ends at 294276 AD, a date at 5874897.
		checks = append(checks, fmt.Sprintf("CASE WHEN %s ~ '%s' THEN true ELSE %s::date = %s::timestamp AND %s::date = (%s::timestamptz AT TIME ZONE 'UTC') END", x, plainDateRE, x, x, x, x))
		checks = append(checks, timeChecks(x, "date", t)...)
	default:
		// Cast without the modifier: assigning the value to the column
		// applies it, with an error where it does not fit.
		return nil, "", "", fmt.Sprintf("%s::%s", x, keyType(t))
	}
	return checks, value, target, ""
}

// arrayElement returns the element type of t when t is an array type
// ("numeric(5,2)[]": base "numeric", full "numeric(5,2)", the same
// modifier, which Postgres applies to each element).
func arrayElement(t colType) (colType, bool) {
	if !strings.HasSuffix(t.base, "[]") {
		return colType{}, false
	}
	full := elementName(t.full)
	return colType{name: full, base: elementName(t.base), full: full, mod: t.mod}, true
}

// elementName is array type name s without its dimensions: "numeric(5,2)"
// for "numeric(5,2)[][]".
func elementName(s string) string {
	for {
		e, ok := strings.CutSuffix(s, "[]")
		if !ok {
			return s
		}
		s = e
	}
}

// arrayCastExpr is castExpr for an array column of element type elem:
// every element (of every dimension) passes the checks its scalar type
// would, the refusals of relative times and integers beyond int64
// included, or the value is refused naming the column. A plain cast would
// store 1.234 into numeric(5,2)[] as 1.23 and drop a +05 offset into
// timestamp[] without a word.
func arrayCastExpr(x, col string, t, elem colType) string {
	const e = "elem"
	checks, value, _, _ := scalarChecks(e, elem)
	if isTimeType(elem.base) {
		checks = append(checks, fmt.Sprintf("lower(%s) !~ '%s'", e, relativeTimeRE),
			fmt.Sprintf("(%s !~ '%s' OR %s(%s) IS NULL)", e, zoneWordRE, localTimeFunc, e))
	}
	if elem.base == "real" || elem.base == "double precision" {
		checks = append([]string{fmt.Sprintf("NOT (%s ~ '%s' AND %s)", e, integerRE, beyondInt64(e))}, checks...)
	}
	cast := withDomain(fmt.Sprintf("%s::%s", x, t.full), t)
	if value != e && value != "" {
		// Integer text of a float array reads through numeric (-0 is 0).
		cast = withDomain(fmt.Sprintf("ARRAY(SELECT %s FROM unnest(%s::text[]) AS u(%s))::%s", value, x, e, t.full), t)
		if strings.Count(t.base, "[]") > 1 {
			cast = withDomain(fmt.Sprintf("%s::%s", x, t.full), t) // unnest flattens: keep the dimensions
		}
	}
	if len(checks) == 0 {
		return cast
	}
	return fmt.Sprintf("CASE WHEN %[1]s IS NULL THEN NULL WHEN (SELECT coalesce(bool_and(%[2]s IS NULL OR (%[3]s)), true) FROM unnest(%[1]s::text[]) AS u(%[2]s)) THEN %[4]s ELSE %[5]s END",
		x, e, strings.Join(checks, " AND "), cast,
		refuseCall(x, col, t, fmt.Sprintf("format('%%s has an element that is not exactly a %%s: it would be stored as %%s', %s, %s, quote_literal(%s::%s::text))",
			quotedValue(x), quoteLiteral(elem.full), x, t.full)))
}

// timeChecks are the checks of every time type of base name typ.
func timeChecks(x, typ string, t colType) []string {
	c := []string{fmt.Sprintf("%s !~ '%s'", x, subMicroRE), fmt.Sprintf("%s !~ '%s'", x, secondSixtyRE)}
	if t.mod >= 0 {
		c = append(c, fmt.Sprintf("%s::%s = %s::%s", x, typ, x, t.full))
	}
	return c
}

func isTimeType(base string) bool {
	switch base {
	case "timestamp without time zone", "timestamp with time zone", "date", "time without time zone", "time with time zone":
		return true
	}
	return false
}

// keyType is the type event IDs are compared in: the column's type
// without its modifier ("character" alone would be character(1), and
// "bit" bit(1)), or its domain.
func keyType(t colType) string {
	switch {
	case t.domain:
		return t.name
	case t.base == "character":
		return "bpchar"
	case t.base == "bit":
		return "varbit"
	}
	return t.base
}

// withDomain casts expr, a value of t's base type, to t's domain.
func withDomain(expr string, t colType) string {
	if !t.domain {
		return expr
	}
	return fmt.Sprintf("(%s)::%s", expr, t.name)
}

// refuseCall is the call of refuseFunc for column col with message
// expression msg, typed as the CASE's other branches.
func refuseCall(x, col string, t colType, msg string) string {
	typ := t.full
	if t.domain {
		typ = t.name
	}
	return fmt.Sprintf("%s(NULL::%s, %s, %s)", refuseFunc, typ, quoteLiteral(col), msg)
}

// quotedValue is the SQL expression quoting x's first 100 characters for
// an error message.
func quotedValue(x string) string {
	return fmt.Sprintf("quote_literal(left(%s, 100)) || CASE WHEN char_length(%s) > 100 THEN '...' ELSE '' END", x, x)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// fieldError is a record's rejection by Postgres that names the field
// (and the column, when its name differs) it came from: the message, the
// SQLSTATE and the detail. Postgres's "where" is left out: it names the
// sink's own statement (a staging column, a parameter, refuseFunc).
type fieldError struct {
	field, column string
	pe            *pgconn.PgError
}

func (e *fieldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "field %q", e.field)
	if e.column != e.field {
		fmt.Fprintf(&b, " (column %q)", e.column)
	}
	fmt.Fprintf(&b, ": %s (SQLSTATE %s)", clip(e.pe.Message), e.pe.Code)
	if e.pe.Detail != "" {
		b.WriteString("; detail: " + clip(e.pe.Detail))
	}
	return b.String()
}

func (e *fieldError) Unwrap() error { return e.pe }

// nameField returns the rejection err of the single op o (a *rowError,
// the savepoint of its load rolled back) as a *fieldError naming the field that Postgres
// refused, when it can tell: the column of the error (a refusal by
// castExpr, a not-null violation), or else the first column whose cast
// alone fails for o's value, tried in a savepoint of its own (a cast that
// failed, a NUL that COPY refused in a staging column). The error is then
// that cast's. A row whose every value casts (a constraint, a trigger) is
// err as it is; so is any error of the diagnosis itself.
func (s *Sink) nameField(ctx context.Context, tx pgx.Tx, o op, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || o.del {
		return err
	}
	for _, c := range s.cfg.Columns {
		if pe.ColumnName == c.Name {
			return &fieldError{field: c.Source, column: c.Name, pe: pe}
		}
	}
	const sp = "exactly_diagnose"
	for i, c := range s.cfg.Columns {
		if o.row[i] == nil {
			continue
		}
		if _, serr := tx.Exec(ctx, "SAVEPOINT "+sp); serr != nil {
			return err
		}
		_, cerr := tx.Exec(ctx, "SELECT "+castExpr("$1::text", c.Name, s.types[i]), o.row[i])
		end := "RELEASE SAVEPOINT " + sp
		if cerr != nil {
			end = "ROLLBACK TO SAVEPOINT " + sp
		}
		if _, serr := tx.Exec(ctx, end); serr != nil {
			return err
		}
		if cerr != nil {
			var cpe *pgconn.PgError
			if !IsDataError(cerr) || !errors.As(cerr, &cpe) {
				return err
			}
			return &fieldError{field: c.Source, column: c.Name, pe: cpe}
		}
	}
	return err
}
