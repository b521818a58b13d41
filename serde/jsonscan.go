package serde

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/valyala/fastjson"
)

// CheckJSON reports whether b is what the json codec's Decode accepts (one
// JSON value in valid UTF-8, not null), with the same sentinel errors, but
// without building the value: a stage that copies JSON through unchanged
// needs no more, at a fraction of the cost and with no allocation.
func CheckJSON(b []byte) error {
	switch {
	case b == nil:
		return ErrNullValue
	case !utf8.Valid(b):
		return ErrInvalidUTF8
	case !validJSON(b):
		return syntaxError(b) // the slow path, for its message
	case bytes.Equal(bytes.TrimSpace(b), []byte("null")):
		return ErrNullValue
	}
	return nil
}

// maxNesting is encoding/json's nesting limit: json.Valid refuses a value
// nested deeper than this (its scanner's maxNestingDepth).
const maxNesting = 10000

// validJSON is json.Valid(b) for b in valid UTF-8, about four times as
// fast on records of a few KiB: fastjson's validator, which follows RFC
// 8259 as json.Valid does (FuzzValidJSON compares the two). fastjson has
// no nesting limit and recurses once a level, so a value with more opening
// brackets than json.Valid's limit goes to json.Valid: the verdict stays
// the same, and the recursion stays bounded.
//
// A value no longer than the limit cannot hold more brackets than it, and
// is not counted.
//
// fastjson also misses a control character in a string before an escape
// ("\x02\\b" passes), so a value with any byte below 0x20 (even the
// whitespace \t, \n, \r, which may be inside a string) goes to json.Valid
// too: RFC 8259 allows them only as whitespace between tokens.
func validJSON(b []byte) bool {
	if hasControl(b) || len(b) > maxNesting && bytes.Count(b, []byte{'['})+bytes.Count(b, []byte{'{'}) > maxNesting {
		return json.Valid(b)
	}
	return fastjson.ValidateBytes(b) == nil
}

// hasControl reports whether b holds a byte below 0x20, eight bytes at a
// time: for a word x, (x - 0x20 in every byte) &^ x has a byte's top bit
// set for the lowest byte below 0x20, and only if there is one (the
// classic "has less than" test, as in Anderson's Bit Twiddling Hacks).
func hasControl(b []byte) bool {
	const highs, n = 0x8080808080808080, 0x20 * 0x0101010101010101
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if (x-n)&^x&highs != 0 {
			return true
		}
		b = b[8:]
	}
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// TopLevelField returns the raw bytes of the value of field in the JSON
// object b, which must have passed CheckJSON. isObject is false when b is
// not an object. An object with duplicate keys is an error (see
// AppendMembers), whichever field is looked up.
func TopLevelField(b []byte, field string) (raw []byte, isObject, found bool, err error) {
	var buf [16]Member
	obj, ms, isObject, err := topLevelMembers(b, buf[:0])
	if !isObject || err != nil {
		return nil, isObject, false, err
	}
	raw, found = memberValue(obj, ms, field)
	return raw, true, found, nil
}

// topLevelMembers returns the object b (checked) from its '{', and its
// members appended to buf. isObject is false when b is not an object.
func topLevelMembers(b []byte, buf []Member) (obj []byte, ms []Member, isObject bool, err error) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, nil, false, nil
	}
	obj = b[i:]
	ms, err = AppendMembers(buf, obj, "")
	return obj, ms, true, err
}

// memberValue returns the raw value of the member of obj named name.
func memberValue(obj []byte, ms []Member, name string) ([]byte, bool) {
	for _, m := range ms {
		if m.KeyEnd-m.KeyStart >= len(name)+2 && KeyIs(m.Key(obj), name) {
			return m.Value(obj), true
		}
	}
	return nil, false
}

// syntaxError returns the error, wrapping ErrSyntax, that says why b
// (which json.Valid refused) is not one JSON value.
func syntaxError(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: data after the first JSON value", ErrSyntax)
	}
	return ErrSyntax
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i] == '"'.
// Each byte is looked at a bounded number of times, however many escapes.
func skipString(b []byte, i int) int {
	i++
	for {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return len(b) + 1
		}
		q += i
		for {
			bs := bytes.IndexByte(b[i:q], '\\')
			if bs < 0 {
				return q + 1
			}
			i += bs + 2 // the escaped byte is never the end
			if i > q {
				break // the quote at q was escaped: look for the next
			}
		}
	}
}

// skipValue returns the index after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return i
		}
	}
	return i
}

// FieldValue decodes raw, a value that TopLevelField returned, as Decode
// would, except that JSON null is nil and not an error, and an object or
// array stays its bytes as they came (a json.RawMessage, which AppendJSON
// writes unchanged). A plain string, the common case for keys and event
// IDs, takes no decoder.
func FieldValue(raw []byte) (any, error) { return fieldValue(raw, "") }

func fieldValue(raw []byte, path string) (any, error) {
	switch {
	case raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0:
		return string(raw[1 : len(raw)-1]), nil
	case raw[0] == '{' || raw[0] == '[':
		return json.RawMessage(raw), nil
	}
	return DecodeValue(raw, path, AsText)
}

// JSONField is TopLevelField and FieldValue in one, on b that passed
// CheckJSON: the decoded value of field (nil for JSON null), isObject
// false when b is not an object, found false when the field is absent.
// An error (a *ValueError naming field) means the value cannot be read
// exactly, such as a string with a lone surrogate, or that the object has
// duplicate keys.
func JSONField(b []byte, field string) (v any, isObject, found bool, err error) {
	raw, isObject, found, err := TopLevelField(b, field)
	if !found || err != nil {
		return nil, isObject, false, err
	}
	v, err = fieldValue(raw, field)
	return v, isObject, true, err
}

// JSONFields returns the top-level fields of the JSON object b that are
// named in fields, decoded with FieldValue, after checking b with
// CheckJSON: the same as decoding b and picking the fields, without
// decoding the rest. obj is nil when b is not an object. Fields that are
// not read are not checked: a lone surrogate in one of them is no error.
// The object's keys are read: duplicate keys are an error.
func JSONFields(b []byte, fields []string) (obj map[string]any, err error) {
	obj, _, err = jsonFields(b, fields, false)
	return obj, err
}

// JSONFieldsKeys is JSONFields of a value b that also goes on whole to a
// reader that keeps one of duplicate keys (a jsonb column): keys is what
// CheckKeys(b, "") returns, found from the members JSONFields reads
// (whose own keys it has checked), so that b is checked and scanned once
// rather than once for its fields and again for its keys. keys is nil
// when err is not.
func JSONFieldsKeys(b []byte, fields []string) (obj map[string]any, keys, err error) {
	return jsonFields(b, fields, true)
}

func jsonFields(b []byte, fields []string, withKeys bool) (obj map[string]any, keys, err error) {
	if err := CheckJSON(b); err != nil {
		return nil, nil, err
	}
	var buf [16]Member
	o, ms, isObject, err := topLevelMembers(b, buf[:0])
	if err != nil {
		return nil, nil, err
	}
	if !isObject {
		if withKeys {
			keys = CheckKeys(b, "")
		}
		return nil, keys, nil
	}
	obj = make(map[string]any, len(fields))
	for _, f := range fields {
		raw, found := memberValue(o, ms, f)
		if !found {
			continue
		}
		if obj[f], err = fieldValue(raw, f); err != nil {
			return nil, nil, err
		}
	}
	if withKeys {
		keys = checkMemberKeys(o, ms, "")
	}
	return obj, keys, nil
}
