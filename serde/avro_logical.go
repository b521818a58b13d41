package serde

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// Layouts of the JSON text of Avro's date and time logical types.
const (
	dateLayout      = "2006-01-02"
	timeLayout      = "15:04:05.999999999"
	localTimeLayout = "2006-01-02T15:04:05.999999999"
)

var epochDay = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

// ParseTime reads an RFC 3339 date-time (local: one without an offset, a
// local-timestamp's), in every spelling RFC 3339 §5.6 allows: "T" or "t"
// between date and time, or the space that its NOTE lets applications
// use (as Python's str() of a datetime and PostgreSQL write it), and "Z"
// or "z". Go's layouts take only "T" and "Z". The error is time.Parse's.
func ParseTime(s string, local bool) (time.Time, error) {
	if len(s) > 10 && (s[10] == ' ' || s[10] == 't') {
		s = s[:10] + "T" + s[11:]
	}
	if local {
		return time.Parse(localTimeLayout, s)
	}
	if n := len(s); n > 0 && s[n-1] == 'z' {
		s = s[:n-1] + "Z"
	}
	return time.Parse(time.RFC3339Nano, s)
}

// logicalFromAvro renders the goavro native value v of the logical type t as
// plain JSON-friendly values: see values.md, "Conversion rules".
func logicalFromAvro(t *avroType, v any) (any, error) {
	switch t.logical {
	case logicalDecimal:
		return decimalFromAvro(t, v.([]byte))
	case logicalUUID:
		return uuidFromAvro(t, v)
	case logicalDate:
		d := epochDay.AddDate(0, 0, int(v.(int32)))
		if err := rfc3339Year(t, v, d); err != nil {
			return nil, err
		}
		return d.Format(dateLayout), nil
	case logicalTimeMillis:
		return timeFromAvro(t, v, time.Duration(v.(int32))*time.Millisecond)
	case logicalTimeMicros:
		return timeFromAvro(t, v, time.Duration(v.(int64))*time.Microsecond)
	}
	return timestampFromAvro(t, v)
}

// maxDecimalScale bounds the digits after the point of a decimal the
// codec reads or writes: a schema's scale is the writer's to choose (up
// to 2^31-1), and its text, or the power of ten that scales it, would be
// that long. Postgres's numeric holds 16383.
const maxDecimalScale = 1 << 16

func errDecimalScale(t *avroType) error {
	return fmt.Errorf("%w: decimal scale %d is beyond the %d digits after the point the codec reads or writes", ErrUnsupported, t.scale, maxDecimalScale)
}

func decimalFromAvro(t *avroType, b []byte) (any, error) {
	if t.scale > maxDecimalScale {
		return nil, errDecimalScale(t)
	}
	s := decimalString(b, t.scale)
	// A datum with more digits than its schema's precision does not
	// match the schema; reading it would make a value no codec writes.
	if digits := significantDigits(s); digits > t.precision {
		return nil, fmt.Errorf("%w: decimal has %d digits, more than precision %d", ErrSyntax, digits, t.precision)
	}
	return s, nil
}

func uuidFromAvro(t *avroType, v any) (any, error) {
	if t.kind == kindFixed {
		b := v.([]byte)
		h := hex.EncodeToString(b)
		return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32], nil
	}
	// A string that is no UUID does not match the schema (the Avro
	// spec: a uuid string conforms to RFC 4122); writing it back as
	// Avro would be refused, so reading it is too: one outcome on
	// every path.
	if _, err := parseUUID(v.(string)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	return v, nil
}

// timeFromAvro renders d, the time of day v of type t since midnight.
func timeFromAvro(t *avroType, v any, d time.Duration) (any, error) {
	if d < 0 || d >= 24*time.Hour {
		return nil, fmt.Errorf("%w: %s %d is outside one day", ErrSyntax, t.logical, v)
	}
	return epochDay.Add(d).Format(timeLayout), nil
}

// timestampFromAvro renders v, a long count of t's units since the epoch.
func timestampFromAvro(t *avroType, v any) (any, error) {
	n := v.(int64)
	var ts time.Time
	switch t.logical.unit() {
	case time.Millisecond:
		ts = time.UnixMilli(n)
	case time.Microsecond:
		ts = time.UnixMicro(n)
	default:
		ts = time.Unix(0, n)
	}
	if err := rfc3339Year(t, v, ts.UTC()); err != nil {
		return nil, err
	}
	if t.logical.isLocal() {
		return ts.UTC().Format(localTimeLayout), nil
	}
	return ts.UTC().Format(time.RFC3339Nano), nil
}

