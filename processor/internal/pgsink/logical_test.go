package pgsink

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// twos is the base64 of n's big-endian two's complement, as Java's
// BigInteger.toByteArray writes it.
func twos(n string) string {
	v, _ := new(big.Int).SetString(n, 10)
	if v.Sign() >= 0 {
		b := v.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	// -v = 2^(8k) - |v| for the smallest k that keeps the sign bit.
	for k := 1; ; k++ {
		m := new(big.Int).Lsh(big.NewInt(1), uint(8*k))
		u := new(big.Int).Add(m, v)
		b := u.Bytes()
		if u.Sign() > 0 && len(b) == k && b[0]&0x80 != 0 {
			return base64.StdEncoding.EncodeToString(b)
		}
	}
}

func TestDecimalText(t *testing.T) {
	for _, tc := range []struct {
		unscaled string
		scale    int
		want     string
	}{
		{"-2667212", 3, "-2667.212"},
		{"2667212", 3, "2667.212"},
		{"0", 0, "0"},
		{"0", 5, "0.00000"},
		{"-1", 0, "-1"},
		{"-1", 2, "-0.01"},
		{"127", 0, "127"},
		{"128", 0, "128"},
		{"-128", 0, "-128"},
		{"-129", 1, "-12.9"},
		{"5", -3, "5000"},
		{"123456789012345678901234567890", 20, "1234567890.12345678901234567890"},
		{"-123456789012345678901234567890", 40, "-0.0000000000123456789012345678901234567890"},
	} {
		t.Run(tc.unscaled+"e-"+string(rune('0'+tc.scale%10)), func(t *testing.T) {
			got, err := decimalText(twos(tc.unscaled), tc.scale)
			if err != nil || got != tc.want {
				t.Fatalf("decimalText(%s, %d) = %q, %v; want %q", tc.unscaled, tc.scale, got, err, tc.want)
			}
		})
	}
	// The base64 of a decimal that reads as a number (-2667.212's "1000"
	// would, were it read as text) is decoded, not taken as the number.
	if got, _ := decimalText(base64.StdEncoding.EncodeToString([]byte{0xd7, 0x4d, 0x34}), 3); got != "-2667.212" {
		t.Fatalf("got %q", got)
	}
	if _, err := decimalText("not base64!", 2); err == nil {
		t.Fatal("no error for text that is no base64")
	}
}

func TestSchemaText(t *testing.T) {
	num := func(s string) any { return json.Number(s) }
	dec := func(scale string) connectSchema {
		return connectSchema{Type: "bytes", Name: lgDecimal, Parameters: map[string]string{"scale": scale}}
	}
	named := func(typ, name string) connectSchema { return connectSchema{Type: typ, Name: name} }
	numeric, text, date, ts, tstz, tm, bytea, bit := plainType("numeric"), plainType("text"), plainType("date"),
		plainType("timestamp without time zone"), plainType("timestamp with time zone"), plainType("time without time zone"), plainType("bytea"), colType{name: "bit(5)", base: "bit", full: "bit(5)", mod: 5}
	for _, tc := range []struct {
		name    string
		v       any
		fs      connectSchema
		t       colType
		want    any // nil with ok false: the plain path
		wantErr string
	}{
		{"decimal negative", twos("-2667212"), dec("3"), numeric, "-2667.212", ""},
		{"decimal into text", twos("-2667212"), dec("3"), text, "-2667.212", ""},
		{"decimal scale 0", twos("42"), dec("0"), numeric, "42", ""},
		{"decimal large scale", twos("1"), dec("30"), numeric, "0.000000000000000000000000000001", ""},
		{"decimal into bytea", twos("1"), dec("0"), bytea, nil, `field "f" (logical type org.apache.kafka.connect.data.Decimal): a bytea column cannot hold the number 1`},
		{"decimal into date", twos("1"), dec("0"), date, nil, "cannot hold the number"},
		{"decimal no scale", twos("1"), connectSchema{Type: "bytes", Name: lgDecimal}, numeric, nil, "no integer parameter scale"},
		{"decimal not base64", "@@@", dec("2"), numeric, nil, "not base64"},
		{"decimal whole into integer", twos("-300"), dec("2"), plainType("integer"), "-3", ""},
		{"decimal zero into bigint", twos("0"), dec("2"), plainType("bigint"), "0", ""},
		{"decimal fraction into integer", twos("-325"), dec("2"), plainType("integer"), nil, `field "f" (logical type org.apache.kafka.connect.data.Decimal): a integer column cannot hold the fraction of -3.25`},
		{"decimal small fraction into smallint", twos("1"), dec("2"), plainType("smallint"), nil, "cannot hold the fraction of 0.01"},
		{"variable scale whole into integer", json.RawMessage(`{"scale":3,"value":"` + twos("7000") + `"}`), named("struct", lgVarDecimal), plainType("integer"), "7", ""},
		{"decimal of no bytes", "", dec("2"), numeric, nil, "no bytes"},
		{"variable scale of no bytes", json.RawMessage(`{"scale":0,"value":""}`), named("struct", lgVarDecimal), numeric, nil, "no bytes"},
		{"last date", num("2145042905"), named("int32", lgDbzDate), date, "5874897-12-31", ""},
		{"first date", num("-2440588"), named("int32", lgDbzDate), date, "4714-11-24 BC", ""},
		{"date after the last", num("2145042906"), named("int32", lgDbzDate), date, nil, "2145042906 days since 1970-01-01 is beyond the dates Postgres holds"},
		{"date before the first", num("-2440589"), named("int32", lgDbzDate), date, nil, "is beyond the dates Postgres holds"},
		{"variable scale", json.RawMessage(`{"scale":2,"value":"` + twos("-12345") + `"}`), named("struct", lgVarDecimal), numeric, "-123.45", ""},
		{"variable scale missing", json.RawMessage(`{"value":"AQ=="}`), named("struct", lgVarDecimal), numeric, nil, "want {"},
		{"connect date", num("19723"), named("int32", lgDate), date, "2024-01-01", ""},
		{"debezium date before 1970", num("-1"), named("int32", lgDbzDate), date, "1969-12-31", ""},
		{"date BC", num("-719163"), named("int32", lgDbzDate), date, "0001-12-31 BC", ""},
		{"date into bigint", num("1"), named("int32", lgDate), plainType("bigint"), nil, "cannot hold the time 1970-01-02"},
		{"connect time", num("45296789"), named("int32", lgTime), tm, "12:34:56.789", ""},
		{"debezium time", num("0"), named("int32", lgDbzTime), tm, "00:00:00", ""},
		{"micro time", num("45296789012"), named("int64", lgMicroTime), tm, "12:34:56.789012", ""},
		{"nano time", num("45296789012345"), named("int64", lgNanoTime), tm, "12:34:56.789012345", ""},
		{"end of day", num("86400000000"), named("int64", lgMicroTime), tm, "24:00:00", ""},
		{"beyond a day", num("86400000001"), named("int64", lgMicroTime), tm, nil, "is no time of day"},
		{"negative time", num("-1"), named("int32", lgTime), tm, nil, "is no time of day"},
		{"connect timestamp is an instant", num("1704067200123"), named("int64", lgTimestamp), tstz, "2024-01-01T00:00:00.123Z", ""},
		{"debezium timestamp is local", num("1704067200123"), named("int64", lgDbzTimestamp), ts, "2024-01-01T00:00:00.123", ""},
		{"micro timestamp", num("1704067200123456"), named("int64", lgMicroTs), ts, "2024-01-01T00:00:00.123456", ""},
		{"nano timestamp", num("1704067200123456789"), named("int64", lgNanoTs), ts, "2024-01-01T00:00:00.123456789", ""},
		{"micro timestamp before 1970", num("-1"), named("int64", lgMicroTs), ts, "1969-12-31T23:59:59.999999", ""},
		{"milli timestamp before 1970", num("-1500"), named("int64", lgDbzTimestamp), ts, "1969-12-31T23:59:58.5", ""},
		{"zoned timestamp passes", "2024-01-01T10:00:00.123456+05:30", named("string", lgZonedTs), tstz, nil, ""},
		{"zoned time passes", "10:15:30Z", named("string", lgZonedTime), plainType("time with time zone"), nil, ""},
		{"uuid passes", "0b8f5a2e-0000-4000-8000-000000000000", named("string", "io.debezium.data.Uuid"), plainType("uuid"), nil, ""},
		{"json passes", `{"a":1}`, named("string", "io.debezium.data.Json"), plainType("jsonb"), nil, ""},
		{"micro duration into interval", num("90000000"), named("int64", lgMicroDuration), plainType("interval"), "90000000 microseconds", ""},
		{"micro duration into bigint", num("90000000"), named("int64", lgMicroDuration), plainType("bigint"), "90000000", ""},
		{"bits into bit", base64.StdEncoding.EncodeToString([]byte{0x05}), connectSchema{Type: "bytes", Name: lgBits, Parameters: map[string]string{"length": "5"}}, bit, "00101", ""},
		{"bits into bytea", base64.StdEncoding.EncodeToString([]byte{0x05}), connectSchema{Type: "bytes", Name: lgBits, Parameters: map[string]string{"length": "5"}}, bytea, `\x05`, ""},
		{"bits too long", base64.StdEncoding.EncodeToString([]byte{0xff}), connectSchema{Type: "bytes", Name: lgBits, Parameters: map[string]string{"length": "5"}}, bit, nil, "do not fit"},
		{"bits of a bit varying into bit", base64.StdEncoding.EncodeToString([]byte{0x01}), connectSchema{Type: "bytes", Name: lgBits, Parameters: map[string]string{"length": "2147483647"}}, bit, nil, `parameter length "2147483647" is not the 5 bits`},
		{"bits of another length into bit", base64.StdEncoding.EncodeToString([]byte{0x01}), connectSchema{Type: "bytes", Name: lgBits, Parameters: map[string]string{"length": "10"}}, bit, nil, "is not the 5 bits"},
		{"bits without length into bit", base64.StdEncoding.EncodeToString([]byte{0x01}), connectSchema{Type: "bytes", Name: lgBits}, bit, "00001", ""},
		{"bits into bit varying", base64.StdEncoding.EncodeToString([]byte{0x01}), connectSchema{Type: "bytes", Name: lgBits, Parameters: map[string]string{"length": "10"}}, colType{name: "bit varying(10)", base: "bit varying", full: "bit varying(10)", mod: 10}, nil, `field "f" (logical type io.debezium.data.Bits): a bit varying(10) column cannot hold bits exactly`},
		{"bits into text", base64.StdEncoding.EncodeToString([]byte{0x01}), connectSchema{Type: "bytes", Name: lgBits, Parameters: map[string]string{"length": "2147483647"}}, text, nil, "only a bit(n) column"},
		{"bytes into bytea", base64.StdEncoding.EncodeToString([]byte("hi\x00")), connectSchema{Type: "bytes"}, bytea, `\x686900`, ""},
		{"bytes into text", "aGk=", connectSchema{Type: "bytes"}, text, nil, ""},
		{"plain int", num("7"), connectSchema{Type: "int32"}, numeric, nil, ""},
		{"unknown logical number into text", num("7"), named("int64", "com.example.Odd"), text, nil, ""},
		{"unknown logical number into timestamp", num("7"), named("int64", "com.example.Odd"), ts, nil, "does not decode this logical type"},
		{"unknown logical bytes into bytea", "AQ==", named("bytes", "com.example.Odd"), bytea, nil, "does not decode this logical type"},
		{"null", nil, dec("2"), numeric, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := schemaText(tc.v, tc.fs, tc.t, "f")
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v, error %v; want an error with %q", got, ok, err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("error %v", err)
			case tc.want == nil && ok:
				t.Fatalf("got %v; want the plain path", got)
			case tc.want != nil && (!ok || got != tc.want):
				t.Fatalf("got %v (ok %v); want %v", got, ok, tc.want)
			}
		})
	}
}

