package serde

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the exact JSON value rules that every path shares: how a
// number's text gives its type, which values JSON text cannot hold, and
// the strict reading and writing of strings and numbers. values.md
// states them for users.
//
// The functions that take raw JSON bytes expect bytes that passed CheckJSON
// (one value, valid syntax, valid UTF-8); they do not check syntax again.

// IsDoubleText reports whether the JSON number text is a double by the
// text rule: it has a '.', an 'e' or an 'E'. Any other number is an
// integer.
func IsDoubleText(text string) bool { return strings.ContainsAny(text, ".eE") }

// ParseNumber reads JSON number text by the text rule: int64 for an
// integer, float64 for a double. It returns a *ValueError naming path for
// an integer beyond int64, and for a double that overflows to ±Inf or
// underflows to zero: such a number is never rounded to something else.
func ParseNumber(text, path string) (any, error) {
	if IsDoubleText(text) {
		f, err := parseFloat(text, 64)
		if err != nil {
			return nil, valueErr(path, err)
		}
		return f, nil
	}
	i, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return nil, valueErr(path, fmt.Errorf("integer %s is beyond the range of a 64-bit integer (int64)", truncateText(text)))
	}
	return i, nil
}

// parseFloat converts decimal number text to the nearest float of size
// bits (32 or 64), but fails instead of returning ±Inf for an overflow or
// zero for a nonzero number that underflows.
func parseFloat(text string, bits int) (float64, error) {
	name := "a double"
	if bits == 32 {
		name = "a float"
	}
	f, err := strconv.ParseFloat(text, bits)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, fmt.Errorf("number %s is beyond the range of %s", truncateText(text), name)
		}
		return 0, fmt.Errorf("number %q: %v", truncateText(text), err)
	}
	if f == 0 && nonzeroMantissa(text) {
		return 0, fmt.Errorf("number %s underflows to zero as %s", truncateText(text), name)
	}
	return f, nil
}

// exactFloat converts integer text to a float of size bits only if the
// float holds it exactly: 9007199254740993 is not a double.
func exactFloat(text string, bits int) (float64, error) {
	name, mant := "a double", uint(53)
	if bits == 32 {
		name, mant = "a float", 24
	}
	n, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return 0, fmt.Errorf("number %q is not an integer", truncateText(text))
	}
	bf := new(big.Float).SetPrec(mant).SetMode(big.ToNearestEven).SetInt(n)
	f, acc := bf.Float64()
	if bits == 32 {
		var f32 float32
		f32, acc = bf.Float32()
		f = float64(f32)
	}
	if bf.Acc() != big.Exact || acc != big.Exact || math.IsInf(f, 0) {
		return 0, fmt.Errorf("integer %s is not exactly %s (it would be rounded)", truncateText(text), name)
	}
	return f, nil
}

// nonzeroMantissa reports whether the digits before the exponent of
// number text s include one other than 0.
func nonzeroMantissa(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == 'e' || c == 'E':
			return false
		case c >= '1' && c <= '9':
			return true
		}
	}
	return false
}

// ValueError is a value that cannot be read or written exactly: a number
// beyond its type's range, a lone surrogate, NaN in JSON. Path names the
// field ("customer.tier", "items[2]"; "" is the whole value). It wraps
// ErrInexact.
type ValueError struct {
	Path string
	Err  error
}

func (e *ValueError) Error() string {
	if e.Path == "" {
		return "value: " + e.Err.Error()
	}
	return fmt.Sprintf("field %q: %s", e.Path, e.Err.Error())
}

// Unwrap returns ErrInexact and the cause.
func (e *ValueError) Unwrap() []error { return []error{ErrInexact, e.Err} }

func valueErr(path string, err error) error { return &ValueError{Path: path, Err: err} }

// JoinPath returns the path of field name inside the value at path.
func JoinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// IndexPath returns the path of element i of the array at path.
func IndexPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Unquote returns the text of the JSON string raw (quotes included). A
// \u escape of half a surrogate pair with no other half (a lone surrogate,
// "\ud800") is not text: it is an error naming path, never U+FFFD.
func Unquote(raw []byte, path string) (string, error) {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), nil
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		if body[i+1] != 'u' {
			out = append(out, unescape(body[i+1]))
			i += 2
			continue
		}
		var r rune
		if r, i = unicodeEscape(body, i); utf16.IsSurrogate(r) {
			return "", valueErr(path, fmt.Errorf(`string has a lone surrogate \u%04x, which is not text`, r))
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out), nil
}

