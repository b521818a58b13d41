package pgsink

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/exactly-io/exactly/topology"
)

// Without a schema (Connect's JsonConverter with schemas.enable=false) a
// change event's JSON does not say what a number or a string means where
// one of the connector's modes chose its form. Debezium's PostgreSQL
// connector, "Data type mappings"
// (https://debezium.io/documentation/reference/stable/connectors/postgresql.html#postgresql-data-types):
//   - decimal.handling.mode: precise (default) writes a numeric or money
//     as base64 of its unscaled two's complement bytes, its scale in the
//     schema only (a numeric with no fixed scale as {"scale","value"});
//     string writes the plain decimal text; double a JSON number.
//   - interval.handling.mode: numeric (default) writes microseconds
//     (months counted as 365.25/12 days); string ISO 8601 (P…Y…M…DT…H…M…S).
//   - time.precision.mode: adaptive (default) writes a date as days since
//     the epoch, a time(0-3) or timestamp(0-3) in milliseconds, one of
//     precision 4-6 in microseconds; adaptive_time_microseconds a time
//     always in microseconds; connect milliseconds throughout; isostring
//     ISO 8601 text. A timestamptz or timetz is ISO 8601 text in every
//     mode.
// modeText reads such a value by the sink's setting that mirrors the
// mode, or refuses it (a *modeError naming the option to set); it never
// guesses.

// modeText is field src of obj for a column of type t read by the sink's
// decimal, interval and time settings; ok is false where none applies: a
// field a schema (Connect or Avro) types, a source of the record, null, a
// setting left empty, a column of another type.
func (s *Sink) modeText(obj map[string]any, src string, t colType, sch map[string]connectSchema) (v any, ok bool, err error) {
	if strings.HasPrefix(src, "$") || obj == nil || obj[src] == nil || s.typed.avro {
		return nil, false, nil
	}
	if _, typed := sch[src]; typed {
		return nil, false, nil
	}
	conv := s.modeConverter(t)
	if conv == nil {
		return nil, false, nil
	}
	fv := obj[src]
	if _, isArray := arrayElement(t); isArray {
		raw, isJSON := fv.(json.RawMessage)
		if !isJSON || len(raw) == 0 || raw[0] != '[' {
			return nil, false, nil
		}
		b, err := appendModeArray(nil, raw, src, conv)
		if err != nil {
			return nil, true, err
		}
		return string(b), true, nil
	}
	text, err := conv(fv, src)
	return text, true, err
}

// modeConv reads one value (a string, json.Number or json.RawMessage) of
// field path as its column's text.
type modeConv func(v any, path string) (string, error)

// modeConverter is the reader of values going to a column of type t (or
// to the elements of an array column), nil where no setting applies.
func (s *Sink) modeConverter(t colType) modeConv {
	if elem, isArray := arrayElement(t); isArray {
		t = elem
	}
	// Each reader keeps only its own setting: a closure over the whole
	// Config would copy it to the heap for every column of every record.
	switch t.base {
	case "numeric", "money", "real", "double precision", "smallint", "integer", "bigint":
		mode := s.cfg.DecimalHandling
		if mode == "" {
			return nil
		}
		return func(v any, path string) (string, error) { return decimalModeText(v, path, t, mode) }
	case "interval":
		mode := s.cfg.IntervalHandling
		if mode == "" {
			return nil
		}
		return func(v any, path string) (string, error) { return intervalText(v, path, mode) }
	case "date", "time without time zone", "timestamp without time zone", "time with time zone", "timestamp with time zone":
		precision := s.cfg.TimePrecision
		if precision == "" {
			return nil
		}
		return func(v any, path string) (string, error) { return temporalText(v, path, t, precision) }
	}
	return nil
}

