package pgsink

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/serde"
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
		{"upsert", topology.ModeUpsert, []colType{plainType("text"), plainType("jsonb")}, true},
		{"upsert, a checked type", topology.ModeUpsert, []colType{plainType("text"), plainType("numeric(10,2)")}, false},
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
	t.Run("streamed upsert batches count down the rest", func(t *testing.T) {
		s := newTestSink(t, func(c *Config) { c.Mode = topology.ModeUpsert })
		s.direct = directPath{on: true}
		b := newBatch()
		b.recs = []*kgo.Record{{Value: []byte(`{}`)}}
		s.direct.done(false)
		s.direct.done(false) // rest 2
		var got []int
		for range 4 {
			k := s.streamable(b)
			got = append(got, k)
			if k == streamStaged {
				s.direct.skipped() // as loadStreamStaged does
			}
		}
		if want := []int{streamStaged, streamStaged, streamDirect, streamDirect}; !reflect.DeepEqual(got, want) {
			t.Fatalf("streamable over 4 batches: %v, want %v", got, want)
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
		{row: []any{"only\nnewline", "only\rreturn", "only\ttab"}},
	}
	want := "e-1\t{\"a\":\"x\\\\ty\"}\n" + // JSON's \t: a backslash, then t
		"e-2\t\\N\n" +
		"e-3\tback\\\\slash\\nnew\\rline\\ttab\n" +
		"\\\\N\t\\\\.\n" +
		"é-5\t\n" +
		"only\\nnewline\tonly\\rreturn\tonly\\ttab\n"
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

// A copyStream decodes records as prepare does: its COPY text is that of
// prepare's ops, and its op count and dead letters (reasons, in record
// order) are prepare's, however the COPY reads it. A codec's transient failure
// ends the read with prepare's error, and a read after stop fails.
func TestCopyStream(t *testing.T) {
	s := newTestSink(t, func(c *Config) {
		c.Columns = []Column{{"event_id", "event_id"}, {"body", "$value"}, {"n", "n"}}
	})
	rec := func(off int64, v string) *kgo.Record {
		r := &kgo.Record{Topic: "in", Offset: off}
		if v != "nil" {
			r.Value = []byte(v)
		}
		return r
	}
	b := newBatch()
	b.recs = []*kgo.Record{
		rec(0, `{"event_id":"e-0","n":1}`),
		rec(1, `{"event_id":`), // invalid JSON: decode
		rec(2, "nil"),          // a tombstone, skipped
		rec(3, `{"n":2}`),      // no event ID
		rec(4, `{"event_id":"e-4","n":"a\tb"}`),
		rec(5, `[1]`), // not an object: event ID
		rec(6, `{"event_id":"e-6"}`),
	}
	ops, dead, err := s.prepare(b)
	if err != nil || len(ops) != 3 || len(dead) != 3 {
		t.Fatalf("prepare: %d ops, %d dead letters, %v", len(ops), len(dead), err)
	}
	want, err := io.ReadAll(&copyText{ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	reasons := func(dl []deadLetter) (out []string) {
		for _, d := range dl {
			out = append(out, fmt.Sprintf("%d:%s:%v", d.src.Offset, d.re.Reason, d.re.Err))
		}
		return out
	}
	for _, r := range []struct {
		name string
		wrap func(io.Reader) io.Reader
	}{
		{"whole", func(r io.Reader) io.Reader { return r }},
		{"one byte at a time", iotest.OneByteReader},
		{"half", iotest.HalfReader},
	} {
		t.Run(r.name, func(t *testing.T) {
			st := &copyStream{s: s, recs: b.recs, one: make([]op, 0, 1)}
			got, err := io.ReadAll(r.wrap(st))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.stop(); err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("copy text\n%q\nwant\n%q", got, want)
			}
			if st.next != len(b.recs) || st.ops != len(ops) {
				t.Fatalf("%d ops (next %d), want %d", st.ops, st.next, len(ops))
			}
			if g, w := reasons(st.dead), reasons(dead); !reflect.DeepEqual(g, w) {
				t.Fatalf("dead letters %q, want %q", g, w)
			}
			if n, err := st.Read(make([]byte, 8)); n != 0 || !errors.Is(err, errStreamStopped) {
				t.Fatalf("Read after stop = %d, %v", n, err)
			}
		})
	}
	for _, f := range []copyFormat{{ord: true}, {binary: true, jsonb: []bool{false, true, false}, ord: true}} {
		t.Run(fmt.Sprintf("binary %v, with ordinals", f.binary), func(t *testing.T) {
			st := &copyStream{s: s, recs: b.recs, one: make([]op, 0, 1), f: f}
			got, err := io.ReadAll(iotest.HalfReader(st))
			if err != nil {
				t.Fatal(err)
			}
			// prepare's ops with their index, as insertRun stages them.
			w, err := io.ReadAll(&copyText{ops: ops, f: f})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(w) {
				t.Fatalf("copy data\n%q\nwant\n%q", got, w)
			}
			rows := parseCopy(t, f, got)
			if len(rows) != len(ops) {
				t.Fatalf("%d rows, want %d", len(rows), len(ops))
			}
			for i, o := range ops {
				if want := append(o.row[:len(o.row):len(o.row)], fmt.Sprint(i)); !reflect.DeepEqual(rows[i], want) {
					t.Fatalf("row %d: %q, want %q", i, rows[i], want)
				}
			}
		})
	}
	t.Run("transient decode failure", func(t *testing.T) {
		ts := newTestSink(t, func(c *Config) {
			c.Columns = []Column{{"event_id", "event_id"}, {"body", "$value"}, {"n", "n"}}
		})
		ts.codec, ts.passJSON = flakyCodec{ts.codec}, false
		_, _, perr := ts.prepare(b)
		st := &copyStream{s: ts, recs: b.recs, one: make([]op, 0, 1)}
		_, err := io.ReadAll(st)
		if !serde.IsTransient(err) || err.Error() != perr.Error() {
			t.Fatalf("Read error %v, want prepare's %v", err, perr)
		}
		if serr := st.stop(); serr != err || st.failed != err {
			t.Fatalf("stop = %v, failed = %v; want %v", serr, st.failed, err)
		}
		if st.ops+len(st.dead) != 0 || st.next != 0 {
			t.Fatalf("%d ops, %d dead letters, next %d after a transient failure", st.ops, len(st.dead), st.next)
		}
	})
	t.Run("a delete stops the stream", func(t *testing.T) {
		ds := newTestSink(t, func(c *Config) {
			c.Columns = []Column{{"event_id", "event_id"}, {"body", "$value"}, {"n", "n"}}
			c.Tombstones = topology.TombstonesDelete
		})
		d := newBatch()
		d.recs = []*kgo.Record{rec(0, `{"event_id":"e-0"}`), {Topic: "in", Offset: 1, Key: []byte("e-0")}}
		if ds.streamable(d) != streamNone {
			t.Fatal("a sink that deletes on tombstones streams")
		}
		st := &copyStream{s: ds, recs: d.recs, one: make([]op, 0, 1)}
		if _, err := io.ReadAll(st); !errors.Is(err, errStreamDelete) || st.stop() != err || st.failed != nil {
			t.Fatalf("Read error %v, failed %v; want errStreamDelete only", err, st.failed)
		}
	})
}

// A batch streams only when no record can become a delete: straight into
// the table when the direct path would be tried, in either mode; else
// into the staging table in upsert mode; an insert-mode batch the direct
// path skips does not.
func TestStreamable(t *testing.T) {
	b := newBatch()
	b.recs = []*kgo.Record{{Value: []byte(`{}`)}}
	upsert := func(c *Config) { c.Mode = topology.ModeUpsert }
	tests := []struct {
		name string
		mod  func(*Config)
		path directPath
		recs bool
		want int
	}{
		{"on", nil, directPath{on: true}, true, streamDirect},
		{"off", nil, directPath{}, true, streamNone},
		{"resting", nil, directPath{on: true, rest: 1}, true, streamNone},
		{"no records", nil, directPath{on: true}, false, streamNone},
		{"tombstones delete", func(c *Config) { c.Tombstones = topology.TombstonesDelete }, directPath{on: true}, true, streamNone},
		{"upsert", upsert, directPath{}, true, streamStaged},
		{"upsert, direct", upsert, directPath{on: true}, true, streamDirect},
		{"upsert, direct resting", upsert, directPath{on: true, rest: 2}, true, streamStaged},
		{"upsert, no records", upsert, directPath{}, false, streamNone},
		{"upsert, tombstones delete", func(c *Config) { upsert(c); c.Tombstones = topology.TombstonesDelete }, directPath{}, true, streamNone},
		{"change events", func(c *Config) { c.Envelope = topology.EnvelopeDebezium; c.Mode = topology.ModeUpsert }, directPath{}, true, streamNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestSink(t, tt.mod)
			s.direct = tt.path
			bb := b
			if !tt.recs {
				bb = newBatch()
			}
			if got := s.streamable(bb); got != tt.want {
				t.Fatalf("streamable = %v, want %v", got, tt.want)
			}
		})
	}
}
