package pgsink

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// parseCopy reads COPY data of format f back into rows of strings and
// nils (an ordinal as its decimal text), as the server would split it.
func parseCopy(t *testing.T, f copyFormat, data []byte) [][]any {
	t.Helper()
	var rows [][]any
	if !f.binary {
		unescape := strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\r`, "\r", `\t`, "\t")
		for line := range strings.SplitSeq(strings.TrimSuffix(string(data), "\n"), "\n") {
			if line == "" && len(data) == 0 {
				break
			}
			var row []any
			for _, v := range strings.Split(line, "\t") {
				if v == `\N` {
					row = append(row, nil)
				} else {
					row = append(row, unescape.Replace(v))
				}
			}
			rows = append(rows, row)
		}
		return rows
	}
	if !bytes.HasPrefix(data, []byte(binaryCopyHeader)) {
		t.Fatalf("no binary header: %q", data[:min(len(data), 19)])
	}
	data = data[len(binaryCopyHeader):]
	for {
		n := int16(binary.BigEndian.Uint16(data))
		data = data[2:]
		if n == -1 {
			if len(data) != 0 {
				t.Fatalf("%d bytes after the trailer", len(data))
			}
			return rows
		}
		row := make([]any, 0, n)
		for i := range int(n) {
			size := int32(binary.BigEndian.Uint32(data))
			data = data[4:]
			switch {
			case size == -1:
				row = append(row, nil)
			case f.ord && i == int(n)-1:
				if size != 4 {
					t.Fatalf("ordinal of %d bytes", size)
				}
				row = append(row, fmt.Sprint(int32(binary.BigEndian.Uint32(data))))
			case f.jsonb[i]:
				if data[0] != 1 {
					t.Fatalf("jsonb version %d", data[0])
				}
				row = append(row, string(data[1:size]))
			default:
				row = append(row, string(data[:size]))
			}
			if size > 0 {
				data = data[size:]
			}
		}
		rows = append(rows, row)
	}
}

// The binary format writes each value's bytes as they are, a jsonb's
// after the version byte, NULL as length -1; the text format escapes.
// Both read back to the rows, whatever the reader's chunks.
func TestCopyFormats(t *testing.T) {
	ops := []op{
		{row: []any{"e-1", `{"a":"x\ty"}`, "plain"}},
		{row: []any{"e-2", nil, ""}},
		{row: []any{"back\\slash\nnew\rline\ttab", `\.`, `\N`}},
		{row: []any{"é-5", `"ü"`, "nul\x00byte"}},
	}
	for _, f := range []copyFormat{
		{},
		{ord: true},
		{binary: true, jsonb: []bool{false, true, false}},
		{binary: true, jsonb: []bool{false, true, false}, ord: true},
	} {
		t.Run(fmt.Sprintf("binary %v ord %v", f.binary, f.ord), func(t *testing.T) {
			ops := ops
			if !f.binary {
				ops = ops[:3] // COPY's text format has no NUL
			}
			data, err := io.ReadAll(iotest.OneByteReader(&copyText{ops: ops, f: f}))
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, f, parseCopy(t, f, data), ops)
		})
	}
	t.Run("empty binary data is the header and trailer", func(t *testing.T) {
		data, err := io.ReadAll(&copyText{f: copyFormat{binary: true}})
		if err != nil || string(data) != binaryCopyHeader+binaryCopyTrailer {
			t.Fatalf("%q, %v", data, err)
		}
	})
	t.Run("a value that is not text fails the read", func(t *testing.T) {
		_, err := io.ReadAll(&copyText{ops: []op{{row: []any{"e", 1}}}, f: copyFormat{binary: true, jsonb: []bool{false, false}}})
		if err == nil {
			t.Fatal("no error")
		}
	})
}

func checkRows(t *testing.T, f copyFormat, got [][]any, ops []op) {
	t.Helper()
	if len(got) != len(ops) {
		t.Fatalf("%d rows, want %d", len(got), len(ops))
	}
	for i, o := range ops {
		want := o.row
		if f.ord {
			want = append(want[:len(want):len(want)], fmt.Sprint(i))
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("row %d: %q, want %q", i, got[i], want)
		}
	}
}

// Only columns whose receive function reads text as the input function
// does take the binary format, and only all together.
func TestBinaryFormat(t *testing.T) {
	text, jsonb := plainType("text"), plainType("jsonb")
	if f := binaryFormat([]colType{text, jsonb, plainType("json"), plainType("character varying")}, false); !f.binary || !reflect.DeepEqual(f.jsonb, []bool{false, true, false, false}) {
		t.Fatalf("text-like columns: %+v", f)
	}
	for _, other := range []colType{plainType("integer"), plainType("numeric"), plainType("uuid"), plainType("bytea"), plainType("boolean"),
		{name: "character varying(5)", base: "character varying", full: "character varying(5)", mod: 9}, {name: "d", base: "text", full: "text", domain: true, mod: -1}} {
		if f := binaryFormat([]colType{text, other}, true); f.binary || !f.ord {
			t.Fatalf("with a %s column: %+v", other.name, f)
		}
	}
}
