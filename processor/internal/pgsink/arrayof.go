package pgsink

import (
	"encoding/json"
	"fmt"
)

// appendArrayOf appends raw, the JSON array of field path, as an array
// literal: a null element as NULL, an array element as a nested literal,
// and any other element as elem appends it, given its JSON e and its
// value v as elementValue decodes it.
func appendArrayOf(b []byte, raw json.RawMessage, path string, elem func(b []byte, e json.RawMessage, v any, at string) ([]byte, error)) ([]byte, error) {
	var els []json.RawMessage
	if err := json.Unmarshal(raw, &els); err != nil {
		return nil, fmt.Errorf("field %q: %w", path, err)
	}
	b = append(b, '{')
	for i, e := range els {
		if i > 0 {
			b = append(b, ',')
		}
		at := fmt.Sprintf("%s[%d]", path, i)
		var err error
		switch {
		case string(e) == "null":
			b = append(b, "NULL"...)
		case e[0] == '[':
			b, err = appendArrayOf(b, e, at, elem)
		default:
			var v any
			if v, err = elementValue(e); err != nil {
				return nil, fmt.Errorf("field %q: %w", at, err)
			}
			b, err = elem(b, e, v, at)
		}
		if err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendQuotedElement appends text as a quoted element of an array
// literal, its quotes and backslashes escaped.
func appendQuotedElement(b []byte, text string) []byte {
	b = append(b, '"')
	for _, c := range []byte(text) {
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return append(b, '"')
}