func TestSchemaTextArray(t *testing.T) {
	items := connectSchema{Type: "bytes", Name: lgDecimal, Parameters: map[string]string{"scale": "2"}}
	arr := colType{name: "numeric[]", base: "numeric[]", full: "numeric[]", mod: -1}
	v := json.RawMessage(`["` + twos("-150") + `",null,"` + twos("7") + `"]`)
	got, ok, err := schemaText(v, connectSchema{Type: "array", Items: &items}, arr, "prices")
	if err != nil || !ok || got != `{"-1.50",NULL,"0.07"}` {
		t.Fatalf("got %v, %v, %v", got, ok, err)
	}
	if _, _, err := schemaText(v, connectSchema{Type: "array", Items: &items}, plainType("numeric"), "prices"); err == nil {
		t.Fatal("an array of decimals into numeric: no error")
	}
}

func TestUnavailable(t *testing.T) {
	s := &Sink{cfg: Config{UnavailableValue: "__debezium_unavailable_value"}}
	b64 := base64.StdEncoding.EncodeToString([]byte("__debezium_unavailable_value"))
	bytea, text := plainType("bytea"), plainType("text")
	arr := colType{name: "text[]", base: "text[]", full: "text[]", mod: -1}
	intArr := colType{name: "integer[]", base: "integer[]", full: "integer[]", mod: -1}
	var byteB64 []string
	var phInts, phDecimals []any
	for _, c := range []byte("__debezium_unavailable_value") {
		byteB64 = append(byteB64, `"`+base64.StdEncoding.EncodeToString([]byte{c})+`"`)
		phInts = append(phInts, int32(c))
		phDecimals = append(phDecimals, fmt.Sprintf("%d.%02d", c/100, c%100))
	}
	for _, tc := range []struct {
		name string
		v    any
		t    colType
		fs   connectSchema
		want bool
	}{
		{"text", "__debezium_unavailable_value", text, connectSchema{}, true},
		{"jsonb", "__debezium_unavailable_value", plainType("jsonb"), connectSchema{}, true},
		{"other text", "__debezium_unavailable_value ", text, connectSchema{}, false},
		{"bytea base64", b64, bytea, connectSchema{}, true},
		{"bytes schema base64", b64, text, connectSchema{Type: "bytes"}, true},
		{"base64 into text", b64, text, connectSchema{}, false},
		{"avro bytes", []byte("__debezium_unavailable_value"), bytea, connectSchema{}, true},
		{"array of it", json.RawMessage(`["__debezium_unavailable_value"]`), arr, connectSchema{}, true},
		{"array with more", json.RawMessage(`["__debezium_unavailable_value","x"]`), arr, connectSchema{}, false},
		{"bytea array", json.RawMessage(`["` + b64 + `"]`), colType{name: "bytea[]", base: "bytea[]", full: "bytea[]", mod: -1}, connectSchema{}, true},
		{"avro array", []any{"__debezium_unavailable_value"}, arr, connectSchema{}, true},
		{"int array of its bytes", json.RawMessage(`[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,101]`), intArr, connectSchema{}, true},
		{"date array of its bytes", json.RawMessage(`[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,101]`), colType{name: "date[]", base: "date[]", full: "date[]", mod: -1}, connectSchema{Type: "array", Items: &connectSchema{Type: "int32", Name: lgDbzDate}}, true},
		{"float array of its bytes", json.RawMessage(`[95.0,95.0,100.0,101.0,98.0,101.0,122.0,105.0,117.0,109.0,95.0,117.0,110.0,97.0,118.0,97.0,105.0,108.0,97.0,98.0,108.0,101.0,95.0,118.0,97.0,108.0,117.0,101.0]`), intArr, connectSchema{}, true},
		{"decimal array of its bytes", json.RawMessage(`[` + strings.Join(byteB64, ",") + `]`), intArr, connectSchema{}, true},
		{"int array of another placeholder's bytes", json.RawMessage(`[64,64,78,65,64,64]`), intArr, connectSchema{}, false},
		{"int array one byte off", json.RawMessage(`[95,95,100,101,98,101,122,105,117,109,95,117,110,97,118,97,105,108,97,98,108,101,95,118,97,108,117,102]`), intArr, connectSchema{}, false},
		{"avro int array of its bytes", phInts, intArr, connectSchema{}, true},
		{"uuid array", json.RawMessage(`["b68a35a7-17ad-35b3-af2a-ae46edb4545a"]`), colType{name: "uuid[]", base: "uuid[]", full: "uuid[]", mod: -1}, connectSchema{}, true},
		{"avro uuid array", []any{"b68a35a7-17ad-35b3-af2a-ae46edb4545a"}, colType{name: "uuid[]", base: "uuid[]", full: "uuid[]", mod: -1}, connectSchema{}, true},
		{"other uuid array", json.RawMessage(`["b68a35a7-17ad-35b3-af2a-ae46edb4545b"]`), colType{name: "uuid[]", base: "uuid[]", full: "uuid[]", mod: -1}, connectSchema{}, false},
		{"avro decimal array of its bytes", phDecimals, intArr, connectSchema{Type: "array", Items: &connectSchema{Type: "string", Name: lgAvroDecimal}}, true},
		{"avro decimal array one byte off", append(phDecimals[:len(phDecimals)-1:len(phDecimals)-1], "1.02"), intArr, connectSchema{Type: "array", Items: &connectSchema{Type: "string", Name: lgAvroDecimal}}, false},
		{"hstore map", json.RawMessage(`{"__debezium_unavailable_value":"__debezium_unavailable_value"}`), plainType("hstore"), connectSchema{}, true},
		{"avro bytes array", []any{[]byte("__debezium_unavailable_value")}, colType{name: "bytea[]", base: "bytea[]", full: "bytea[]", mod: -1}, connectSchema{}, true},
		{"null", nil, text, connectSchema{}, false},
		{"number", json.Number("1"), text, connectSchema{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.unavailable(tc.v, tc.t, tc.fs); got != tc.want {
				t.Fatalf("unavailable(%v) = %v; want %v", tc.v, got, tc.want)
			}
		})
	}
	na := &Sink{cfg: Config{UnavailableValue: "@@NA@@"}}
	if !na.unavailable(json.RawMessage(`[64,64,78,65,64,64]`), intArr, connectSchema{}) {
		t.Fatal("an int array of a configured placeholder's bytes is not unavailable")
	}
	if got := placeholderUUID("__debezium_unavailable_value"); got != "b68a35a7-17ad-35b3-af2a-ae46edb4545a" {
		t.Fatalf("placeholderUUID = %s", got)
	}
	off := &Sink{}
	if off.unavailable("__debezium_unavailable_value", text, connectSchema{}) {
		t.Fatal("no placeholder configured, yet a value is unavailable")
	}
}

