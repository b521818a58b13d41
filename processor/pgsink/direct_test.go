package pgsink

import (
	"io"
	"testing"
	"testing/iotest"

	"github.com/exactly-io/exactly/topology"
)

// A direct type is one whose castExpr is the plain cast text::type: COPY's
// input function reads it the same. Every other type keeps the staged load.
func TestDirectType(t *testing.T) {
	tests := []struct {
		t    colType
		want bool
	}{
		{plainType("text"), true},
		{plainType("character varying"), true},
		{plainType("jsonb"), true},
		{plainType("json"), true},
		{plainType("bytea"), true},
		{plainType("boolean"), true},
		{plainType("smallint"), true},
		{plainType("integer"), true},
		{plainType("bigint"), true},
		{plainType("numeric"), true},
		{plainType("uuid"), true},
		{colType{name: "numeric(10,2)", base: "numeric", full: "numeric(10,2)", mod: 655366}, false},
		{colType{name: "character varying(3)", base: "character varying", full: "character varying(3)", mod: 7}, false},
		{colType{name: "character(1)", base: "character", full: "character(1)", mod: 5}, false},
		{colType{name: "posint", base: "integer", full: "integer", mod: -1, domain: true}, false},
		{plainType("double precision"), false},
		{plainType("real"), false},
		{plainType("timestamp with time zone"), false},
		{plainType("timestamp without time zone"), false},
		{plainType("date"), false},
		{plainType("time without time zone"), false},
		{plainType("bit varying"), false},
		{plainType("inet"), false},
		{plainType("regclass"), false}, // text::regclass is a function, not the input
		{plainType("xml"), false},
	}
	for _, tt := range tests {
		t.Run(tt.t.name, func(t *testing.T) {
			if got := directType(tt.t); got != tt.want {
				t.Fatalf("directType = %v, want %v", got, tt.want)
			}
			if tt.want {
				// The staged load's cast must be the plain one.
				if cast, want := castExpr("c0", "col", tt.t), "c0::"+keyType(tt.t); cast != want {
					t.Fatalf("castExpr = %q, want %q: not a plain cast", cast, want)
				}
			}
		})
	}
}

func TestDirectEligible(t *testing.T) {
	cols := []Column{{"event_id", "event_id"}, {"body", "$value"}}
	tests := []struct {
		name  string
		mode  string
		types []colType
		want  bool
	}{
		{"insert, plain types", topology.ModeInsert, []colType{plainType("text"), plainType("jsonb")}, true},
		{"default mode", "", []colType{plainType("text"), plainType("jsonb")}, true},
		{"upsert", topology.ModeUpsert, []colType{plainType("text"), plainType("jsonb")}, false},
		{"a checked type", topology.ModeInsert, []colType{plainType("text"), plainType("timestamp with time zone")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := directEligible(Config{Mode: tt.mode, Columns: cols}, tt.types)
			if got != tt.want || (got == (why != "")) {
				t.Fatalf("directEligible = %v, %q; want %v with a reason when false", got, why, tt.want)
			}
		})
	}
}

// The direct path is tried for a batch of inserts only, and rests 1, 2,
// 4, ... up to maxDirectRest batches after each fallback in a row.
func TestDirectPathChoice(t *testing.T) {
	ins, del := []op{{id: "a"}, {id: "b"}}, []op{{id: "a"}, {id: "b", del: true}}
	t.Run("off", func(t *testing.T) {
		d := directPath{}
		if d.try(ins) {
			t.Fatal("tried while off")
		}
	})
	t.Run("deletes and empty batches take the staged load", func(t *testing.T) {
		d := directPath{on: true}
		if d.try(del) || d.try(nil) {
			t.Fatal("tried a batch with a delete, or an empty one")
		}
		if !d.try(ins) {
			t.Fatal("not tried for inserts")
		}
	})
	t.Run("rest after fallbacks", func(t *testing.T) {
		d := directPath{on: true}
		// Each fallback doubles the rest; count the batches skipped.
		for _, want := range []int{1, 2, 4, 8, 16, 32, 64, 64} {
			if !d.try(ins) {
				t.Fatal("not tried after its rest")
			}
			d.done(false)
			skipped := 0
			for !d.try(ins) {
				if skipped++; skipped > maxDirectRest {
					t.Fatal("never tried again")
				}
			}
			if skipped != want {
				t.Fatalf("skipped %d batches, want %d", skipped, want)
			}
		}
		d.done(true) // the last try succeeded: no rest
		if !d.try(ins) {
			t.Fatal("rested after a success")
		}
		d.done(false)
		if d.try(ins) || !d.try(ins) {
			t.Fatal("the rest after a success and a fallback is not 1")
		}
	})
}

// COPY text escapes what the format reads specially, so that the server
// reads each value's text unchanged; NULL is \N, and the text \N is not.
func TestCopyText(t *testing.T) {
	ops := []op{
		{row: []any{"e-1", `{"a":"x\ty"}`}},
		{row: []any{"e-2", nil}},
		{row: []any{"e-3", "back\\slash\nnew\rline\ttab"}},
		{row: []any{`\N`, `\.`}},
		{row: []any{"é-5", ""}},
	}
	want := "e-1\t{\"a\":\"x\\\\ty\"}\n" + // JSON's \t: a backslash, then t
		"e-2\t\\N\n" +
		"e-3\tback\\\\slash\\nnew\\rline\\ttab\n" +
		"\\\\N\t\\\\.\n" +
		"é-5\t\n"
	for _, r := range []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte at a time", iotest.OneByteReader},
	} {
		t.Run(r.name, func(t *testing.T) {
			got, err := io.ReadAll(r.wrap(&copyText{ops: ops}))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Fatalf("got\n%q\nwant\n%q", got, want)
			}
		})
	}
	t.Run("a value that is not text fails the read", func(t *testing.T) {
		_, err := io.ReadAll(&copyText{ops: []op{{row: []any{"e", 1}}}})
		if err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("empty", func(t *testing.T) {
		n, err := (&copyText{}).Read(make([]byte, 8))
		if n != 0 || err != io.EOF {
			t.Fatalf("Read = %d, %v", n, err)
		}
	})
}
