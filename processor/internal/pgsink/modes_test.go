package pgsink

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/dlq"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// A change event without a schema is read by the sink's decimal,
// interval and time settings, which mirror the connector's modes; a value
// whose meaning the mode leaves open is a decode dead letter naming the
// field, the column type and the connector's option. A schema rules where
// there is one: the settings change nothing.
func TestChangeOpModes(t *testing.T) {
	event := func(v string) string { return `{"op":"c","after":{"id":1,"v":` + v + `}}` }
	// wrapped is the event with a schema whose field v is fs.
	wrapped := func(fs, v string) string {
		return `{"schema":{"type":"struct","fields":[{"field":"after","type":"struct","fields":[{"field":"id","type":"int32"},` + fs + `]}]},"payload":` + event(v) + `}`
	}
	numeric := colType{name: "numeric(10,3)", base: "numeric", full: "numeric(10,3)", mod: -1}
	timeOf := func(p int32) colType {
		return colType{name: "time without time zone", base: "time without time zone", full: "time without time zone", mod: p}
	}
	tsOf := func(p int32) colType {
		return colType{name: "timestamp without time zone", base: "timestamp without time zone", full: "timestamp without time zone", mod: p}
	}
	arrayOf := func(name string) colType {
		return colType{name: name + "[]", base: name + "[]", full: name + "[]", mod: -1}
	}
	for _, tc := range []struct {
		name    string
		set     func(*Config) // "" settings keep Debezium's defaults
		col     colType
		value   string
		want    any    // column v's staging text
		errWant string // a decode dead letter saying this
	}{
		// decimal.handling.mode
		{name: "precise text refused", col: numeric, value: event(`"1000"`),
			errWant: `field "v" into a numeric(10,3) column (decimal_handling precise, the connector's decimal.handling.mode): text "1000" is a decimal's unscaled bytes whose scale only the schema holds: needs schemas.enable=true, or decimal.handling.mode=string and decimal_handling: string`},
		{name: "precise text into money refused", col: plainType("money"), value: event(`"AQID"`), errWant: "decimal_handling precise"},
		{name: "precise text into double refused", col: plainType("double precision"), value: event(`"1000"`), errWant: "decimal_handling precise"},
		{name: "precise number", col: numeric, value: event(`12.50`), want: "12.50"},
		{name: "precise variable scale", col: plainType("numeric"), value: event(`{"scale":3,"value":"9lKs"}`), want: "-634.196"},
		{name: "precise variable scale bad", col: plainType("numeric"), value: event(`{"scale":3}`), errWant: "variable-scale decimal"},
		{name: "string", set: func(c *Config) { c.DecimalHandling = topology.DecimalString }, col: numeric, value: event(`"-2667.212"`), want: "-2667.212"},
		{name: "string NaN", set: func(c *Config) { c.DecimalHandling = topology.DecimalString }, col: numeric, value: event(`"NaN"`), want: "NaN"},
		{name: "string not a decimal", set: func(c *Config) { c.DecimalHandling = topology.DecimalString }, col: numeric, value: event(`"9lKs"`), errWant: `text "9lKs" is no decimal`},
		{name: "string object refused", set: func(c *Config) { c.DecimalHandling = topology.DecimalString }, col: numeric, value: event(`{"scale":3,"value":"9lKs"}`), errWant: "want a decimal"},
		{name: "double", set: func(c *Config) { c.DecimalHandling = topology.DecimalDouble }, col: plainType("double precision"), value: event(`-2667.212`), want: "-2667.212"},
		{name: "double text refused", set: func(c *Config) { c.DecimalHandling = topology.DecimalDouble }, col: numeric, value: event(`"1.5"`), errWant: `(decimal_handling double, the connector's decimal.handling.mode): want a JSON number, got text "1.5"`},
		{name: "double Infinity", set: func(c *Config) { c.DecimalHandling = topology.DecimalDouble }, col: plainType("double precision"), value: event(`"Infinity"`), want: "Infinity"},
		{name: "decimal array precise refused", col: arrayOf("numeric"), value: event(`[1,"AQID"]`), errWant: `field "v[1]" into a numeric column`},
		{name: "decimal array string", set: func(c *Config) { c.DecimalHandling = topology.DecimalString }, col: arrayOf("numeric"), value: event(`["1.5",null,["2"]]`), want: `{"1.5",NULL,{"2"}}`},
		{name: "text column untouched", col: plainType("text"), value: event(`"AQID"`), want: "AQID"},
		// interval.handling.mode
		{name: "interval microseconds", col: plainType("interval"), value: event(`93784000005`), want: "26:03:04.000005"},
		{name: "interval negative microseconds", col: plainType("interval"), value: event(`-1500000`), want: "-0:00:01.500000"},
		{name: "interval text in numeric mode", col: plainType("interval"), value: event(`"P1D"`),
			errWant: `field "v" into a interval column (interval_handling numeric, the connector's interval.handling.mode): want microseconds as a JSON number, got "P1D"`},
		{name: "interval fraction", col: plainType("interval"), value: event(`1.5`), errWant: "want whole microseconds"},
		{name: "interval ISO 8601", set: func(c *Config) { c.IntervalHandling = topology.IntervalString }, col: plainType("interval"), value: event(`"P1Y2M3DT4H5M6.78S"`), want: "P1Y2M3DT4H5M6.78S"},
		{name: "interval number in string mode", set: func(c *Config) { c.IntervalHandling = topology.IntervalString }, col: plainType("interval"), value: event(`5`), errWant: "want ISO 8601 text"},
		// time.precision.mode
		{name: "date days", col: plainType("date"), value: event(`19000`), want: "2022-01-08"},
		{name: "date before the epoch", col: plainType("date"), value: event(`-719162`), want: "0001-01-01"},
		{name: "date BC", col: plainType("date"), value: event(`-719163`), want: "0001-12-31 BC"},
		{name: "date text", col: plainType("date"), value: event(`"2022-01-08"`), want: "2022-01-08"},
		{name: "date isostring number", set: func(c *Config) { c.TimePrecision = topology.TimeISOString }, col: plainType("date"), value: event(`19000`), errWant: "(time_precision isostring, the connector's time.precision.mode): the connector writes ISO 8601 text"},
		{name: "time(3) adaptive ms", col: timeOf(3), value: event(`3723004`), want: "1:02:03.004000"},
		{name: "time adaptive us", col: timeOf(-1), value: event(`3723000004`), want: "1:02:03.000004"},
		{name: "time(3) adaptive_time_microseconds", set: func(c *Config) { c.TimePrecision = topology.TimeAdaptiveMicroseconds }, col: timeOf(3), value: event(`3723004000`), want: "1:02:03.004000"},
		{name: "time connect ms", set: func(c *Config) { c.TimePrecision = topology.TimeConnect }, col: timeOf(6), value: event(`3723004`), want: "1:02:03.004000"},
		{name: "time past a day", col: timeOf(6), value: event(`86400000001`), errWant: "is no time of day"},
		{name: "timestamp(3) adaptive ms", col: tsOf(3), value: event(`1700000000123`), want: "2023-11-14 22:13:20.123"},
		{name: "timestamp adaptive us", col: tsOf(-1), value: event(`1700000000123456`), want: "2023-11-14 22:13:20.123456"},
		{name: "timestamp before the epoch", col: tsOf(6), value: event(`-1`), want: "1969-12-31 23:59:59.999999"},
		{name: "timestamp connect ms", set: func(c *Config) { c.TimePrecision = topology.TimeConnect }, col: tsOf(6), value: event(`1700000000123`), want: "2023-11-14 22:13:20.123"},
		{name: "timestamptz number refused", col: plainType("timestamp with time zone"), value: event(`1700000000123`), errWant: "ISO 8601 text in every mode"},
		{name: "timestamptz text", col: plainType("timestamp with time zone"), value: event(`"2023-11-14T22:13:20.123Z"`), want: "2023-11-14T22:13:20.123Z"},
		{name: "date array", col: arrayOf("date"), value: event(`[19000,null,"2022-01-09"]`), want: `{"2022-01-08",NULL,"2022-01-09"}`},
		// A schema rules: the settings read nothing it types.
		{name: "schema decimal", col: numeric, value: wrapped(`{"field":"v","type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"3"}}`, `"9lKs"`), want: "-634.196"},
		{name: "schema plain string into numeric", col: numeric, value: wrapped(`{"field":"v","type":"string"}`, `"1000"`), want: "1000"},
		{name: "schema plain int64 into interval", col: plainType("interval"), value: wrapped(`{"field":"v","type":"int64"}`, `5`), want: "5"},
		{name: "schema MicroDuration", col: plainType("interval"), value: wrapped(`{"field":"v","type":"int64","name":"io.debezium.time.MicroDuration"}`, `93784000005`), want: "93784000005 microseconds"},
		// Rows without the envelope: no setting unless set.
		{name: "row without settings", set: func(c *Config) { c.Envelope = topology.EnvelopeNone }, col: plainType("interval"), value: `{"id":1,"v":5}`, want: "5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSink(t, func(c *Config) {
				c.EventID = "id"
				c.Columns = []Column{{"id", "id"}, {"v", "v"}}
				c.Mode = topology.ModeUpsert
				c.Envelope = topology.EnvelopeDebezium
				if tc.set != nil {
					tc.set(c)
				}
			})
			s.types = []colType{plainType("integer"), tc.col}
			o, ok, err := s.toOp(&kgo.Record{Topic: "in", Value: []byte(tc.value)})
			if tc.errWant != "" {
				var re *dlq.RecordError
				if !errors.As(err, &re) || re.Reason != deadletter.ReasonDecode || !strings.Contains(err.Error(), tc.errWant) {
					t.Fatalf("err = %v; want a decode dead letter with %q", err, tc.errWant)
				}
				return
			}
			if err != nil || !ok {
				t.Fatalf("toOp: %v, %v", ok, err)
			}
			if o.row[1] != tc.want {
				t.Fatalf("column v = %#v; want %#v", o.row[1], tc.want)
			}
		})
	}
}

