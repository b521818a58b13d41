package pgsink

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

func TestDerivedType(t *testing.T) {
	tests := []struct {
		ft   serde.FieldType
		want string
	}{
		{serde.FieldType{Kind: "long"}, "bigint"},
		{serde.FieldType{Kind: "int"}, "integer"},
		{serde.FieldType{Kind: "boolean"}, "boolean"},
		{serde.FieldType{Kind: "float"}, "real"},
		{serde.FieldType{Kind: "double"}, "double precision"},
		{serde.FieldType{Kind: "string"}, "text"},
		{serde.FieldType{Kind: "enum"}, "text"},
		{serde.FieldType{Kind: "bytes"}, "bytea"},
		{serde.FieldType{Kind: "fixed"}, "bytea"},
		{serde.FieldType{Kind: "bytes", Logical: "decimal", Precision: 12, Scale: 2}, "numeric(12,2)"},
		{serde.FieldType{Kind: "fixed", Logical: "decimal", Precision: 2000, Scale: 2}, "numeric"},
		{serde.FieldType{Kind: "long", Logical: "timestamp-millis"}, "timestamptz"},
		{serde.FieldType{Kind: "long", Logical: "timestamp-micros", Nullable: true}, "timestamptz"},
		{serde.FieldType{Kind: "long", Logical: "local-timestamp-millis"}, "timestamp"},
		{serde.FieldType{Kind: "int", Logical: "date"}, "date"},
		{serde.FieldType{Kind: "int", Logical: "time-millis"}, "time"},
		{serde.FieldType{Kind: "string", Logical: "uuid"}, "uuid"},
		{serde.FieldType{Kind: "record"}, "jsonb"},
		{serde.FieldType{Kind: "array"}, "jsonb"},
		{serde.FieldType{Kind: "map"}, "jsonb"},
		{serde.FieldType{Kind: "union"}, "text"},
	}
	for _, tt := range tests {
		t.Run(tt.want+"/"+tt.ft.Kind+tt.ft.Logical, func(t *testing.T) {
			if got := DerivedType(tt.ft); got != tt.want {
				t.Errorf("DerivedType(%+v) = %q, want %q", tt.ft, got, tt.want)
			}
		})
	}
}

// numericMod is atttypmod of numeric(p,s).
func numericMod(p, s int) int32 { return int32(p<<16|s) + 4 }

func TestHolds(t *testing.T) {
	num := func(p, s int) colType { return colType{name: "numeric", base: "numeric", mod: numericMod(p, s)} }
	tests := []struct {
		name string
		col  colType
		typ  string
		want bool
	}{
		{"same", plainType("bigint"), "bigint", true},
		{"int into bigint", plainType("bigint"), "integer", true},
		{"long into integer", plainType("integer"), "bigint", false},
		{"string into bigint", plainType("bigint"), "text", false},
		{"anything into text", plainType("text"), "bigint", true},
		{"real into double", plainType("double precision"), "real", true},
		{"double into real", plainType("real"), "double precision", false},
		{"timestamptz", plainType("timestamp with time zone"), "timestamptz", true},
		{"timestamptz into timestamp", plainType("timestamp without time zone"), "timestamptz", false},
		{"numeric same", num(12, 2), "numeric(12,2)", true},
		{"numeric wider", num(14, 3), "numeric(12,2)", true},
		{"numeric more scale", num(12, 2), "numeric(12,3)", false},
		{"numeric more integer digits", num(12, 2), "numeric(13,2)", false},
		{"numeric unconstrained", plainType("numeric"), "numeric(40,10)", true},
		{"unconstrained into constrained", num(12, 2), "numeric", false},
		{"bigint into numeric(20,0)", num(20, 0), "bigint", true},
		{"bigint into numeric(12,2)", num(12, 2), "bigint", false},
		{"number into jsonb", plainType("jsonb"), "bigint", true},
		{"string into jsonb", plainType("jsonb"), "text", false},
		{"bytes into text", plainType("text"), "bytea", true},
		{"uuid", plainType("uuid"), "uuid", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := holds(tt.col, tt.typ); got != tt.want {
				t.Errorf("holds(%+v, %q) = %v, want %v", tt.col, tt.typ, got, tt.want)
			}
		})
	}
}

const typedAvroV1 = `{"type":"record","name":"R","fields":[
  {"name":"event_id","type":"string"},
  {"name":"n","type":"long"},
  {"name":"blob","type":"bytes"}
]}`

