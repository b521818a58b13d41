package pgsink

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/exactly-io/exactly/topology"
)

// decodeBinary is str, bytes as a change event writes them in mode
// (Debezium's binary.handling.mode): bytes (Connect bytes, which the JSON
// converter writes as base64) and base64 by java.util.Base64's encoder,
// base64-url-safe by its URL-safe one (both padded), hex as base16. The
// decoders are strict: text that two encodings would share (unused
// padding bits) is refused rather than read one way.
func decodeBinary(str, mode string) ([]byte, error) {
	switch mode {
	case topology.BinaryBytes, topology.BinaryBase64:
		b, err := base64.StdEncoding.Strict().DecodeString(str)
		if err != nil {
			return nil, fmt.Errorf("not base64: %w", err)
		}
		return b, nil
	case topology.BinaryBase64URLSafe:
		b, err := base64.URLEncoding.Strict().DecodeString(str)
		if err != nil {
			return nil, fmt.Errorf("not url-safe base64: %w", err)
		}
		return b, nil
	case topology.BinaryHex:
		b, err := hex.DecodeString(str)
		if err != nil {
			return nil, fmt.Errorf("not hex: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown binary handling mode %q", mode)
}

// binaryText is field src for a bytea or bytea[] column, decoded by the
// binary handling mode (Config.BinaryHandling); ok is false where the mode
// does not apply. Without a schema nothing else says a value is bytes, so
// any value is read by the mode and one that is not text is refused. A
// value the schema (or Avro) types as bytes never comes here; one it types
// as a plain string is read by the mode unless that is bytes: the
// connector then writes bytes as bytes, and the string is a text column's.
func (s *Sink) binaryText(obj map[string]any, src string, t colType, sch map[string]connectSchema) (v any, ok bool, err error) {
	mode := s.cfg.BinaryHandling
	if mode == "" || strings.HasPrefix(src, "$") || obj == nil || obj[src] == nil {
		return nil, false, nil
	}
	fs, typed := sch[src]
	typed = typed || s.typed.avro
	if typed && mode == topology.BinaryBytes {
		return nil, false, nil
	}
	if t.base == "bytea" {
		return byteaText(obj[src], src, mode, fs, typed, t)
	}
	if elem, isArray := arrayElement(t); isArray && elem.base == "bytea" {
		return s.byteaArrayText(obj[src], src, mode, fs, typed, t)
	}
	return nil, false, nil
}

// byteaText is binaryText for a bytea column: fv, field src (of schema
// fs, typed when a schema or Avro gives its type), decoded by mode.
func byteaText(fv any, src, mode string, fs connectSchema, typed bool, t colType) (any, bool, error) {
	str, isText := fv.(string)
	switch {
	case isText && (fs.Type == "" || fs.Type == "string") && fs.Name == "":
		b, err := decodeBinary(str, mode)
		if err != nil {
			return nil, true, &binaryError{field: src, mode: mode, err: err}
		}
		return bytesText(b, t), true, nil
	case typed:
		return nil, false, nil
	}
	return nil, true, &binaryError{field: src, mode: mode, err: fmt.Errorf("want text, got %s", shownValue(fv))}
}

// byteaArrayText is binaryText for a bytea[] column: fv, field src, a
// JSON (or Avro) array of strings each decoded by mode.
func (s *Sink) byteaArrayText(fv any, src, mode string, fs connectSchema, typed bool, t colType) (any, bool, error) {
	if fs.Type == "array" && (fs.Items == nil || fs.Items.Type != "string" || fs.Items.Name != "") {
		return nil, false, nil
	}
	raw, isJSON := fv.(json.RawMessage)
	if a, isAvro := fv.([]any); isAvro {
		var err error
		if raw, err = s.jsonCodec.Encode(a); err != nil {
			return nil, true, err
		}
		isJSON = true
	}
	if !isJSON || len(raw) == 0 || raw[0] != '[' {
		if typed {
			return nil, false, nil
		}
		return nil, true, &binaryError{field: src, mode: mode, err: fmt.Errorf("a %s column wants an array, got %s", t.name, shownValue(fv))}
	}
	b, err := appendBinaryArray(nil, raw, src, mode)
	if err != nil {
		return nil, true, err
	}
	return string(b), true, nil
}

// appendBinaryArray appends raw, a JSON array of encoded bytes (field
// path), as a bytea[] literal: each element bytea hex input, quoted.
func appendBinaryArray(b []byte, raw json.RawMessage, path, mode string) ([]byte, error) {
	return appendArrayOf(b, raw, path, func(b []byte, e json.RawMessage, v any, at string) ([]byte, error) {
		str, isText := v.(string)
		if !isText {
			return nil, &binaryError{field: at, mode: mode, err: fmt.Errorf("want text, got %s", shownJSON(e))}
		}
		dec, err := decodeBinary(str, mode)
		if err != nil {
			return nil, &binaryError{field: at, mode: mode, err: err}
		}
		b = append(b, `"\\x`...)
		b = hex.AppendEncode(b, dec)
		return append(b, '"'), nil
	})
}