// rfc3339Year returns an error for a date or timestamp d (value v of
// logical type t) whose year RFC 3339 text cannot hold: its date-fullyear
// is four digits, 0000 to 9999 (RFC 3339 §5.6). Go would write the year
// 10000 (Long.MAX_VALUE milliseconds is the year 292278994) as more
// digits, text that no RFC 3339 reader reads back, this codec's own
// included; such a value has no exact text, and its record is a dead
// letter naming the field.
func rfc3339Year(t *avroType, v any, d time.Time) error {
	if y := d.Year(); y < 0 || y > 9999 {
		return valueErr("", fmt.Errorf("%s %v is in the year %d, outside the years 0000 to 9999 of RFC 3339 text", t.logical, v, y))
	}
	return nil
}

// logicalToAvro is the inverse of logicalFromAvro. It also accepts the
// number of units itself (days, milliseconds, ...) for the integer-based
// types. What it writes, logicalFromAvro reads: a value that reading
// refuses (a time-millis of 86400000, outside one day; a date in the year
// 10000, which RFC 3339 text cannot hold) is refused here too, with the
// same words, so that no record goes out that every reader dead-letters.
func logicalToAvro(t *avroType, v any) (any, error) {
	n, err := logicalToAvroUnchecked(t, v)
	if err != nil || t.logical == logicalDecimal || t.logical == logicalUUID {
		return n, err // decimalBytes and parseUUID check what reading would
	}
	if _, err := logicalFromAvro(t, n); err != nil {
		return nil, err
	}
	return n, nil
}

// intType is Avro's int, which a date is.
var intType = &avroType{kind: kindInt}

// logicalToAvroUnchecked is logicalToAvro without the check that reading
// takes the value back.
func logicalToAvroUnchecked(t *avroType, v any) (any, error) {
	switch t.logical {
	case logicalDecimal:
		return decimalBytes(t, v)
	case logicalUUID:
		return uuidToAvro(t, v)
	}
	s, isString := v.(string)
	switch {
	case !isString:
		return unitsToAvro(t, v)
	case t.logical == logicalDate:
		d, err := time.Parse(dateLayout, s)
		if err != nil {
			return nil, fmt.Errorf("%w: date %q: want YYYY-MM-DD", ErrUnsupported, s)
		}
		return toAvro(intType, d.Unix()/86400) // midnight UTC: exact
	case t.logical.isTime():
		return timeToAvro(t, s)
	}
	return timestampToAvro(t, s)
}

func uuidToAvro(t *avroType, v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, mismatch(t, v)
	}
	b, err := parseUUID(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if t.kind == kindFixed {
		return b, nil
	}
	return s, nil
}

// unitsToAvro converts v, the number of t's units itself (days,
// milliseconds, ...), into t's int or long.
func unitsToAvro(t *avroType, v any) (any, error) {
	i, err := integer(v)
	if err != nil {
		return nil, numberErr(t, v, err)
	}
	if t.kind == kindInt {
		return toAvro(intType, i)
	}
	return i, nil
}

// timeToAvro converts s, a time of day, into the count of t's units since
// midnight.
func timeToAvro(t *avroType, s string) (any, error) {
	d, err := time.Parse(timeLayout, s)
	if err != nil {
		return nil, fmt.Errorf("%w: time %q: want HH:MM:SS[.fraction]", ErrUnsupported, s)
	}
	since := d.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))
	if t.logical == logicalTimeMillis {
		if since%time.Millisecond != 0 {
			return nil, fmt.Errorf("%w: time %q has more precision than time-millis", ErrUnsupported, s)
		}
		return int32(since / time.Millisecond), nil
	}
	if since%time.Microsecond != 0 {
		return nil, fmt.Errorf("%w: time %q has more precision than time-micros", ErrUnsupported, s)
	}
	return int64(since / time.Microsecond), nil
}

// timestampToAvro converts s, RFC 3339 text (without a zone for a local
// timestamp), into the count of t's units since the epoch.
func timestampToAvro(t *avroType, s string) (any, error) {
	local := t.logical.isLocal()
	ts, err := ParseTime(s, local)
	if err != nil {
		if local {
			// A local timestamp has no zone: "…Z" or "+05:00" names one.
			return nil, fmt.Errorf("%w: %s %q: want a date and time without a zone or offset (2006-01-02T15:04:05[.fraction])", ErrUnsupported, t.logical, s)
		}
		return nil, fmt.Errorf("%w: timestamp %q: want RFC 3339", ErrUnsupported, s)
	}
	unit := t.logical.unit()
	// Divide without UnixNano, which overflows outside 1678-2262.
	secs, nanos := ts.Unix(), int64(ts.Nanosecond())
	if nanos%int64(unit) != 0 {
		return nil, fmt.Errorf("%w: timestamp %q has more precision than %s", ErrUnsupported, s, t.logical)
	}
	per := int64(time.Second / unit)
	n := new(big.Int).Mul(big.NewInt(secs), big.NewInt(per))
	n.Add(n, big.NewInt(nanos/int64(unit)))
	if !n.IsInt64() {
		return nil, fmt.Errorf("%w: timestamp %q overflows %s", ErrUnsupported, s, t.logical)
	}
	return n.Int64(), nil
}