const typedAvroV2 = `{"type":"record","name":"R","fields":[
  {"name":"event_id","type":"string"},
  {"name":"n","type":"long"},
  {"name":"blob","type":"bytes"},
  {"name":"amount","type":["null",{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}],"default":null},
  {"name":"meta","type":{"type":"map","values":"long"}}
]}`

// avroSink is a sink reading raw Avro written with schema, its columns
// set up as if read from a table holding them.
func avroSink(t *testing.T, schema string, mod func(*Config), types ...colType) *Sink {
	t.Helper()
	s := newTestSink(t, func(c *Config) {
		c.InputFormat = serde.Avro
		c.InputCodec = serde.Config{Schema: schema}
		c.Columns = []Column{{"event_id", "event_id"}, {"n", "n"}, {"blob", "blob"}, {"body", "$value"}}
		c.Types = topology.TypesFromSchema
		if mod != nil {
			mod(c)
		}
	})
	s.types = types
	s.typed.tableCols = map[string]colType{}
	for i, c := range s.cfg.Columns {
		s.typed.tableCols[c.Name] = types[i]
	}
	return s
}

func avroRecord(t *testing.T, schema string, v map[string]any) *kgo.Record {
	t.Helper()
	c, err := serde.NewCodec(serde.Config{Format: serde.Avro, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return &kgo.Record{Topic: "in", Value: b}
}

func TestAvroRow(t *testing.T) {
	s := avroSink(t, typedAvroV1, nil, plainType("text"), plainType("bigint"), plainType("bytea"), plainType("jsonb"))
	o, ok, err := s.toOp(avroRecord(t, typedAvroV1, map[string]any{"event_id": "e1", "n": int64(1) << 60, "blob": []byte{0, 0xff}}))
	if err != nil || !ok {
		t.Fatalf("toOp: %v %v", ok, err)
	}
	want := []any{"e1", "1152921504606846976", `\x00ff`, `{"blob":"AP8=","event_id":"e1","n":1152921504606846976}`}
	for i := range want {
		if o.row[i] != want[i] {
			t.Errorf("column %s = %#v, want %#v", s.cfg.Columns[i].Name, o.row[i], want[i])
		}
	}
}

func TestAutoColumns(t *testing.T) {
	typesV1 := []colType{plainType("text"), plainType("bigint"), plainType("bytea"), plainType("jsonb")}
	v2 := map[string]any{"event_id": "e2", "n": int64(2), "blob": []byte{1}, "amount": "12.34", "meta": map[string]any{"a": int64(1)}}
	t.Run("new fields become pending columns", func(t *testing.T) {
		s := avroSink(t, typedAvroV2, func(c *Config) { c.AutoColumns = true }, typesV1...)
		o, ok, err := s.toOp(avroRecord(t, typedAvroV2, v2))
		if err != nil || !ok {
			t.Fatalf("toOp: %v %v", ok, err)
		}
		if got := len(s.cfg.Columns); got != 6 || s.cfg.Columns[4] != (Column{"amount", "amount"}) || s.cfg.Columns[5] != (Column{"meta", "meta"}) {
			t.Fatalf("columns %v", s.cfg.Columns)
		}
		if len(s.typed.pending) != 2 || s.typed.pending[0].typ != "numeric(12,2)" || s.typed.pending[1].typ != "jsonb" {
			t.Fatalf("pending %+v", s.typed.pending)
		}
		if o.row[4] != "12.34" || o.row[5] != `{"a":1}` {
			t.Fatalf("row %v", o.row)
		}
		if !strings.Contains(s.sql.staging, "c5 jsonb") { // staged in its type: stagedType
			t.Fatalf("staging not rebuilt: %s", s.sql.staging)
		}
		ops := []op{{row: make([]any, 4)}, o}
		s.padRows(ops)
		if len(ops[0].row) != 6 {
			t.Fatalf("padded row %v", ops[0].row)
		}
		// A second record of the schema changes nothing.
		if _, _, err := s.toOp(avroRecord(t, typedAvroV2, v2)); err != nil || len(s.cfg.Columns) != 6 || len(s.typed.pending) != 2 {
			t.Fatalf("second record: %v, columns %v", err, s.cfg.Columns)
		}
		s.evolved()
		if len(s.typed.pending) != 0 || s.typed.tableCols["amount"].name != "numeric(12,2)" {
			t.Fatalf("after commit: pending %v, table columns %v", s.typed.pending, s.typed.tableCols)
		}
	})
	t.Run("a column of the table is reused, no ALTER", func(t *testing.T) {
		s := avroSink(t, typedAvroV2, func(c *Config) { c.AutoColumns = true }, typesV1...)
		s.typed.tableCols["amount"] = colType{name: "numeric(14,2)", base: "numeric", mod: numericMod(14, 2)}
		s.typed.tableCols["meta"] = plainType("jsonb")
		if _, _, err := s.toOp(avroRecord(t, typedAvroV2, v2)); err != nil {
			t.Fatal(err)
		}
		if len(s.typed.pending) != 0 || len(s.cfg.Columns) != 6 {
			t.Fatalf("pending %v, columns %v", s.typed.pending, s.cfg.Columns)
		}
	})
	t.Run("without auto columns new fields are not loaded", func(t *testing.T) {
		s := avroSink(t, typedAvroV2, nil, typesV1...)
		if _, _, err := s.toOp(avroRecord(t, typedAvroV2, v2)); err != nil || len(s.cfg.Columns) != 4 {
			t.Fatalf("%v, columns %v", err, s.cfg.Columns)
		}
	})
	tests := []struct {
		name  string
		mod   func(*Config)
		types []colType
		want  string
	}{
		{"a column too narrow for its field", nil,
			[]colType{plainType("text"), plainType("integer"), plainType("bytea"), plainType("jsonb")},
			`column "n" of table "raw"."events" is integer, which cannot hold field "n" of schema id 0 (long, read as bigint)`},
		{"an existing table column too narrow", func(c *Config) { c.AutoColumns = true },
			typesV1, `column "amount" of table "raw"."events" is integer, which cannot hold field "amount" of schema id 0 (nullable decimal(12,2), read as numeric(12,2))`},
		{"a field's name taken by another column", func(c *Config) {
			c.AutoColumns = true
			c.Columns = append(c.Columns[:3:3], Column{"meta", "$value"})
		}, typesV1, `field "meta" of schema id 0 has no column: column "meta" maps $value, not the field`},
	}
	t.Run("a field name too long for a column", func(t *testing.T) {
		long := strings.Repeat("f", 64)
		schema := `{"type":"record","name":"R","fields":[{"name":"event_id","type":"string"},{"name":"` + long + `","type":"long"}]}`
		s := avroSink(t, schema, func(c *Config) { c.AutoColumns = true; c.Columns = c.Columns[:1] }, plainType("text"))
		_, _, err := s.toOp(avroRecord(t, schema, map[string]any{"event_id": "a", long: int64(1)}))
		if !IsFatal(err) || !strings.Contains(err.Error(), "longer than the 63 bytes") {
			t.Fatalf("err %v, want a fatal error about the name's length", err)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := avroSink(t, typedAvroV2, tt.mod, tt.types...)
			if strings.Contains(tt.want, `column "amount"`) {
				s.typed.tableCols["amount"] = plainType("integer")
			}
			_, _, err := s.toOp(avroRecord(t, typedAvroV2, v2))
			var ce *fault.ConfigError
			if !errors.As(err, &ce) || !IsFatal(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want a fatal config error with %q", err, tt.want)
			}
		})
	}
}

func TestTypedSetupSQL(t *testing.T) {
	s := avroSink(t, typedAvroV1, func(c *Config) {
		c.ColumnTypes = map[string]string{"n": "numeric(20,0)"}
		c.Columns = append(c.Columns, Column{"k", "$key"})
	}, plainType("text"), plainType("bigint"), plainType("bytea"), plainType("jsonb"), plainType("text"))
	s.typed.derived = map[string]string{"event_id": "text", "n": "bigint", "blob": "bytea"}
	stmts := s.setupSQL()
	create := stmts[len(stmts)-1]
	for _, want := range []string{`"event_id" text PRIMARY KEY`, `"n" numeric(20,0)`, `"blob" bytea`, `"body" jsonb`, `"k" text`} {
		if !strings.Contains(create, want) {
			t.Errorf("CREATE TABLE lacks %q:\n%s", want, create)
		}
	}
	// Declared types without from_schema; the rest as before.
	d := newTestSink(t, func(c *Config) { c.ColumnTypes = map[string]string{"n": "numeric(12,2)", "note": "varchar(40)"} })
	stmts = d.setupSQL()
	create = stmts[len(stmts)-1]
	for _, want := range []string{`"n" numeric(12,2)`, `"note" varchar(40)`, `"tags" text`, `"body" jsonb`} {
		if !strings.Contains(create, want) {
			t.Errorf("CREATE TABLE lacks %q:\n%s", want, create)
		}
	}
}

func TestValidateTypes(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"from_schema needs avro", func(c *Config) { c.Types = topology.TypesFromSchema }, "types from_schema needs avro input, not json"},
		{"unknown types", func(c *Config) { c.Types = "guess" }, `types "guess": want declared or from_schema`},
		{"auto columns need from_schema", func(c *Config) { c.AutoColumns = true }, "auto columns need types from_schema"},
		{"type of no column", func(c *Config) { c.ColumnTypes = map[string]string{"zz": "text"} }, `column type of "zz": no such column`},
		{"bad type", func(c *Config) { c.ColumnTypes = map[string]string{"n": "text; drop"} }, `column "n": invalid type "text; drop"`},
		{"avro without schema", func(c *Config) { c.InputFormat = serde.Avro }, "format avro needs a schema file or a registry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.mod(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
		})
	}
}

