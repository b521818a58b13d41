package pgsink

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// copyFormat is how the sink's own COPY readers (copyText, copyStream)
// write rows: COPY's text format, or its binary format.
//
// The binary format is used where every column's type reads a value's
// text as its text input function does (binaryTextType): text, varchar
// with no length, json and jsonb. Each value then goes as its bytes, with
// a version byte 1 before a jsonb's (PostgreSQL's jsonb_recv; json_recv
// and textrecv take the text as it is). The receive functions check the
// text as the input functions do (the encoding, and JSON's grammar), so a
// row fails or stores the same either way, and the binary COPY is the one
// pgx's CopyFrom sends for the staged load (insertRun). It costs the
// server about a fifth less than the text format, which scans every byte
// for delimiters and escapes, and the sink no escaping.
//
// Rows of other types keep the text format: their binary forms are not
// their text, and the server's input function is what the load's cast
// calls (see directType).
type copyFormat struct {
	binary bool
	// jsonb marks the columns of type jsonb, in binary format.
	jsonb []bool
	// ord says each row ends with its ordinal, an integer column (the
	// staging table's ordColumn).
	ord bool
}

// binaryTextType reports whether COPY's binary format reads a column of
// type t from a value's text: its receive function takes the text as the
// input function does.
func binaryTextType(t colType) bool {
	if t.domain || t.mod >= 0 {
		return false
	}
	switch t.base {
	case "text", "character varying", "json", "jsonb":
		return true
	}
	return false
}

// binaryFormat is the binary copyFormat of columns of types, or the text
// format when one of them is no binaryTextType.
func binaryFormat(types []colType, ord bool) copyFormat {
	f := copyFormat{binary: true, jsonb: make([]bool, len(types)), ord: ord}
	for i, t := range types {
		if !binaryTextType(t) {
			return copyFormat{ord: ord}
		}
		f.jsonb[i] = t.base == "jsonb"
	}
	return f
}

// option is the COPY statement's option for the format: "" or
// " (FORMAT binary)".
func (f copyFormat) option() string {
	if f.binary {
		return " (FORMAT binary)"
	}
	return ""
}

// binaryCopyHeader starts COPY's binary data (PostgreSQL docs, COPY,
// "Binary Format"): the signature, flags 0 and no header extension.
const binaryCopyHeader = "PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"

// binaryCopyTrailer ends it: a field count of -1.
const binaryCopyTrailer = "\xff\xff"

// header appends what the data starts with.
func (f copyFormat) header(dst []byte) []byte {
	if f.binary {
		return append(dst, binaryCopyHeader...)
	}
	return dst
}

// trailer appends what the data ends with.
func (f copyFormat) trailer(dst []byte) []byte {
	if f.binary {
		return append(dst, binaryCopyTrailer...)
	}
	return dst
}

// appendRow appends row, one string or nil per column, and ord when the
// format has ordinals.
func (f copyFormat) appendRow(dst []byte, row []any, ord int) ([]byte, error) {
	if !f.binary {
		dst, err := appendCopyRow(dst, row)
		if err != nil || !f.ord {
			return dst, err
		}
		dst[len(dst)-1] = '\t'
		return append(strconv.AppendInt(dst, int64(ord), 10), '\n'), nil
	}
	n := len(row)
	if f.ord {
		n++
	}
	if len(row) != len(f.jsonb) {
		return dst, fmt.Errorf("copy: a row of %d values for %d columns", len(row), len(f.jsonb))
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	for i, v := range row {
		switch v := v.(type) {
		case nil:
			dst = binary.BigEndian.AppendUint32(dst, math.MaxUint32) // -1: NULL
		case string:
			size := len(v)
			if f.jsonb[i] {
				size++
			}
			if size > math.MaxInt32 {
				return dst, fmt.Errorf("copy: column %d holds %d bytes, more than a field holds", i, len(v))
			}
			dst = binary.BigEndian.AppendUint32(dst, uint32(size))
			if f.jsonb[i] {
				dst = append(dst, 1) // jsonb's binary version
			}
			dst = append(dst, v...)
		default:
			return dst, fmt.Errorf("copy: column %d holds a %T, not text", i, v)
		}
	}
	if f.ord {
		dst = binary.BigEndian.AppendUint32(dst, 4)
		dst = binary.BigEndian.AppendUint32(dst, uint32(int32(ord)))
	}
	return dst, nil
}

// appendCopyRow appends row, one string or nil per column, as a line of
// COPY text (PostgreSQL docs, COPY, "Text Format"): columns separated by
// tabs, rows ended by a newline, NULL as \N, and backslash, newline,
// carriage return and tab escaped with a backslash, so that the server
// reads each value's text unchanged.
func appendCopyRow(dst []byte, row []any) ([]byte, error) {
	for i, v := range row {
		if i > 0 {
			dst = append(dst, '\t')
		}
		switch v := v.(type) {
		case nil:
			dst = append(dst, `\N`...)
		case string:
			if !copyEscapes(v) {
				dst = append(dst, v...)
				continue
			}
			for j := 0; j < len(v); j++ {
				switch c := v[j]; c {
				case '\\':
					dst = append(dst, `\\`...)
				case '\n':
					dst = append(dst, `\n`...)
				case '\r':
					dst = append(dst, `\r`...)
				case '\t':
					dst = append(dst, `\t`...)
				default:
					dst = append(dst, c)
				}
			}
		default:
			return dst, fmt.Errorf("direct copy: column %d holds a %T, not text", i, v)
		}
	}
	return append(dst, '\n'), nil
}

// copyEscapes reports whether v holds a byte that COPY's text format
// escapes. Four IndexByte scans, each vectorized, take a quarter of the
// time of one strings.ContainsAny, which tests a byte at a time.
func copyEscapes(v string) bool {
	return strings.IndexByte(v, '\\') >= 0 || strings.IndexByte(v, '\n') >= 0 ||
		strings.IndexByte(v, '\r') >= 0 || strings.IndexByte(v, '\t') >= 0
}
