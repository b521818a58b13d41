//go:build integration

package integration

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// The README's value rules on the real broker, with one input of each kind:
// written with kcat, read back with kcat (read_committed). Every path gets
// the same input and must agree: an untouched field keeps its bytes, a
// number's type follows its text in every stage, and a value with no exact
// form is dead-lettered with a reason that names the field, when (and
// only when) something reads it.

// valueStage is one stage of TestValuesOnEveryPath: its output and
// dead-letter topics.
type valueStage struct{ out, dlq string }

func TestValuesOnEveryPath(t *testing.T) {
	t.Parallel()
	in, chainIn, avroIn, avroRaw := uniqueName("vals_in"), uniqueName("vals_chain"), uniqueName("vals_avro_in"), uniqueName("vals_avro_raw")
	avroMid := uniqueName("vals_avro_mid")
	st := map[string]valueStage{}
	for _, name := range []string{"pass", "touch", "mul1", "mul2", "nan", "toavro", "fromavro", "rawavro"} {
		st[name] = valueStage{out: uniqueName("vals_" + name + "_out"), dlq: uniqueName("vals_" + name + "_dlq")}
	}
	st["toavro"] = valueStage{out: avroMid, dlq: st["toavro"].dlq}
	topics := map[string]int{in: 1, chainIn: 1, avroIn: 1, avroRaw: 1}
	for _, s := range st {
		topics[s.out], topics[s.dlq] = 1, 1
	}
	schema := schemaFile(t, "nums.avsc", valuesSchema)
	stage := func(name, input, inFormat, outFormat, extra string) string {
		return fmt.Sprintf("  - name: %s\n    input: { topic: %s, format: %s }\n    output: { topic: %s, format: %s }\n    dead_letter: { topic: %s }\n    commit: { interval: 100ms }\n%s",
			uniqueName("vals_"+name), input, inFormat, st[name].out, outFormat, st[name].dlq, extra)
	}
	avroOut := func(name, input, inFormat string) string {
		return fmt.Sprintf("  - name: %s\n    input: { topic: %s, format: %s%s }\n    output: { topic: %s, format: avro, schema: %s }\n    dead_letter: { topic: %s }\n    commit: { interval: 100ms }\n",
			uniqueName("vals_"+name), input, inFormat, schemaOf(inFormat, schema), st[name].out, schema, st[name].dlq)
	}
	const yStep = "    transform:\n      - set: { y: 'value.f * 1.5' }\n"
	topo := avroTopology(t, topics, stage("pass", in, "json", "json", "    key: event_id\n")+
		stage("touch", in, "json", "json", "    key: event_id\n    transform:\n      - set: { touched: 'true' }\n")+
		stage("mul1", chainIn, "json", "json", yStep)+
		stage("mul2", st["mul1"].out, "json", "json", yStep)+
		stage("nan", chainIn, "json", "json", "    transform:\n      - set: { inf: 'double(value.f) / 0.0', nan: '0.0 / 0.0' }\n")+
		avroOut("toavro", avroIn, "json")+
		fmt.Sprintf("  - name: %s\n    input: { topic: %s, format: avro, schema: %s }\n    output: { topic: %s, format: json }\n    dead_letter: { topic: %s }\n    commit: { interval: 100ms }\n",
			uniqueName("vals_fromavro"), avroMid, schema, st["fromavro"].out, st["fromavro"].dlq)+
		fmt.Sprintf("  - name: %s\n    input: { topic: %s, format: avro, schema: %s }\n    output: { topic: %s, format: json }\n    dead_letter: { topic: %s }\n    commit: { interval: 100ms }\n",
			uniqueName("vals_rawavro"), avroRaw, schema, st["rawavro"].out, st["rawavro"].dlq))
	exactlyCmd(t, "validate", topo)
	exactlyCmd(t, "topics", "create", topo)

	// The main input: every value kind, through pass-through
	// and a stage with one unrelated step.
	plain := map[string]string{
		"n1": `{"event_id":"n1","f":2.0,"g":3.60,"e":1E2,"z":-0.0,"i":-0}`,
		"t1": `{"event_id":"t1","tiny":1e-400}`,
		"h1": `{"event_id":"h1","huge":1e400,"neg":-1E+400}`,
		"s1": `{"event_id":"s1","name":"\ud800x","note":"\udc00"}`,
		"b1": `{"event_id":"b1","id":123456789012345678901234567890,"u":18446744073709551615}`,
		"w1": `{ "event_id" : "w1" ,"a":[1, 2.50, {"b" : null}] }`,
		"e1": `{"event_id":"e1","s":"tab\tquote\"slash\\/\u00e9\ud83d\ude00\u2028","sub":{"x":1.0e0}}`,
		"d3": `{"event_id":"d3","n":{"dup":1,"dup":2},"l":[{"q":1,"\u0071":2}]}`, // duplicates that nothing reads
	}
	var lines [][]byte
	for k, v := range plain {
		lines = append(lines, []byte(k+"|"+v))
	}
	lines = append(lines, []byte(`k1|{"event_id":"\udc00k","n":1}`)) // a key field that is not text
	// Duplicate keys in the top-level object, which the key field reads.
	lines = append(lines, []byte(`d1|{"event_id":"d1","event_id":"d1","dup":1,"dup":2}`), []byte(`d2|{"event_id":"d2","s":"a","\u0073":"b"}`))
	kcatProduce(t, in, lines)
	kcatProduce(t, chainIn, [][]byte{
		[]byte(`c1|{"event_id":"c1","f":2.0}`),
		[]byte(`c2|{"event_id":"c2","f":3}`),
		[]byte(`c3|{"event_id":"c3","f":1e-400}`),
	})
	avroGood := `{"event_id":"a1","d":2.0,"f":0.1,"l":9007199254740993,"i":-5,"s":"\u00e9"}`
	avroBad := map[string]string{ // key -> value; each must be refused naming the field
		"a2": `{"event_id":"a2","d":1e400,"f":0.1,"l":1,"i":1,"s":"x"}`,
		"a3": `{"event_id":"a3","d":1.0,"f":0.1,"l":1,"i":2.0,"s":"x"}`,
		"a4": `{"event_id":"a4","d":1.0,"f":0.1,"l":1,"i":1,"s":"\udc00"}`,
		"a5": `{"event_id":"a5","d":1.0,"f":0.1,"l":9223372036854775808,"i":1,"s":"x"}`,
		"a6": `{"event_id":"a6","d":1e-400,"f":0.1,"l":1,"i":1,"s":"x"}`,
		"a7": `{"event_id":"a7","d":9007199254740993,"f":0.1,"l":1,"i":1,"s":"x"}`,
		"a8": `{"event_id":"a8","d":9223372036854775808,"f":0.1,"l":1,"i":1,"s":"x"}`,
		"a9": `{"event_id":"a9","d":1.0,"f":18446744073709551616,"l":1,"i":1,"s":"x"}`,
		"aa": `{"event_id":"aa","d":1.0,"f":16777217,"l":1,"i":1,"s":"x"}`,
	}
	avroLines := [][]byte{[]byte("a1|" + avroGood)}
	for k, v := range avroBad {
		avroLines = append(avroLines, []byte(k+"|"+v))
	}
	kcatProduce(t, avroIn, avroLines)
	codec := mustCodec(t, valuesSchema)
	for key, d := range map[string]float64{"r1": 2.0, "r2": math.NaN(), "r3": math.Inf(-1)} {
		bin, err := codec.BinaryFromNative(nil, map[string]any{"event_id": key, "d": d, "f": float32(0.5), "l": int64(1), "i": int32(1), "s": "x"})
		if err != nil {
			t.Fatal(err)
		}
		kcatProduceFile(t, avroRaw, key, bin)
	}

	p := start(t, nil, "run", "--topology", topo, "--instance-id", "v1")
	want := map[string]int{ // topic -> records
		st["pass"].out: len(plain), st["pass"].dlq: 3, st["touch"].out: len(plain), st["touch"].dlq: 3,
		st["mul2"].out: 1, st["mul1"].dlq: 2, st["nan"].dlq: 3,
		st["fromavro"].out: 1, st["toavro"].dlq: len(avroBad), st["rawavro"].out: 1, st["rawavro"].dlq: 2,
	}
	eventually(t, 2*time.Minute, func() bool {
		for topic, n := range want {
			if kcatCount(t, topic) < n {
				return false
			}
		}
		return true
	}, func() string {
		var b strings.Builder
		for topic, n := range want {
			fmt.Fprintf(&b, "%s %d/%d; ", topic, kcatCount(t, topic), n)
		}
		return b.String()
	})
	p.stop()

	// Pass-through: byte for byte. One unrelated step: byte for byte but
	// for the new field at the end.
	checkExactValues(t, st["pass"].out, plain)
	touched := map[string]string{}
	for k, v := range plain {
		end := strings.LastIndexByte(v, '}')
		body := strings.TrimRight(v[:end], " ")
		touched[k] = body + `,"touched":true` + v[len(body):]
	}
	checkExactValues(t, st["touch"].out, touched)
	for s, dupReason := range map[string]string{"pass": deadletter.ReasonKey, "touch": deadletter.ReasonTransform} {
		checkValueDeadLetters(t, st[s].dlq, map[string]deadLetter{
			"k1": {deadletter.ReasonKey, `field "event_id": string has a lone surrogate \udc00, which is not text`},
			"d1": {dupReason, `field "event_id": duplicate key "event_id" in object`},
			"d2": {dupReason, `field "s": duplicate key "s" in object (written "s" and "\u0073")`},
		})
	}

	// A double is a double in stage 1 and stage 2.
	checkExactValues(t, st["mul2"].out, map[string]string{"c1": `{"event_id":"c1","f":2.0,"y":3.0}`})
	checkValueDeadLetters(t, st["mul1"].dlq, map[string]deadLetter{
		"c2": {deadletter.ReasonTransform, "y: no such overload"},
		"c3": {deadletter.ReasonTransform, `y: field "f": number 1e-400 underflows to zero as a double`},
	})
	checkValueDeadLetters(t, st["nan"].dlq, map[string]deadLetter{
		"c1": {deadletter.ReasonTransform, `field "inf": +Inf cannot be written as JSON`},
		"c2": {deadletter.ReasonTransform, `field "inf": +Inf cannot be written as JSON`},
		"c3": {deadletter.ReasonTransform, `inf: field "f": number 1e-400 underflows to zero as a double`},
	})

	// JSON -> Avro -> JSON keeps every value, and refuses what Avro
	// cannot hold; Avro -> JSON refuses NaN and -Inf.
	checkExactValues(t, st["fromavro"].out, map[string]string{"a1": `{"d":2.0,"event_id":"a1","f":0.1,"i":-5,"l":9007199254740993,"s":"é"}`})
	checkValueDeadLetters(t, st["toavro"].dlq, map[string]deadLetter{
		// No exact reading as a double at all: named as a transform names
		// it (the integer beyond int64 below likewise).
		"a2": {deadletter.ReasonEncode, `field "d": number 1e400 is beyond the range of a double`},
		"a3": {deadletter.ReasonEncode, "i: unsupported value: number for Avro int: 2.0 is a double by its text, not an integer"},
		"a4": {deadletter.ReasonDecode, `field "s": string has a lone surrogate \udc00, which is not text`},
		"a5": {deadletter.ReasonEncode, `field "l": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		"a6": {deadletter.ReasonEncode, `field "d": number 1e-400 underflows to zero as a double`},
		"a7": {deadletter.ReasonEncode, "d: unsupported value: number for Avro double: integer 9007199254740993 is not exactly a double"},
		"a8": {deadletter.ReasonEncode, `field "d": integer 9223372036854775808 is beyond the range of a 64-bit integer (int64)`},
		"a9": {deadletter.ReasonEncode, `field "f": integer 18446744073709551616 is beyond the range of a 64-bit integer (int64)`},
		"aa": {deadletter.ReasonEncode, "f: unsupported value: number for Avro float: integer 16777217 is not exactly a float"},
	})
	checkExactValues(t, st["rawavro"].out, map[string]string{"r1": `{"d":2.0,"event_id":"r1","f":0.5,"i":1,"l":1,"s":"x"}`})
	checkValueDeadLetters(t, st["rawavro"].dlq, map[string]deadLetter{
		"r2": {deadletter.ReasonEncode, `field "d": NaN cannot be written as JSON`},
		"r3": {deadletter.ReasonEncode, `field "d": -Inf cannot be written as JSON`},
	})
}

const valuesSchema = `{"type":"record","name":"Nums","namespace":"it.exactly","fields":[
  {"name":"event_id","type":"string"},
  {"name":"d","type":"double"},
  {"name":"f","type":"float"},
  {"name":"l","type":"long"},
  {"name":"i","type":"int"},
  {"name":"s","type":"string"}
]}`

func schemaOf(format, schema string) string {
	if format == "avro" {
		return ", schema: " + schema
	}
	return ""
}

// deadLetter is the reason and (part of) the error a dead letter must carry.
type deadLetter struct{ reason, err string }

// checkValueDeadLetters requires that topic holds exactly the dead letters of
// want, by key, each with its reason and an error containing want's.
func checkValueDeadLetters(t *testing.T, topic string, want map[string]deadLetter) {
	t.Helper()
	recs := kcatReadJSON(t, topic)
	if len(recs) != len(want) {
		t.Errorf("%s: %d dead letters, want %d", topic, len(recs), len(want))
	}
	for _, r := range recs {
		w, ok := want[r.Key]
		if !ok {
			t.Errorf("%s: unexpected dead letter %s: %v", topic, r.Key, r.Headers)
			continue
		}
		if got := r.Headers[deadletter.HeaderReason]; got != w.reason {
			t.Errorf("%s: %s: reason %q, want %q (error %q)", topic, r.Key, got, w.reason, r.Headers[deadletter.HeaderError])
		}
		if got := r.Headers[deadletter.HeaderError]; !strings.Contains(got, w.err) {
			t.Errorf("%s: %s: error\n %q\nwant it to contain\n %q", topic, r.Key, got, w.err)
		}
	}
}

// TestValuesSink loads the same kinds of values into Postgres: numbers go
// as their text, so a double precision column takes 2.0 and refuses
// 1e400 and 1e-400 (reason postgres); a mapped text field with a lone
// surrogate is reason decode, naming the field; a json column keeps the
// value's bytes, untouched fields included.
func TestValuesSink(t *testing.T) {
	t.Parallel()
	s, pool, topo := newTypedSink(t, "values", "{ event_id: event_id, f: f, note: note, body: $value }",
		"event_id text PRIMARY KEY, f double precision, note text, body json NOT NULL")
	good := map[string]string{
		"p1": `{"event_id":"p1","f":2.0,"note":"ok"}`,
		"p5": `{"event_id":"p5","f":-0.0,"note":"\ud83d\ude00","huge":1e400,"x":"\udc00","n":123456789012345678901234567890}`,
		"p9": `{"event_id":"p9","f":1.0,"note":"ok","x":{"a":1,"a":2}}`, // a nested object that is not mapped: as it came
	}
	bad := map[string]deadLetter{
		"p2": {deadletter.ReasonPostgres, "out of range for type double precision"},
		"p3": {deadletter.ReasonDecode, `field "note": string has a lone surrogate \udc00, which is not text`},
		"p4": {deadletter.ReasonPostgres, "out of range for type double precision"},
		"p6": {deadletter.ReasonPostgres, ""},
		"p7": {deadletter.ReasonDecode, `field "event_id": duplicate key "event_id" in object`},
		"p8": {deadletter.ReasonDecode, `field "note": duplicate key "note" in object (written "note" and "\u006eote")`},
	}
	lines := [][]byte{
		[]byte("p1|" + good["p1"]),
		[]byte(`p2|{"event_id":"p2","f":1e400,"note":"x"}`),
		[]byte(`p3|{"event_id":"p3","f":1.5,"note":"\udc00"}`),
		[]byte(`p4|{"event_id":"p4","f":1e-400}`),
		[]byte("p5|" + good["p5"]),
		[]byte(`p6|{"event_id":"p6","f":"2.0x"}`),
		[]byte(`p7|{"event_id":"p7","f":1.0,"event_id":"p7b"}`),
		[]byte(`p8|{"event_id":"p8","f":1.0,"note":"a","\u006eote":"b"}`),
		[]byte("p9|" + good["p9"]),
	}
	kcatProduce(t, s.in, lines)
	p := startSink(t, topo, "v1")
	eventually(t, time.Minute, func() bool {
		rows, _ := rowStats(t, pool, s.table())
		return rows >= len(good) && kcatCount(t, s.dlq) >= len(bad)
	}, func() string { return fmt.Sprintf("%d dead letters", kcatCount(t, s.dlq)) })
	p.stop()
	checkValueDeadLetters(t, s.dlq, bad)

	type row struct {
		f    float64
		note string
		body string
	}
	got := map[string]row{}
	rs, err := pool.Query(t.Context(), "SELECT event_id, f, note, body::text FROM "+s.table())
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id string
		var r row
		if err := rs.Scan(&id, &r.f, &r.note, &r.body); err != nil {
			t.Fatal(err)
		}
		got[id] = r
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]row{
		"p1": {2, "ok", good["p1"]},
		"p5": {math.Copysign(0, -1), "😀", good["p5"]},
		"p9": {1, "ok", good["p9"]},
	}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for id, w := range want {
		g := got[id]
		if math.Float64bits(g.f) != math.Float64bits(w.f) || g.note != w.note || g.body != w.body {
			t.Errorf("row %s = %+v, want %+v", id, g, w)
		}
	}
}