// appendModeArray appends raw, the JSON array of field path, as an array
// literal whose elements conv reads, each quoted.
func appendModeArray(b []byte, raw json.RawMessage, path string, conv modeConv) ([]byte, error) {
	return appendArrayOf(b, raw, path, func(b []byte, _ json.RawMessage, v any, at string) ([]byte, error) {
		text, err := conv(v, at)
		if err != nil {
			return nil, err
		}
		return appendQuotedElement(b, text), nil
	})
}

// plainDecimal is the text a numeric takes in and Debezium's string mode
// writes (BigDecimal.toPlainString), with an exponent allowed.
var plainDecimal = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// notFinite is the text Debezium and the JSON converter write for the
// values of a numeric or double that are no number.
func notFinite(s string) bool {
	switch s {
	case "NaN", "Infinity", "-Infinity":
		return true
	}
	return false
}

// decimalModeText is v, of field path, for a column of type t by mode
// (decimal.handling.mode).
func decimalModeText(v any, path string, t colType, mode string) (string, error) {
	const option = "decimal.handling.mode"
	refuse := func(why string) error {
		return &modeError{field: path, column: t.name, setting: "decimal_handling", mode: mode, option: option, why: why}
	}
	switch v := v.(type) {
	case json.Number:
		return string(v), nil // an integer or floating-point column's value, exact as written
	case json.RawMessage:
		if mode == topology.DecimalPrecise && len(v) > 0 && v[0] == '{' {
			text, err := variableScaleText(v)
			if err != nil {
				return "", refuse(err.Error())
			}
			return text, nil
		}
		return "", refuse("want a decimal, got " + shownJSON(v))
	case string:
		switch mode {
		case topology.DecimalString:
			if plainDecimal.MatchString(v) || notFinite(v) {
				return v, nil
			}
			return "", refuse(fmt.Sprintf("text %q is no decimal", v))
		case topology.DecimalDouble:
			if notFinite(v) {
				return v, nil
			}
			return "", refuse(fmt.Sprintf("want a JSON number, got text %q", v))
		}
		return "", refuse(fmt.Sprintf("text %q is a decimal's unscaled bytes whose scale only the schema holds: needs schemas.enable=true, or %s=string and decimal_handling: string", v, option))
	}
	return "", refuse("want a decimal, got " + shownValue(v))
}

// variableScaleText reads Debezium's VariableScaleDecimal, a numeric of
// no fixed scale in precise mode: {"scale": s, "value": base64 of the
// unscaled big-endian two's complement bytes}.
func variableScaleText(raw json.RawMessage) (string, error) {
	var d struct {
		Scale *int32  `json:"scale"`
		Value *string `json:"value"`
	}
	if err := json.Unmarshal(raw, &d); err != nil || d.Scale == nil || d.Value == nil {
		return "", fmt.Errorf("want {\"scale\", \"value\"} of a variable-scale decimal, got %s", shownJSON(raw))
	}
	return decimalText(*d.Value, int(*d.Scale))
}

// intervalText is v, of field path, for an interval column by mode
// (interval.handling.mode).
func intervalText(v any, path, mode string) (string, error) {
	refuse := func(why string) error {
		return &modeError{field: path, column: "interval", setting: "interval_handling", mode: mode, option: "interval.handling.mode", why: why}
	}
	switch mode {
	case topology.IntervalNumeric:
		n, isNum := v.(json.Number)
		if !isNum {
			return "", refuse("want microseconds as a JSON number, got " + shownValue(v))
		}
		us, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return "", refuse(fmt.Sprintf("want whole microseconds, got %s", n))
		}
		return microsText(us), nil
	case topology.IntervalString:
		str, isText := v.(string)
		if !isText || !strings.HasPrefix(strings.TrimPrefix(str, "-"), "P") {
			return "", refuse("want ISO 8601 text (P…), got " + shownValue(v))
		}
		return str, nil // Postgres reads ISO 8601 "format with designators" exactly
	}
	return "", refuse("unknown mode")
}