// TestAvroPromotionExact: a sink reading with a reader schema that
// promotes long to double and int to float (types from_schema: double
// precision and real) loads a value only if the reader's type holds it
// exactly, as a stage does (the same serde decode); otherwise the record
// is a dead letter with reason decode, naming the field. A float promoted
// to double is loaded as the float's value exactly (float 0x3DCCCCCD is
// 0.10000000149011612, not 0.1).
func TestAvroPromotionExact(t *testing.T) {
	const writer = `{"type":"record","name":"P","fields":[{"name":"id","type":"string"},{"name":"l","type":"long"},{"name":"i","type":"int"},{"name":"f","type":"float"}]}`
	const reader = `{"type":"record","name":"P","fields":[{"name":"id","type":"string"},{"name":"l","type":"double"},{"name":"i","type":"float"},{"name":"f","type":"double"}]}`
	reg := srfake.New()
	defer reg.Close()
	id, _, err := reg.RegisterSchema("in-value", sr.Schema{Schema: writer, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	s := newTestSink(t, func(c *Config) {
		c.InputFormat = serde.Avro
		c.InputCodec = serde.Config{Registry: serde.Registry{URL: reg.URL(), ReaderSchema: reader}}
		c.Columns = []Column{{"id", "id"}, {"l", "l"}, {"i", "i"}, {"f", "f"}}
		c.EventID = "id"
		c.Types = topology.TypesFromSchema
	})
	s.types = []colType{plainType("text"), plainType("double precision"), plainType("real"), plainType("double precision")}
	s.typed.tableCols = map[string]colType{"id": s.types[0], "l": s.types[1], "i": s.types[2], "f": s.types[3]}
	raw, err := serde.NewCodec(serde.Config{Format: serde.Avro, Schema: writer})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		l       int64
		i       int32
		f       uint32 // the float's bits
		want    []any  // the row, or
		wantErr string // the end of the decode error
	}{
		{"exact", 9007199254740992, 16777216, 0x3F000000, []any{"p1", "9007199254740992.0", "16777216.0", "0.5"}, ""},
		{"float 0x3DCCCCCD", 1, 1, 0x3DCCCCCD, []any{"p1", "1.0", "1.0", "0.10000000149011612"}, ""},
		{"float 0x00000001", 1, 1, 0x00000001, []any{"p1", "1.0", "1.0", "1.401298464324817e-45"}, ""},
		{"long 2^53+1", 9007199254740993, 1, 0, nil, `field "l": long 9007199254740993 is not exactly a double, the reader schema's type (it would be rounded)`},
		{"int 2^24+1", 1, 16777217, 0, nil, `field "i": int 16777217 is not exactly a float, the reader schema's type (it would be rounded)`},
		{"long int64 max", 9223372036854775807, 1, 0, nil, `field "l": long 9223372036854775807 is not exactly a double`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			datum, err := raw.Encode(map[string]any{"id": "p1", "l": tc.l, "i": tc.i, "f": math.Float32frombits(tc.f)})
			if err != nil {
				t.Fatal(err)
			}
			hdr, _ := new(sr.ConfluentHeader).AppendEncode(nil, id, nil)
			o, ok, err := s.toOp(&kgo.Record{Topic: "in", Value: append(hdr, datum...)})
			if tc.wantErr != "" {
				var re *dlq.RecordError
				if !errors.As(err, &re) || re.Reason != deadletter.ReasonDecode || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("toOp error = %v, want a decode dead letter with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("toOp: %v %v", ok, err)
			}
			for i := range tc.want {
				if o.row[i] != tc.want[i] {
					t.Errorf("column %s = %#v, want %#v", s.cfg.Columns[i].Name, o.row[i], tc.want[i])
				}
			}
		})
	}
}