// dbzAvroSchema is a Debezium change event as Confluent's AvroConverter
// writes its schema: Connect's Decimal an Avro decimal, Debezium's time
// types plain ints and longs named by connect.name, a
// VariableScaleDecimal a record.
const dbzAvroSchema = `{"type":"record","name":"Envelope","namespace":"srv.public.items","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
   {"name":"id","type":"long"},
   {"name":"ts","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}],"default":null},
   {"name":"t","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTime"}],"default":null},
   {"name":"amount","type":["null",{"type":"bytes","scale":3,"precision":12,"connect.version":1,"connect.parameters":{"scale":"3","connect.decimal.precision":"12"},"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
   {"name":"vs","type":["null",{"type":"record","name":"VariableScaleDecimal","namespace":"io.debezium.data","fields":[{"name":"scale","type":"int"},{"name":"value","type":"bytes"}],"connect.name":"io.debezium.data.VariableScaleDecimal"}],"default":null},
   {"name":"d","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null}
 ]}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"op","type":"string"}]}`

func TestAvroConnectLogicalTypes(t *testing.T) {
	s := newTestSink(t, func(c *Config) {
		c.InputFormat = serde.Avro
		c.InputCodec = serde.Config{Schema: dbzAvroSchema}
		c.EventID = "id"
		c.Columns = []Column{{"id", "id"}, {"ts", "ts"}, {"t", "t"}, {"amount", "amount"}, {"vs", "vs"}, {"d", "d"}}
		c.Mode = topology.ModeUpsert
		c.Envelope = topology.EnvelopeDebezium
	})
	s.types = []colType{plainType("bigint"), plainType("timestamp without time zone"), plainType("time without time zone"),
		plainType("numeric"), plainType("numeric"), plainType("date")}
	row := map[string]any{"id": int64(7), "ts": int64(1704067200123456), "t": int64(45296789012),
		"amount": "-2667.212", "vs": map[string]any{"scale": int32(2), "value": []byte{0xcf, 0xc7}}, "d": int32(-1)}
	o, ok, err := s.toOp(avroRecord(t, dbzAvroSchema, map[string]any{"before": nil, "after": row, "op": "c"}))
	if err != nil || !ok {
		t.Fatalf("toOp: %v, %v", ok, err)
	}
	want := []any{"7", "2024-01-01T00:00:00.123456", "12:34:56.789012", "-2667.212", "-123.45", "1969-12-31"}
	for i, w := range want {
		if o.row[i] != w {
			t.Errorf("column %s: %v; want %v", s.cfg.Columns[i].Name, o.row[i], w)
		}
	}
	del, ok, err := s.toOp(avroRecord(t, dbzAvroSchema, map[string]any{"before": row, "after": nil, "op": "d"}))
	if err != nil || !ok || !del.del || del.id != "7" {
		t.Fatalf("delete: %+v, %v, %v", del, ok, err)
	}
}