// simpleEscapes maps the letter of each one-letter JSON escape that is
// not its own character (\n) to the character it stands for.
var simpleEscapes = [256]byte{'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// unescape returns the character that the escape of c (a backslash then
// c, not \u) stands for: '\n' for 'n', c itself for '"', '\\' and '/'.
func unescape(c byte) byte {
	if e := simpleEscapes[c]; e != 0 {
		return e
	}
	return c
}

// unicodeEscape decodes the \u escape at i of the body of a JSON string,
// and a second that makes a surrogate pair with it, and returns the index
// after them. A lone surrogate is returned as itself.
func unicodeEscape(b []byte, i int) (rune, int) {
	r := hex4(b[i+2 : i+6])
	i += 6
	if r >= 0xd800 && r < 0xdc00 && i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' {
		if lo := hex4(b[i+2 : i+6]); lo >= 0xdc00 && lo <= 0xdfff {
			return utf16.DecodeRune(r, lo), i + 6
		}
	}
	return r, i
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// Member is one member of a JSON object, as offsets into the object's
// bytes: the key with its quotes, and the value.
type Member struct {
	KeyStart, KeyEnd     int
	ValueStart, ValueEnd int
}

// Key returns the raw key of m in obj, quotes included.
func (m Member) Key(obj []byte) []byte { return obj[m.KeyStart:m.KeyEnd] }

// Value returns the raw value of m in obj.
func (m Member) Value(obj []byte) []byte { return obj[m.ValueStart:m.ValueEnd] }

// AppendMembers appends the members of the JSON object obj, in order, to
// dst. obj starts with '{' and passed CheckJSON (as a whole or as part of
// a checked value). Two members with one key are an error, a *ValueError
// wrapping ErrDuplicateKey that names the key under path (the object's
// path), returned with the members: every reader of an object's members
// goes through here, so that none reads an object with duplicate keys.
func AppendMembers(dst []Member, obj []byte, path string) ([]Member, error) {
	start := len(dst)
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] != '}' {
		var m Member
		m.KeyStart = i
		m.KeyEnd = skipString(obj, i)
		i = skipSpace(obj, m.KeyEnd)
		m.ValueStart = skipSpace(obj, i+1) // after the ':'
		m.ValueEnd = skipValue(obj, m.ValueStart)
		dst = append(dst, m)
		i = skipSpace(obj, m.ValueEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return dst, checkKeys(obj, dst[start:], path)
}

// CheckKeys returns the error of AppendMembers for the first object in
// the JSON value b (checked), at any depth, with two members of one key,
// named under path; nil if every object's keys are unique. It is for a
// value that goes on as its bytes to a reader that decodes it (a jsonb
// column keeps the last of the duplicates), so that the reader gets one
// meaning or none.
func CheckKeys(b []byte, path string) error {
	i := skipSpace(b, 0)
	if i >= len(b) || (b[i] != '{' && b[i] != '[') {
		return nil
	}
	v := b[i:skipValue(b, i)]
	if v[0] == '[' {
		var buf [32]int
		offs := AppendElements(buf[:0], v)
		for k := 0; k < len(offs); k += 2 {
			if err := CheckKeys(v[offs[k]:offs[k+1]], IndexPath(path, k/2)); err != nil {
				return err
			}
		}
		return nil
	}
	var buf [16]Member
	ms, err := AppendMembers(buf[:0], v, path)
	if err != nil {
		return err
	}
	return checkMemberKeys(v, ms, path)
}

// checkMemberKeys is CheckKeys of the objects and arrays among the values
// of ms, the members of the object obj at path, whose own keys are
// unique.
func checkMemberKeys(obj []byte, ms []Member, path string) error {
	for _, m := range ms {
		val := m.Value(obj)
		if val[0] != '{' && val[0] != '[' {
			continue
		}
		name, err := Unquote(m.Key(obj), "")
		if err != nil {
			name = string(m.Key(obj)[1 : m.KeyEnd-m.KeyStart-1]) // no text: as written
		}
		if err := CheckKeys(val, JoinPath(path, name)); err != nil {
			return err
		}
	}
	return nil
}

// keysMapFrom is the member count from which checkKeys remembers the keys
// in a map. Below it, comparing every pair is cheaper: mostly a length
// test, without allocating.
const keysMapFrom = 32

// checkKeys returns the error of the first member of ms (members of obj)
// whose key an earlier member has, nil if the keys are unique. RFC 8259
// (section 4) says names SHOULD be unique and that readers of an object
// with duplicates behave unpredictably: encoding/json takes the last,
// others the first or both. Whichever one a stage chose, the next reader
// (a stage, Postgres, a consumer) might choose another, so an object that
// is read must have one meaning or be refused.
func checkKeys(obj []byte, ms []Member, path string) error {
	if len(ms) < 2 {
		return nil
	}
	if len(ms) >= keysMapFrom {
		return checkKeysMap(obj, ms, path)
	}
	var escaped uint64 // bit i: the key of ms[i] has an escape
	for i, m := range ms {
		if bytes.IndexByte(obj[m.KeyStart:m.KeyEnd], '\\') >= 0 {
			escaped |= 1 << i
		}
	}
	for j := 1; j < len(ms); j++ {
		kj := ms[j].Key(obj)
		for i := range j {
			ki := ms[i].Key(obj)
			var same bool
			switch ei, ej := escaped>>i&1 != 0, escaped>>j&1 != 0; {
			case !ei && !ej:
				same = len(ki) == len(kj) && string(ki) == string(kj)
			case !ei && len(ki) >= len(kj), !ej && len(kj) >= len(ki):
				// An escape makes a key's text shorter than its bytes.
			default:
				same = sameKeyText(ki, kj)
			}
			if same {
				return duplicateKey(ki, kj, path)
			}
		}
	}
	return nil
}

// checkKeysMap is checkKeys for a large object.
func checkKeysMap(obj []byte, ms []Member, path string) error {
	seen := make(map[string]int, len(ms))
	var text []byte
	for j, m := range ms {
		text = appendKeyText(text[:0], m.Key(obj))
		if i, dup := seen[string(text)]; dup {
			return duplicateKey(ms[i].Key(obj), m.Key(obj), path)
		}
		seen[string(text)] = j
	}
	return nil
}

// sameKeyText reports whether the quoted JSON keys a and b have the same
// text, character by character, with escapes decoded.
func sameKeyText(a, b []byte) bool {
	a, b = a[1:len(a)-1], b[1:len(b)-1]
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		var ra, rb rune
		ra, i = keyRune(a, i)
		rb, j = keyRune(b, j)
		if ra != rb {
			return false
		}
	}
	return i == len(a) && j == len(b)
}

// appendKeyText appends the text of the quoted JSON key to dst, with
// escapes decoded. A lone surrogate, which is no text, is written as its
// 3-byte form (as WTF-8 does), so that it equals only itself.
func appendKeyText(dst, quoted []byte) []byte {
	body := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return append(dst, body...)
	}
	for i := 0; i < len(body); {
		var r rune
		r, i = keyRune(body, i)
		if utf16.IsSurrogate(r) {
			dst = append(dst, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
			continue
		}
		dst = utf8.AppendRune(dst, r)
	}
	return dst
}

// keyRune returns the character at i of the body of a JSON string (valid,
// in valid UTF-8) and the index after it: an escape decoded (a surrogate
// pair as one character, a lone surrogate as itself), else one UTF-8
// character.
func keyRune(b []byte, i int) (rune, int) {
	if c := b[i]; c != '\\' {
		if c < utf8.RuneSelf {
			return rune(c), i + 1
		}
		r, n := utf8.DecodeRune(b[i:])
		return r, i + n
	}
	if b[i+1] == 'u' {
		return unicodeEscape(b, i)
	}
	return rune(unescape(b[i+1])), i + 2
}

// duplicateKey is the error of the quoted keys first and again, which
// have one text, in the object at path. It names the key by its text, and
// gives both spellings when they differ.
func duplicateKey(first, again []byte, path string) error {
	name, err := Unquote(again, "")
	if err != nil {
		name = string(again[1 : len(again)-1]) // no text: as written
	}
	if bytes.Equal(first, again) {
		return valueErr(JoinPath(path, name), fmt.Errorf("%w %q in object", ErrDuplicateKey, name))
	}
	return valueErr(JoinPath(path, name), fmt.Errorf("%w %q in object (written %s and %s)", ErrDuplicateKey, name, first, again))
}

// AppendElements appends the [start, end) offsets of the elements of the
// JSON array arr to dst, two ints per element.
func AppendElements(dst []int, arr []byte) []int {
	i := skipSpace(arr, 1)
	for i < len(arr) && arr[i] != ']' {
		end := skipValue(arr, i)
		dst = append(dst, i, end)
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return dst
}

// KeyIs reports whether the raw (quoted) JSON key is name. A key with a
// lone surrogate is no name.
func KeyIs(quoted []byte, name string) bool {
	k := quoted[1 : len(quoted)-1]
	switch {
	case len(k) == len(name):
		// An escape would make the text shorter than name.
		return string(k) == name && bytes.IndexByte(k, '\\') < 0
	case len(k) > len(name) && bytes.IndexByte(k, '\\') >= 0:
		s, err := Unquote(quoted, "")
		return err == nil && s == name
	}
	return false
}

// Numbers says how DecodeValue represents numbers.
type Numbers int

const (
	// AsText keeps a number's text as a json.Number: exact whatever its
	// size, for codecs that convert it themselves (Avro, Postgres).
	AsText Numbers = iota
	// Typed applies the text rule (ParseNumber): int64 or float64, and an
	// error for a number that neither holds.
	Typed
)

// DecodeValue decodes the raw JSON value b (checked) into the in-memory
// representation, with numbers as nums says. Strings are read strictly
// (Unquote). Errors are *ValueError naming the path of the field, under
// path.
func DecodeValue(b []byte, path string, nums Numbers) (any, error) {
	v, _, err := decodeAt(b, skipSpace(b, 0), path, nums)
	return v, err
}

func decodeAt(b []byte, i int, path string, nums Numbers) (any, int, error) {
	switch c := b[i]; c {
	case '{':
		return decodeObject(b, i, path, nums)
	case '[':
		return decodeArray(b, i, path, nums)
	case '"':
		end := skipString(b, i)
		s, err := Unquote(b[i:end], path)
		return s, end, err
	case 't':
		return true, i + 4, nil
	case 'f':
		return false, i + 5, nil
	case 'n':
		return nil, i + 4, nil
	}
	end := skipValue(b, i)
	text := string(b[i:end])
	if nums == AsText {
		return json.Number(text), end, nil
	}
	v, err := ParseNumber(text, path)
	return v, end, err
}

// decodeObject is decodeAt of the object at i.
func decodeObject(b []byte, i int, path string, nums Numbers) (any, int, error) {
	start, n := i, 0
	obj := map[string]any{}
	i = skipSpace(b, i+1)
	for ; b[i] != '}'; n++ {
		kEnd := skipString(b, i)
		k, err := Unquote(b[i:kEnd], path)
		if err != nil {
			return nil, 0, err
		}
		i = skipSpace(b, skipSpace(b, kEnd)+1)
		v, next, err := decodeAt(b, i, JoinPath(path, k), nums)
		if err != nil {
			return nil, 0, err
		}
		obj[k] = v
		i = skipSpace(b, next)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	if len(obj) < n {
		// Two members with one key: the map kept one. The rule and
		// its error are AppendMembers', as on every other path.
		if _, err := AppendMembers(nil, b[start:i+1], path); err != nil {
			return nil, 0, err
		}
	}
	return obj, i + 1, nil
}

// decodeArray is decodeAt of the array at i.
func decodeArray(b []byte, i int, path string, nums Numbers) (any, int, error) {
	arr := []any{}
	i = skipSpace(b, i+1)
	for b[i] != ']' {
		v, next, err := decodeAt(b, i, IndexPath(path, len(arr)), nums)
		if err != nil {
			return nil, 0, err
		}
		arr = append(arr, v)
		i = skipSpace(b, next)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return arr, i + 1, nil
}

// JSONAppender is an in-memory value that writes its own JSON text, such
// as a transform's record that keeps its input bytes.
type JSONAppender interface {
	// AppendJSON appends the value's JSON text to b. Errors are
	// *ValueError naming fields under path.
	AppendJSON(b []byte, path string) ([]byte, error)
}

// Materializer is an in-memory value that can give its plain form
// (map[string]any, []any, ...), with numbers as nums says. Errors are
// *ValueError naming fields under path.
type Materializer interface {
	Materialize(path string, nums Numbers) (any, error)
}

// AppendJSON appends the JSON text of the in-memory value v to b.
//
//   - A float64 is written with the shortest text that reads back as the
//     same double, always with a '.' or an exponent ("3.0", not "3"), so
//     that the next reader sees a double by the text rule. NaN and ±Inf
//     are an error: JSON cannot hold them.
//   - A string must be valid UTF-8: it is an error, never U+FFFD.
//   - A json.Number is written as its text, a json.RawMessage as it is;
//     []byte as base64; map keys in sorted order.
//
// Errors are *ValueError naming the field under path, or wrap
// ErrUnsupported for a type JSON has no form for.
func AppendJSON(b []byte, v any, path string) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case string:
		return appendString(b, v, path)
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case float64:
		return AppendDouble(b, v, 64, path)
	case float32:
		return AppendDouble(b, float64(v), 32, path)
	case json.Number:
		if !validNumber(string(v)) {
			return nil, fmt.Errorf("%w: %q is not a JSON number", ErrUnsupported, truncateText(string(v)))
		}
		return append(b, v...), nil
	case json.RawMessage:
		return append(b, v...), nil // JSON text as it came, checked with its record
	case []byte:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, v)
		return append(b, '"'), nil
	case []any:
		return appendArray(b, v, path)
	case map[string]any:
		return appendObject(b, v, path)
	case JSONAppender:
		return v.AppendJSON(b, path)
	}
	return appendOtherInteger(b, v, path)
}

// appendOtherInteger is AppendJSON of the integer types other than int64,
// and its error for a type that JSON has no form for.
func appendOtherInteger(b []byte, v any, path string) ([]byte, error) {
	switch v := v.(type) {
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(v), 10), nil
	case uint64:
		return strconv.AppendUint(b, v, 10), nil
	}
	return nil, fmt.Errorf("%w: %T has no JSON form (at %q)", ErrUnsupported, v, path)
}