// In Avro the schema types every field: the decimal, interval and time
// settings read nothing, whatever their mode.
func TestAvroChangeModes(t *testing.T) {
	for _, tc := range []struct {
		name, typ string
		col       colType
		v         any
		want      string
	}{
		{"string into numeric", "string", plainType("numeric"), "1000", "1000"},
		{"long into interval", "long", plainType("interval"), int64(5), "5"},
		{"string into interval", "string", plainType("interval"), "1 day", "1 day"},
		{"string into date", "string", plainType("date"), "2022-01-08", "2022-01-08"},
	} {
		for _, set := range []func(*Config){
			func(*Config) {},
			func(c *Config) {
				c.DecimalHandling, c.IntervalHandling, c.TimePrecision = topology.DecimalString, topology.IntervalString, topology.TimeISOString
			},
		} {
			t.Run(tc.name, func(t *testing.T) {
				schema := dbzAvroBinarySchema(tc.typ)
				s := newTestSink(t, func(c *Config) {
					c.InputFormat = serde.Avro
					c.InputCodec = serde.Config{Schema: schema}
					c.EventID = "id"
					c.Columns = []Column{{"id", "id"}, {"b", "b"}}
					c.Mode = topology.ModeUpsert
					c.Envelope = topology.EnvelopeDebezium
					set(c)
				})
				s.types = []colType{plainType("bigint"), tc.col}
				o, ok, err := s.toOp(avroRecord(t, schema, map[string]any{"before": nil, "after": map[string]any{"id": int64(1), "b": tc.v}, "op": "c"}))
				if err != nil || !ok || o.row[1] != tc.want {
					t.Fatalf("column b = %#v (%v, %v); want %q", o.row[1], ok, err, tc.want)
				}
			})
		}
	}
}
