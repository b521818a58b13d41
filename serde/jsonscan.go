package serde

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"
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
	case !json.Valid(b):
		_, err := jsonCodec{}.Decode(b) // the slow path, for its message
		if err == nil {
			err = ErrSyntax
		}
		return err
	case bytes.Equal(bytes.TrimSpace(b), []byte("null")):
		return ErrNullValue
	}
	return nil
}

// TopLevelField returns the raw bytes of the value of field in the JSON
// object b, which must have passed CheckJSON. isObject is false when b is
// not an object. Like encoding/json, the last of duplicate fields wins.
func TopLevelField(b []byte, field string) (raw []byte, isObject, found bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false, false
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] != '}' {
		kEnd := skipString(b, i)
		key := b[i:kEnd]
		i = skipSpace(b, kEnd)
		i = skipSpace(b, i+1) // the ':'
		vEnd := skipValue(b, i)
		if keyIs(key, field) {
			raw, found = b[i:vEnd], true
		}
		i = skipSpace(b, vEnd)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return raw, true, found
}

// keyIs compares a quoted JSON key with field, unescaping only if needed.
func keyIs(quoted []byte, field string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1:len(quoted)-1]) == field
	}
	var s string
	return json.Unmarshal(quoted, &s) == nil && s == field
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at b[i] == '"'.
func skipString(b []byte, i int) int {
	for i++; i < len(b) && b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
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
	for i < len(b) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(b[i])) {
		i++
	}
	return i
}

// FieldValue decodes raw, a value that TopLevelField returned, as Decode
// would, except that JSON null is nil and not an error. A plain string,
// the common case for keys and event IDs, takes no decoder.
func FieldValue(raw []byte) (any, error) {
	if len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	v, err := jsonCodec{}.Decode(raw)
	if errors.Is(err, ErrNullValue) {
		return nil, nil
	}
	return v, err
}

// JSONFields returns the top-level fields of the JSON object b that are
// named in fields, decoded with FieldValue, after checking b with
// CheckJSON: the same as decoding b and picking the fields, without
// decoding the rest. obj is nil when b is not an object.
func JSONFields(b []byte, fields []string) (obj map[string]any, err error) {
	if err := CheckJSON(b); err != nil {
		return nil, err
	}
	obj = make(map[string]any, len(fields))
	for _, f := range fields {
		raw, isObject, found := TopLevelField(b, f)
		if !isObject {
			return nil, nil
		}
		if !found {
			continue
		}
		if obj[f], err = FieldValue(raw); err != nil {
			return nil, err
		}
	}
	return obj, nil
}