// decimalString renders the two's-complement big-endian unscaled value b
// with scale digits after the point: "12.34", "-0.000123", "9223372036854775808".
func decimalString(b []byte, scale int) string {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	neg := n.Sign() < 0
	digits := n.Abs(n).String()
	if scale > 0 {
		if len(digits) <= scale {
			digits = strings.Repeat("0", scale-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// decimalBytes encodes v (a decimal string, a JSON number or a Go number) as
// the unscaled two's-complement bytes of decimal type t. A value with more
// fractional digits than the scale, or more digits than the precision, is an
// error: decimals are money, and rounding them silently is a loss.
func decimalBytes(t *avroType, v any) ([]byte, error) {
	text, ok := decimalText(v)
	if !ok {
		return nil, mismatch(t, v)
	}
	if len(text) > 1000 {
		return nil, fmt.Errorf("%w: decimal text longer than 1000 characters", ErrUnsupported)
	}
	r, ok := new(big.Rat).SetString(strings.TrimSpace(text))
	if !ok || strings.ContainsAny(text, "/") {
		return nil, fmt.Errorf("%w: %q is not a decimal number", ErrUnsupported, truncateText(text))
	}
	if t.scale > maxDecimalScale {
		return nil, errDecimalScale(t)
	}
	r.Mul(r, new(big.Rat).SetInt(bigPow10(t.scale)))
	if !r.IsInt() {
		return nil, fmt.Errorf("%w: decimal %s has more than %d fractional digits (scale %d); it is not rounded", ErrUnsupported, truncateText(text), t.scale, t.scale)
	}
	unscaled := r.Num()
	if digits := len(new(big.Int).Abs(unscaled).String()); unscaled.Sign() != 0 && digits > t.precision {
		return nil, fmt.Errorf("%w: decimal %s needs %d digits, more than precision %d", ErrUnsupported, truncateText(text), digits, t.precision)
	}
	b := twosComplement(unscaled)
	if t.kind == kindFixed {
		return signExtend(t, b, unscaled.Sign() < 0, text)
	}
	return b, nil
}

// decimalText is the decimal text of v: a decimal string, a JSON number
// or a Go number; false for any other value.
func decimalText(v any) (string, bool) {
	switch n := v.(type) {
	case string:
		return n, true
	case json.Number:
		return string(n), true
	case int64:
		return strconv.FormatInt(n, 10), true
	case uint64:
		return strconv.FormatUint(n, 10), true
	case int:
		return strconv.Itoa(n), true
	case float64:
		// The shortest text that reads back as n: 0.1 is "0.1", not the
		// binary fraction's 55 digits.
		return strconv.FormatFloat(n, 'f', -1, 64), true
	}
	return "", false
}

// signExtend widens b, the two's complement of the decimal text (negative
// if neg), to the size of fixed t.
func signExtend(t *avroType, b []byte, neg bool, text string) ([]byte, error) {
	if len(b) > t.size {
		return nil, fmt.Errorf("%w: decimal %s does not fit in %d bytes", ErrUnsupported, truncateText(text), t.size)
	}
	pad := byte(0)
	if neg {
		pad = 0xff
	}
	out := make([]byte, t.size)
	for i := range t.size - len(b) {
		out[i] = pad
	}
	copy(out[t.size-len(b):], b)
	return out, nil
}

// twosComplement returns the shortest big-endian two's-complement form of n.
func twosComplement(n *big.Int) []byte {
	switch n.Sign() {
	case 0:
		return []byte{0}
	case 1:
		b := n.Bytes()
		if b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	// -n in k bytes is 2^(8k) - |n|, with k the least that keeps the sign bit.
	k := (new(big.Int).Sub(new(big.Int).Abs(n), big.NewInt(1)).BitLen())/8 + 1
	m := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), uint(8*k)), n)
	b := m.Bytes()
	for len(b) < k {
		b = append([]byte{0xff}, b...)
	}
	return b
}

func parseUUID(s string) ([]byte, error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return nil, fmt.Errorf("%q is not a UUID (want 8-4-4-4-12 hex digits)", truncateText(s))
	}
	b, err := hex.DecodeString(s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:])
	if err != nil {
		return nil, fmt.Errorf("%q is not a UUID (want 8-4-4-4-12 hex digits)", truncateText(s))
	}
	return b, nil
}

func truncateText(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// significantDigits counts the digits of the unscaled value of decimal text
// s, without leading zeros: "-0.0120" has 3.
func significantDigits(s string) int {
	s = strings.TrimLeft(s, "-0.")
	return len(s) - strings.Count(s, ".")
}