// dbzAvroArraySchema is a Debezium change event with arrays as
// Confluent's AvroConverter writes them: items named by connect.name
// (date[], timestamp[], jsonb[]), bytes items (bytea[]), and an Avro
// decimal field and array.
const dbzAvroArraySchema = `{"type":"record","name":"Envelope","namespace":"srv.public.arr","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
   {"name":"id","type":"long"},
   {"name":"ds","type":["null",{"type":"array","items":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}]}],"default":null},
   {"name":"tss","type":["null",{"type":"array","items":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}]}],"default":null},
   {"name":"docs","type":["null",{"type":"array","items":["null",{"type":"string","connect.version":1,"connect.name":"io.debezium.data.Json"}]}],"default":null},
   {"name":"blobs","type":["null",{"type":"array","items":["null","bytes"]}],"default":null},
   {"name":"n","type":["null",{"type":"bytes","scale":2,"precision":10,"logicalType":"decimal"}],"default":null},
   {"name":"ns","type":["null",{"type":"array","items":["null",{"type":"bytes","scale":2,"precision":10,"logicalType":"decimal"}]}],"default":null}
 ]}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"op","type":"string"}]}`

func TestAvroConnectArrays(t *testing.T) {
	cols := []Column{{"id", "id"}, {"ds", "ds"}, {"tss", "tss"}, {"docs", "docs"}, {"blobs", "blobs"}, {"n", "n"}, {"ns", "ns"}}
	arr := func(elem string) colType {
		return colType{name: elem + "[]", base: elem + "[]", full: elem + "[]", mod: -1}
	}
	types := []colType{plainType("bigint"), arr("date"), arr("timestamp without time zone"), arr("jsonb"), arr("bytea"), plainType("integer"), arr("integer")}
	row := map[string]any{"id": int64(7), "ds": []any{int32(-1), nil, int32(19723)}, "tss": []any{int64(1704067200123456)},
		"docs": []any{`{"a":1}`, `[2]`}, "blobs": []any{[]byte{0, 0xff}, nil}, "n": "-3.00", "ns": []any{"1.00", "-2.00"}}
	for _, tc := range []struct {
		name    string
		n, ns   any
		want    []any
		wantErr string
	}{
		{name: "whole decimals", want: []any{"7", `{"1969-12-31",NULL,"2024-01-01"}`, `{"2024-01-01T00:00:00.123456"}`,
			`{"{\"a\":1}","[2]"}`, `{"\\x00ff",NULL}`, "-3", `{"1","-2"}`}},
		{name: "a fraction into integer", n: "-3.25", wantErr: `field "n" (logical type avro decimal): a integer column cannot hold the fraction of -3.25`},
		{name: "a fraction into integer[]", ns: []any{"1.50"}, wantErr: `field "ns[0]" (logical type avro decimal): a integer column cannot hold the fraction of 1.50`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) {
				c.InputFormat = serde.Avro
				c.InputCodec = serde.Config{Schema: dbzAvroArraySchema}
				c.EventID, c.Columns, c.Mode, c.Envelope = "id", cols, topology.ModeUpsert, topology.EnvelopeDebezium
			})
			s.types = types
			r := maps.Clone(row)
			if tc.n != nil {
				r["n"] = tc.n
			}
			if tc.ns != nil {
				r["ns"] = tc.ns
			}
			o, ok, err := s.toOp(avroRecord(t, dbzAvroArraySchema, map[string]any{"before": nil, "after": r, "op": "c"}))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("toOp: %v, %v", ok, err)
			}
			for i, w := range tc.want {
				if o.row[i] != w {
					t.Errorf("column %s: %v; want %v", cols[i].Name, o.row[i], w)
				}
			}
		})
	}
}