func appendArray(b []byte, v []any, path string) ([]byte, error) {
	b = append(b, '[')
	for i, e := range v {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendJSON(b, e, IndexPath(path, i)); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// appendObject appends the JSON object of v, its keys in sorted order.
func appendObject(b []byte, v map[string]any, path string) ([]byte, error) {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendString(b, k, path); err != nil {
			return nil, err
		}
		b = append(b, ':')
		if b, err = AppendJSON(b, v[k], JoinPath(path, k)); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// AppendDouble appends f as a JSON double (see AppendJSON): the shortest
// text for a float of size bits, in encoding/json's style (exponent below
// 1e-6 and from 1e21), with ".0" added to an integral value.
func AppendDouble(b []byte, f float64, bits int, path string) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, nonFinite(f, path)
	}
	start := len(b)
	if !exponentFormat(f, bits) {
		b = strconv.AppendFloat(b, f, 'f', -1, bits)
		if bytes.IndexByte(b[start:], '.') < 0 {
			b = append(b, ".0"...)
		}
		return b, nil
	}
	b = strconv.AppendFloat(b, f, 'e', -1, bits)
	// 1e-07 -> 1e-7, as encoding/json writes it.
	if n := len(b); n-start >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b, nil
}

// nonFinite is the error of NaN or ±Inf f, which JSON cannot hold.
func nonFinite(f float64, path string) error {
	switch {
	case math.IsNaN(f):
		return valueErr(path, errors.New("NaN cannot be written as JSON"))
	case math.IsInf(f, 1):
		return valueErr(path, errors.New("+Inf cannot be written as JSON"))
	}
	return valueErr(path, errors.New("-Inf cannot be written as JSON"))
}

// exponentFormat reports whether encoding/json writes f, a float of size
// bits, with an exponent: below 1e-6 and from 1e21, zero aside.
func exponentFormat(f float64, bits int) bool {
	abs := math.Abs(f)
	if abs == 0 {
		return false
	}
	if bits == 32 {
		return float32(abs) < 1e-6 || float32(abs) >= 1e21
	}
	return abs < 1e-6 || abs >= 1e21
}

// AppendString appends s as a JSON string. s must be valid UTF-8.
func AppendString(b []byte, s string, path string) ([]byte, error) { return appendString(b, s, path) }

const hexDigits = "0123456789abcdef"

func appendString(b []byte, s, path string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, valueErr(path, errors.New("string is not valid UTF-8 and cannot be written as JSON"))
	}
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != '\u2028' && r != '\u2029' {
				i += size
				continue
			}
			// As encoding/json: these end lines in JavaScript.
			b = append(b, s[start:i]...)
			b = append(b, `\u202`...)
			b = append(b, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), nil
}

// validNumber reports whether s is one JSON number (RFC 8259, section 6).
func validNumber(s string) bool {
	i, ok := numberInteger(s)
	if !ok {
		return false
	}
	if i < len(s) && s[i] == '.' {
		if i, ok = someDigits(s, i+1); !ok {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i, ok = someDigits(s, i); !ok {
			return false
		}
	}
	return i == len(s)
}

// numberInteger returns the index in s after the integer part of a JSON
// number at its start (a '-', then 0 or digits without a leading 0);
// false if there is none.
func numberInteger(s string) (int, bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		return i + 1, true
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		return digits(s, i), true
	}
	return i, false
}

// someDigits is digits, false when there is no digit at i.
func someDigits(s string, i int) (int, bool) {
	end := digits(s, i)
	return end, end > i
}

// digits returns the index in s after the run of ASCII digits at i.
func digits(s string, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
