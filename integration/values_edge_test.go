//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// Edge values of JSON (see the README's "Values: exact on every path"):
// numbers past a double's range or precision, lone surrogates, escapes,
// duplicate keys, odd white space, run through every path on the real
// broker and Postgres: records written with kcat, read back with kcat
// (read_committed) and psql-equivalent queries.

// edgeValueIn holds the inputs of TestEdgeValuesEveryPath: key → the
// exact value bytes. Each record has at most the fields event_id and f, so
// that the Avro path (schema edgeUnionSchema) can hold it.
var edgeValueIn = map[string]string{
	"n01": `{"event_id":"n01","f":0.1e1}`,
	"n02": `{"event_id":"n02","f":-0}`,
	"n05": `{"event_id":"n05","f":4.9e-324}`,
	"n06": `{"event_id":"n06","f":2e-324}`,
	"n07": `{"event_id":"n07","f":18446744073709551616}`,
	"n10": `{"event_id":"n10","f":012}`,
	"n15": `{"event_id":"n15","f":-0.0e-0}`,
	"n25": `{"event_id":"n25","f":1e0000000000000000000001}`,
	"n26": `{"event_id":"n26","f":0.` + strings.Repeat("0", 400) + `1}`,
	"s01": `{"event_id":"s01","f":"\u0000"}`,
	"s04": `{"event_id":"s04","f":"\udfff"}`,
	"s06": `{"event_id":"s06","f":"\ud834\udd1e"}`,
	"s08": `{"event_id":"s08","f":"\/\/"}`,
	"s14": "{\"event_id\":\"s14\",\"f\":\"\u2028\"}",
	"s19": `{"event_id":"s19","\u0066":1}`,
	"x04": `{"event_id":"x04","f":1,"f":2}`,
	"x08": "{\r\n\t\"event_id\" : \"x08\",\n\t\"f\" : 2.50\n}",
	"x09": "  {\"event_id\":\"x09\",\"f\":1}  \n ",
	"x12": `{"event_id":"x12","f":1} {"a":2}`,
	"x16": `{"event_id":"x16","f":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	"x19": `{"event_id":"x19","f":{"b":1,"a":2,"b":3}}`,
	// Duplicate keys: the last copy must not
	// win silently anywhere.
	"t20": `{"event_id":"t20","f":"x","event_id":"t20b"}`,
	"t01": `{"event_id":"t01","f":"a","\u0066":"b"}`,
	"t21": `{"event_id":"t21","f":[{"q":1,"q":2}]}`,
	// A list holding a value with no exact form: a step copying it
	// copies its bytes, as it does an object holding the same value.
	"t22": `{"event_id":"t22","f":[1, 1e400]}`,
}

const edgeUnionSchema = `{"type":"record","name":"R","namespace":"it.edge","fields":[
  {"name":"event_id","type":"string"},
  {"name":"f","type":["null","boolean","long","double","string",
    {"type":"array","items":["null","boolean","long","double","string"]},
    {"type":"map","values":["null","boolean","long","double","string"]}]}]}`

// pathOutcome is what one path must do with one input: write want, or
// dead-letter it with reason and an error containing err.
type pathOutcome struct {
	want        string
	reason, err string
}

func outWant(v string) pathOutcome          { return pathOutcome{want: v} }
func outDLQ(reason, err string) pathOutcome { return pathOutcome{reason: reason, err: err} }
func outSame(k string) pathOutcome          { return outWant(edgeValueIn[k]) }
func outAppend(k, field string) pathOutcome { // a new field at the end of the top-level object
	v := edgeValueIn[k]
	end := strings.LastIndexByte(v, '}')
	body := strings.TrimRight(v[:end], " \r\n\t")
	return outWant(strings.TrimSpace(body + field + v[len(body):end+1]))
}

// TestEdgeValuesEveryPath runs the edge values through a
// pass-through stage, a stage with one unrelated step, a filter-only stage,
// a stage reading f (set y from value.f), two chained stages (the second
// reads the y the first wrote), JSON → Avro → JSON, and a stage whose step
// writes computed doubles, and requires the README's outcome on each.
func TestEdgeValuesEveryPath(t *testing.T) {
	t.Parallel()
	in, cin := uniqueName("edge_in"), uniqueName("edge_cin")
	names := []string{"pass", "touch", "filter", "read", "chain1", "chain2", "toavro", "fromavro", "compute", "nanlist"}
	outT, dlqT := map[string]string{}, map[string]string{}
	topics := map[string]int{in: 1, cin: 1}
	for _, n := range names {
		outT[n], dlqT[n] = uniqueName("edge_"+n+"_out"), uniqueName("edge_"+n+"_dlq")
		topics[outT[n]], topics[dlqT[n]] = 1, 1
	}
	schema := schemaFile(t, "union.avsc", edgeUnionSchema)
	stage := func(name, input, inFmt, outFmt, steps string) string {
		s := fmt.Sprintf("  - name: %s\n    input: { topic: %s, format: %s }\n    output: { topic: %s, format: %s }\n    dead_letter: { topic: %s }\n    commit: { interval: 100ms }\n",
			uniqueName("edge_"+name), input, inFmt, outT[name], outFmt, dlqT[name])
		if steps != "" {
			s += "    transform:\n" + steps
		}
		return s
	}
	topo := avroTopology(t, topics,
		stage("pass", in, "json", "json", "")+
			stage("touch", in, "json", "json", "      - set: { touched: 'true' }\n")+
			stage("filter", in, "json", "json", "      - filter: 'true'\n      - key: 'string(offset)'\n")+
			stage("read", in, "json", "json", "      - set: { y: 'value.f' }\n")+
			stage("chain1", in, "json", "json", "      - set: { y: 'value.f' }\n")+
			stage("chain2", outT["chain1"], "json", "json", "      - set: { z: 'value.y' }\n")+
			stage("toavro", in, "json", "avro, schema: "+schema, "")+
			stage("fromavro", outT["toavro"], "avro, schema: "+schema, "json", "")+
			stage("compute", cin, "json", "json",
				"      - set: { a: '0.1 + 0.2', nz: '-1.0 * 0.0', d3: '6.0 / 2.0', e21: '1e21 * 1.0', e7: '1e-7 * 1.0', dbl: 'double(value.i)', u: '18446744073709551615u', l: '[1.0, -0.0, 2.5e-8]', m: '{\"k\": 1e100 * 1.0}' }\n")+
			stage("nanlist", cin, "json", "json", "      - set: { o: '[1.0, 0.0 / 0.0]' }\n"))
	exactlyCmd(t, "validate", topo)
	exactlyCmd(t, "topics", "create", topo)
	for k, v := range edgeValueIn {
		kcatProduceFile(t, in, k, []byte(v))
	}
	kcatProduce(t, cin, [][]byte{[]byte(`c1|{"event_id":"c1","i":2}`)})

	const (
		syntax0   = "syntax error: invalid character '1' after object key:value pair"
		trailing  = "syntax error: data after the first JSON value"
		tooDeep   = "exceeded max depth"
		underflow = `field "f": number 2e-324 underflows to zero as a double`
		beyond    = `field "f": integer 18446744073709551616 is beyond the range of a 64-bit integer (int64)`
		surrogate = `field "f": string has a lone surrogate \udfff, which is not text`
	)
	bad := map[string]pathOutcome{"n10": outDLQ(deadletter.ReasonDecode, syntax0), "x12": outDLQ(deadletter.ReasonDecode, trailing), "x16": outDLQ(deadletter.ReasonDecode, tooDeep)}
	want := map[string]map[string]pathOutcome{"pass": {}, "touch": {}, "filter": {}, "read": {}, "chain2": {}, "fromavro": {}}
	for k := range edgeValueIn {
		if o, ok := bad[k]; ok { // invalid JSON: refused alike on every path
			for _, p := range []string{"pass", "touch", "filter", "read", "chain1", "toavro"} {
				if want[p] == nil {
					want[p] = map[string]pathOutcome{}
				}
				want[p][k] = o
			}
			continue
		}
		want["pass"][k] = outSame(k)
		want["filter"][k] = outSame(k)
		want["touch"][k] = outAppend(k, `,"touched":true`)
	}
	// Duplicate keys in the top-level object: every path that reads it
	// (a step, JSON → Avro) refuses it naming the key; pass-through and a
	// step that reads nothing copy it as it came.
	dupTop := map[string]string{
		"x04": `field "f": duplicate key "f" in object`,
		"t20": `field "event_id": duplicate key "event_id" in object`,
		"t01": `field "f": duplicate key "f" in object (written "f" and "\u0066")`,
	}
	for k, e := range dupTop {
		delete(want["touch"], k)
		want["touch"] = mergeOutcome(want["touch"], k, outDLQ(deadletter.ReasonTransform, e))
		want["read"] = mergeOutcome(want["read"], k, outDLQ(deadletter.ReasonTransform, "y: "+e))
		want["chain1"] = mergeOutcome(want["chain1"], k, outDLQ(deadletter.ReasonTransform, "y: "+e))
		want["toavro"] = mergeOutcome(want["toavro"], k, outDLQ(deadletter.ReasonDecode, e))
	}
	// Duplicates in a nested object: JSON → Avro decodes it and refuses
	// it; a step that copies the value whole copies its bytes.
	want["toavro"] = mergeOutcome(want["toavro"], "x19", outDLQ(deadletter.ReasonDecode, `field "f.b": duplicate key "b" in object`))
	want["toavro"] = mergeOutcome(want["toavro"], "t21", outDLQ(deadletter.ReasonDecode, `field "f[0].q": duplicate key "q" in object`))
	// A step that reads f: what has no exact form is dead-lettered naming
	// f; a number that the step only selects (y: value.f) keeps its text,
	// as in a key or a header (through its double,
	// 12345678901234567890.12 would lose digits), and a string is its text.
	readY := map[string]string{
		"n01": "0.1e1", "n02": "-0", "n05": "4.9e-324", "n15": "-0.0e-0", "n25": "1e0000000000000000000001", "s01": `"\u0000"`, "s06": "\"\U0001D11E\"",
		"s08": `"//"`, "s14": `"\u2028"`, "s19": "1", "x08": "2.50", "x09": "1", "x19": `{"b":1,"a":2,"b":3}`,
		"t21": `[{"q":1,"q":2}]`, "t22": `[1, 1e400]`,
	}
	for k, y := range readY {
		want["read"][k] = outAppend(k, `,"y":`+y)
		want["chain2"][k] = outAppend(k, `,"y":`+y+`,"z":`+y)
	}
	for k, e := range map[string]string{"n06": underflow, "n07": beyond, "n26": `field "f": number 0.00000000000000000000000000000000000000... underflows to zero as a double`, "s04": surrogate} {
		want["read"][k] = outDLQ(deadletter.ReasonTransform, "y: "+e)
		want["chain1"] = mergeOutcome(want["chain1"], k, outDLQ(deadletter.ReasonTransform, "y: "+e))
	}
	// JSON → Avro → JSON: the union takes the first branch the value fits;
	// Avro → JSON writes a double with a point, the fields in schema order.
	for k, f := range map[string]string{
		"n01": "1.0", "n02": "0", "n05": "5e-324", "n15": "-0.0", "n25": "10.0", "s01": `"\u0000"`,
		"s06": "\"\U0001D11E\"", "s08": `"//"`, "s14": `"\u2028"`, "s19": "1", "x08": "2.5", "x09": "1",
	} {
		want["fromavro"][k] = outWant(fmt.Sprintf(`{"event_id":%q,"f":%s}`, k, f))
	}
	for k, o := range map[string]pathOutcome{
		// A number with no exact reading as a double has none in any
		// branch: the union names that reason, in a transform's words.
		"n06": outDLQ(deadletter.ReasonEncode, underflow),
		"n26": outDLQ(deadletter.ReasonEncode, `field "f": number 0.00000000000000000000000000000000000000... underflows to zero as a double`),
		"t22": outDLQ(deadletter.ReasonEncode, `field "f[1]": number 1e400 is beyond the range of a double`),
		"s04": outDLQ(deadletter.ReasonDecode, surrogate),
		// An integer beyond int64 is refused by JSON → Avro as by every
		// reader of it, though the union's double would hold 2^64.
		"n07": outDLQ(deadletter.ReasonEncode, beyond),
	} {
		want["toavro"] = mergeOutcome(want["toavro"], k, o)
	}
	want["compute"] = map[string]pathOutcome{"c1": outWant(`{"event_id":"c1","i":2,"a":0.30000000000000004,"d3":3.0,"dbl":2.0,"e21":1e+21,"e7":1e-7,"l":[1.0,-0.0,2.5e-8],"m":{"k":1e+100},"nz":-0.0,"u":18446744073709551615}`)}
	want["nanlist"] = map[string]pathOutcome{"c1": outDLQ(deadletter.ReasonTransform, `field "o[1]": NaN cannot be written as JSON`)}

	// Split each path's expectations into its output and dead-letter topics.
	expOut, expDLQ := map[string]map[string]string{}, map[string]map[string]deadLetter{}
	for p, m := range want {
		for k, o := range m {
			if o.reason == "" {
				if expOut[p] == nil {
					expOut[p] = map[string]string{}
				}
				expOut[p][k] = o.want
			} else {
				if expDLQ[p] == nil {
					expDLQ[p] = map[string]deadLetter{}
				}
				expDLQ[p][k] = deadLetter{o.reason, o.err}
			}
		}
	}
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "a1")
	eventually(t, 2*time.Minute, func() bool {
		for path, m := range expOut {
			if len(kcatReadJSON(t, outT[path])) < len(m) {
				return false
			}
		}
		for path, m := range expDLQ {
			if len(kcatReadJSON(t, dlqT[path])) < len(m) {
				return false
			}
		}
		return true
	}, func() string { return "outputs and dead letters of every path" })
	p.stop()

	for _, path := range names {
		t.Run(path, func(t *testing.T) {
			if w, ok := expOut[path]; ok {
				got := map[string]string{}
				for _, r := range kcatReadJSON(t, outT[path]) {
					got[r.Key] = r.Payload
				}
				if path == "filter" { // keyed by offset: compare the set of values
					vals := map[string]bool{}
					for _, v := range got {
						vals[v] = true
					}
					for k, v := range w {
						if !vals[v] {
							t.Errorf("%s: %s missing or changed: want %q", path, k, v)
						}
					}
				} else {
					for k, v := range w {
						if got[k] != v {
							t.Errorf("%s: %s:\n got %q\nwant %q", path, k, got[k], v)
						}
					}
				}
				if len(got) != len(w) {
					t.Errorf("%s: %d records, want %d", path, len(got), len(w))
				}
			}
			if w, ok := expDLQ[path]; ok {
				checkValueDeadLetters(t, dlqT[path], w)
			}
		})
	}
}

func mergeOutcome(m map[string]pathOutcome, k string, o pathOutcome) map[string]pathOutcome {
	if m == nil {
		m = map[string]pathOutcome{}
	}
	m[k] = o
	return m
}

// TestEdgeValuesSinkTypedColumns loads values into typed columns that
// cannot hold them exactly. Postgres itself casts them quietly: numeric
// with a scale rounds (1.234 → 1.23, 0.5 → 1), real and double precision
// round integers past 2^24 and 2^53, timestamp drops an explicit offset,
// date drops the time, varchar(n) trims trailing spaces. GUIDE §6 and the
// README ("a number goes to Postgres as its text, which casts it exactly
// or refuses it") say each must be a dead letter whose reason names the
// field, never a row with another value; the same 1.234 into an Avro
// decimal of scale 2 and 9007199254740993 into an Avro double are refused.
// Values that fit exactly are loaded as they are.
func TestEdgeValuesSinkTypedColumns(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "edge_sink", "{ event_id: event_id, n102: n102, n50: n50, r: r, d: d, ts: ts, dt: dt, vc: vc, tx: tx }",
		"event_id text PRIMARY KEY, n102 numeric(10,2), n50 numeric(5,0), r real, d double precision, ts timestamp, dt date, vc varchar(3), tx text")
	// key → field, its JSON value, and for a good one the column's text.
	good := map[string]typedCell{
		"g1": {"n102", "1.23", "1.23"},
		"g2": {"d", "2.0", "2"},
		"g3": {"ts", `"2024-01-01T00:00:00"`, "2024-01-01 00:00:00"},
		"g4": {"vc", `"abc"`, "abc"},
		"g5": {"r", "16777216", "1.6777216e+07"},
		"g6": {"dt", `"2024-02-29"`, "2024-02-29"},
	}
	bad := map[string]typedCell{
		"b1": {"n102", "1.234", ""},                                // rounded to 1.23 by the scale
		"b2": {"n50", "0.5", ""},                                   // rounded to 1
		"b3": {"r", "16777217", ""},                                // real holds 16777216
		"b4": {"d", "9007199254740993", ""},                        // double holds ...992; Avro refuses it
		"b5": {"ts", `"2024-01-01T00:00:00+05:00"`, ""},            // the offset is dropped: 5 h off
		"b6": {"dt", `"2024-01-01T23:30:00-05:00"`, ""},            // the time and zone are dropped
		"b7": {"vc", `"abc  "`, ""},                                // trailing spaces trimmed to fit
		"b8": {"d", "1e400", ""},                                   // refused by Postgres; the reason must name d
		"b9": {"tx", `"nul\u0000"`, ""},                            // refused; the reason names tx, not an internal "column c1"
		"bA": {"n102", "1.005", ""},                                // rounded to 1.01
		"bB": {"ts", `"2024-01-01 00:00:00 America/New_York"`, ""}, // zone name dropped
	}
	stored, dead := loadTypedCells(t, pool, s, topo, "coalesce(n102::text, n50::text, r::text, d::text, ts::text, dt::text, vc::text, tx)", good, bad)
	checkStoredCells(t, stored, dead, good)
	checkRefusedCells(t, stored, dead, bad, "")
}