// microsText is us microseconds as an interval's hours:minutes:seconds,
// which keeps every microsecond (no month or day is made of them).
func microsText(us int64) string {
	sign := ""
	u := uint64(us)
	if us < 0 {
		sign, u = "-", uint64(-(us+1))+1
	}
	const perSec, perHour = 1_000_000, 3_600_000_000
	return fmt.Sprintf("%s%d:%02d:%02d.%06d", sign, u/perHour, u%perHour/(60*perSec), u%(60*perSec)/perSec, u%perSec)
}

// temporalText is v, of field path, for a date, time or timestamp column
// of type t by mode (time.precision.mode). Text is the column type's
// input (ISO 8601, as isostring, ZonedTimestamp and ZonedTime write it);
// a number is read in the unit the mode gives a column of t's precision.
func temporalText(v any, path string, t colType, mode string) (string, error) {
	refuse := func(why string) error {
		return &modeError{field: path, column: t.name, setting: "time_precision", mode: mode, option: "time.precision.mode", why: why}
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case json.Number:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return "", refuse(fmt.Sprintf("want a whole number, got %s", v))
		}
		unit, why := temporalUnit(t, mode)
		if unit == 0 {
			return "", refuse(why)
		}
		return epochText(n, unit, t)
	}
	return "", refuse("want text or a number, got " + shownValue(v))
}

// temporalUnit is the unit of a number the connector in mode writes for
// a column of type t; 0, and why, where it writes none.
func temporalUnit(t colType, mode string) (unit time.Duration, why string) {
	if mode == topology.TimeISOString {
		return 0, "the connector writes ISO 8601 text in this mode, not a number"
	}
	// Precision as the column declares it: -1 (none) is 6 in Postgres.
	prec := int(t.mod)
	if prec < 0 {
		prec = 6
	}
	switch t.base {
	case "date":
		return 24 * time.Hour, ""
	case "time without time zone":
		if mode == topology.TimeConnect || mode == topology.TimeAdaptive && prec <= 3 {
			return time.Millisecond, ""
		}
		return time.Microsecond, ""
	case "timestamp without time zone":
		if mode == topology.TimeConnect || prec <= 3 {
			return time.Millisecond, ""
		}
		return time.Microsecond, ""
	}
	return 0, "the connector writes a " + t.base + " as ISO 8601 text in every mode: a number has no known unit"
}

// epochText is n units as the text of a column of type t: days since
// 1970-01-01 for a date, a time of day, or a timestamp since the epoch.
func epochText(n int64, unit time.Duration, t colType) (string, error) {
	switch t.base {
	case "date":
		// Postgres's dates run from 4713 BC to 5874897 AD.
		if n < -2_440_588 || n > 2_145_031_948 {
			return "", fmt.Errorf("%d days is out of range of a date", n)
		}
		return yearText(time.Unix(n*86400, 0).UTC(), "2006-01-02"), nil
	case "time without time zone":
		us := n * int64(unit/time.Microsecond)
		if n < 0 || us < 0 || us > 24*3_600_000_000 {
			return "", fmt.Errorf("%d %s is no time of day", n, unitName(unit))
		}
		return microsText(us), nil
	}
	per := int64(unit / time.Microsecond)
	if n > 1<<62/per || n < -(1<<62)/per {
		return "", fmt.Errorf("%d %s is out of range of a timestamp", n, unitName(unit))
	}
	return yearText(time.UnixMicro(n*per).UTC(), "2006-01-02 15:04:05.999999"), nil
}

// yearText formats tm by layout, with Postgres's era suffix for a year
// before 1 AD (Go's year 0 is 1 BC).
func yearText(tm time.Time, layout string) string {
	if tm.Year() > 0 {
		return tm.Format(layout)
	}
	return fmt.Sprintf("%04d", 1-tm.Year()) + tm.Format(layout[len("2006"):]) + " BC"
}

func unitName(unit time.Duration) string {
	switch unit {
	case time.Millisecond:
		return "milliseconds"
	case time.Microsecond:
		return "microseconds"
	}
	return "days"
}
