// Package serde converts record values between their bytes on a topic and the
// one in-memory representation that the stage engine and transforms see.
//
// The in-memory representation is the one encoding/json produces with
// UseNumber: map[string]any for objects, []any for arrays, string,
// json.Number for numbers, bool, and nil; except that strings are read
// strictly (a lone surrogate escape is an error, not U+FFFD) and written
// back by AppendJSON, which keeps doubles doubles and refuses NaN (see
// jsonvalue.go for the exact value rules). The string format decodes to a Go
// string and the bytes format to a []byte, so that every format meets in one
// shape whatever the topic holds. Avro decodes to the same shapes, with
// int64 and float64 for its numbers and logical types rendered as plain JSON
// values (see NewCodec and the conversion rules of values.md).
package serde

import (
	"fmt"
	"unicode/utf8"
)

// Format names accepted by New and by the topology file's format fields.
const (
	JSON   = "json"
	String = "string"
	Bytes  = "bytes"
)

// Codec decodes record values from bytes and encodes them back. A Codec is
// safe for concurrent use.
type Codec interface {
	// Format is the name the codec was built from, e.g. "json".
	Format() string
	// Decode turns a record value into the in-memory representation. A nil
	// b is a tombstone. Errors wrap ErrNullValue, ErrInvalidUTF8 or
	// ErrSyntax.
	Decode(b []byte) (any, error)
	// Encode turns an in-memory value into bytes. Errors wrap
	// ErrUnsupported, or are a *ValueError (ErrInexact) naming the field
	// of a value that has no exact form (an integer beyond int64, NaN in
	// JSON).
	Encode(v any) ([]byte, error)
}

// New returns the codec for a format name: "json", "string" or "bytes".
// It returns an error wrapping ErrUnknownFormat for any other name, and
// ErrConfig for "avro", which needs the settings of NewCodec.
func New(format string) (Codec, error) {
	switch format {
	case JSON:
		return jsonCodec{}, nil
	case String:
		return stringCodec{}, nil
	case Bytes:
		return bytesCodec{}, nil
	case Avro:
		return nil, fmt.Errorf("format %q: %w: avro needs a schema or a registry (use NewCodec)", format, ErrConfig)
	}
	return nil, fmt.Errorf("format %q: %w (valid: json, string, bytes, avro)", format, ErrUnknownFormat)
}

type jsonCodec struct{}

func (jsonCodec) Format() string { return JSON }

// Decode accepts exactly one JSON value (RFC 8259) surrounded by optional
// whitespace, in valid UTF-8 (see CheckJSON), and decodes it with numbers
// as json.Number, so that they keep their text. Strings are read strictly:
// invalid UTF-8 and lone surrogate escapes are errors (ErrInvalidUTF8, a
// *ValueError), never "repaired" into U+FFFD.
func (jsonCodec) Decode(b []byte) (any, error) {
	if err := CheckJSON(b); err != nil {
		return nil, err
	}
	return DecodeValue(b, "", AsText)
}

// Encode writes v as JSON text by AppendJSON's rules.
func (jsonCodec) Encode(v any) ([]byte, error) {
	if v == nil {
		// The literal null is read as a null value (ErrNullValue) by
		// every JSON reader here, the next stage's and the sink's: it is
		// refused as it is written, not passed on to be refused there.
		return nil, fmt.Errorf("%w: the value is JSON null, which carries no event", ErrNullValue)
	}
	return AppendJSON(nil, v, "")
}

type stringCodec struct{}

func (stringCodec) Format() string { return String }

func (stringCodec) Decode(b []byte) (any, error) {
	if b == nil {
		return nil, ErrNullValue
	}
	if !utf8.Valid(b) {
		return nil, ErrInvalidUTF8
	}
	return string(b), nil
}

// Encode writes strings and byte slices as they are, and any other value as
// its JSON text.
func (stringCodec) Encode(v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return []byte(v), nil
	case []byte:
		if !utf8.Valid(v) {
			return nil, fmt.Errorf("%w: %w", ErrUnsupported, ErrInvalidUTF8)
		}
		return v, nil
	}
	return jsonCodec{}.Encode(v)
}

type bytesCodec struct{}

func (bytesCodec) Format() string { return Bytes }

func (bytesCodec) Decode(b []byte) (any, error) {
	if b == nil {
		return nil, ErrNullValue
	}
	return b, nil
}

// Encode writes byte slices and strings as they are, and any other value as
// its JSON text.
func (bytesCodec) Encode(v any) ([]byte, error) {
	switch v := v.(type) {
	case []byte:
		return v, nil
	case string:
		return []byte(v), nil
	}
	return jsonCodec{}.Encode(v)
}
