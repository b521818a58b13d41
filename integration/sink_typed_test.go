//go:build integration

package integration

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// avroSinkTopology writes a one-sink topology reading s.in as Avro in the
// Confluent wire format from the real registry, with 1 partition, the
// columns map columns and the postgres lines extra; it creates the topics.
func avroSinkTopology(t testing.TB, s sinkSpec, columns, extra string) string {
	t.Helper()
	b := sinkYAMLHead(t, s, 1, columns)
	text := strings.Replace(b.String(), "format: json }", `format: avro, registry: { url: "${EXACTLY_REGISTRY_URL}" } }`, 1)
	text += extra + fmt.Sprintf("    commit: { interval: %s, max_records: %d }\n", s.interval, s.maxRecords)
	return writeSinkTopology(t, s, s.name+".yaml", text)
}

// columnTypes reads the columns of table and their types with psql, as
// "name type" in column order.
func columnTypes(t *testing.T, table string) []string {
	t.Helper()
	schema, name, _ := strings.Cut(table, ".")
	return psqlLines(t, fmt.Sprintf(`SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
WHERE a.attrelid = '%s.%s'::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, schema, name))
}

const typedSchema = `{"type":"record","name":"Typed","namespace":"it.typ17","fields":[
  {"name":"event_id","type":"string"},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
  {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":4}},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"day","type":{"type":"int","logicalType":"date"}},
  {"name":"n","type":"long"},
  {"name":"small","type":"int"},
  {"name":"ok","type":"boolean"},
  {"name":"d","type":"double"},
  {"name":"blob","type":"bytes"},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"tags","type":{"type":"array","items":"string"}}
]}`

// TestSinkAvroTypedColumns: Avro records from the registry into a table
// the sink creates, with amount declared numeric(12,2) and every other
// column's type derived from the schema (types: from_schema). The types
// and the values, read back with psql, are exact: a decimal's digits, a
// timestamp-millis to the millisecond, bytes as bytes.
func TestSinkAvroTypedColumns(t *testing.T) {
	reg := registryURL(t)
	s := newSinkSpec("typ17_typed")
	id := srRegister(t, reg, s.in+"-value", typedSchema)
	codec := mustCodec(t, typedSchema)
	topo := avroSinkTopology(t, s, `{ event_id: event_id, amount: { field: amount, type: "numeric(12,2)" }, price: price, at: at, day: day, n: n, small: small, ok: ok, d: d, blob: blob, note: note, tags: tags, tag_list: { field: tags, type: "text[]" }, body: $value }`,
		"      types: from_schema\n")
	at := time.Date(2024, 2, 29, 12, 34, 56, 789_000_000, time.UTC)
	var recs []*kgo.Record
	for i := range 3 {
		native := map[string]any{
			"event_id": "t-" + strconv.Itoa(i),
			"amount":   big.NewRat(int64(123456789012+i), 100), // 1234567890.12
			"price":    big.NewRat(15, 10000),                  // 0.0015
			"at":       at.Add(time.Duration(i) * time.Millisecond),
			"day":      at,
			"n":        int64(1) << 62,
			"small":    int32(-7),
			"ok":       i%2 == 0,
			"d":        0.1,
			"blob":     []byte{0, 1, 0xfe, 0xff},
			"note":     nil,
			"tags":     []any{"a", "b"},
		}
		if i == 1 {
			native["note"] = goavro.Union("string", "x\"y")
		}
		recs = append(recs, &kgo.Record{Key: []byte("t-" + strconv.Itoa(i)), Value: frame(t, id, codec, native)})
	}
	kgoProduce(t, s.in, recs)
	pool := pgPool(t)
	p := startSink(t, topo, "a1")
	waitSinkDone(t, pool, s, 3, 2*time.Minute)
	p.stop()

	wantTypes := []string{"event_id text", "amount numeric(12,2)", "price numeric(10,4)", "at timestamp with time zone", "day date",
		"n bigint", "small integer", "ok boolean", "d double precision", "blob bytea", "note text", "tags jsonb", "tag_list text[]", "body jsonb"}
	if got := columnTypes(t, s.table()); strings.Join(got, ",") != strings.Join(wantTypes, ",") {
		t.Fatalf("columns\n%v\nwant\n%v", got, wantTypes)
	}
	got := psqlLines(t, "SET TIME ZONE 'UTC'; SELECT concat_ws('|', event_id, amount, price, at, day, n, small, ok, d, encode(blob, 'hex'), coalesce(note, '<null>'), tags, tag_list, body->>'amount', body->>'at') FROM "+s.table()+" ORDER BY event_id")
	want := []string{
		`SET`,
		`t-0|1234567890.12|0.0015|2024-02-29 12:34:56.789+00|2024-02-29|4611686018427387904|-7|t|0.1|0001feff|<null>|["a", "b"]|{a,b}|1234567890.12|2024-02-29T12:34:56.789Z`,
		`t-1|1234567890.13|0.0015|2024-02-29 12:34:56.79+00|2024-02-29|4611686018427387904|-7|f|0.1|0001feff|x"y|["a", "b"]|{a,b}|1234567890.13|2024-02-29T12:34:56.79Z`,
		`t-2|1234567890.14|0.0015|2024-02-29 12:34:56.791+00|2024-02-29|4611686018427387904|-7|t|0.1|0001feff|<null>|["a", "b"]|{a,b}|1234567890.14|2024-02-29T12:34:56.791Z`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := kcatCount(t, s.dlq); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

const (
	evolveV1 = `{"type":"record","name":"Ev","namespace":"it.typ17","fields":[
  {"name":"event_id","type":"string"},
  {"name":"n","type":"long"}
]}`
	evolveV2 = `{"type":"record","name":"Ev","namespace":"it.typ17","fields":[
  {"name":"event_id","type":"string"},
  {"name":"n","type":"long"},
  {"name":"note","type":["null","string"],"default":null},
  {"name":"amount","type":["null",{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}],"default":null}
]}`
	evolveV3 = `{"type":"record","name":"Ev","namespace":"it.typ17","fields":[
  {"name":"event_id","type":"string"},
  {"name":"n","type":"string"}
]}`
)

// TestSinkAvroEvolution: a table created from schema v1 (event_id, n);
// then records of v2, which adds the nullable fields note and amount.
// The first sink run after v2 is killed at crash-before-db-commit@1, the
// commit of the batch that adds the columns: the table is left without
// them and the positions where v1 ended. Restarted, the sink adds both
// columns (text and numeric(12,2)) with that batch: v1 rows have NULL,
// v2 rows their values, nothing is dead-lettered. Then a v3 record whose
// n is a string, which the bigint column n cannot hold: the sink stops,
// naming the column and the schema ID, and stores nothing of it.
func TestSinkAvroEvolution(t *testing.T) {
	reg := registryURL(t)
	s := newSinkSpec("typ17_evolve")
	subject := s.in + "-value"
	id1 := srRegister(t, reg, subject, evolveV1)
	topo := avroSinkTopology(t, s, "{ event_id: event_id }", "      types: from_schema\n      auto_columns: true\n")
	pool := pgPool(t)
	produce := func(id int, schema string, from, n int, extra func(i int) map[string]any) {
		c := mustCodec(t, schema)
		var recs []*kgo.Record
		for i := from; i < from+n; i++ {
			native := map[string]any{"event_id": fmt.Sprintf("e-%03d", i), "n": int64(i)}
			for k, v := range extra(i) {
				native[k] = v
			}
			recs = append(recs, &kgo.Record{Value: frame(t, id, c, native)})
		}
		kgoProduce(t, s.in, recs)
	}
	produce(id1, evolveV1, 0, 20, func(int) map[string]any { return nil })
	p := startSink(t, topo, "a1")
	waitSinkDone(t, pool, s, 20, 2*time.Minute)
	p.stop()
	if got := columnTypes(t, s.table()); strings.Join(got, ",") != "event_id text,n bigint" {
		t.Fatalf("columns from v1: %v", got)
	}
	v1End := storedPositions(t, pool, s.positions(), s.in)

	id2 := srRegister(t, reg, subject, evolveV2)
	produce(id2, evolveV2, 20, 20, func(i int) map[string]any {
		return map[string]any{"note": goavro.Union("string", "note-"+strconv.Itoa(i)), "amount": goavro.Union("bytes.decimal", big.NewRat(int64(i)*100+5, 100))}
	})
	p = startSink(t, topo, "a1", failpointEnv+"="+crashBeforeDBCommit+"@1")
	_ = p.wait(2 * time.Minute)
	if !p.killedBySIGKILL() {
		t.Fatalf("sink did not die at %s@1: %v\n%s", crashBeforeDBCommit, p.err, tail(p.logs.String(), 40))
	}
	if got := columnTypes(t, s.table()); strings.Join(got, ",") != "event_id text,n bigint" {
		t.Fatalf("columns after the crash: %v, want v1's alone (the ADD COLUMN rolled back with its batch)", got)
	}
	if got := storedPositions(t, pool, s.positions(), s.in); fmt.Sprint(got) != fmt.Sprint(v1End) {
		t.Fatalf("positions after the crash %v, want v1's end %v", got, v1End)
	}
	if n, _ := rowStats(t, pool, s.table()); n != 20 {
		t.Fatalf("%d rows after the crash, want 20", n)
	}

	p = startSink(t, topo, "a1")
	waitSinkDone(t, pool, s, 40, 2*time.Minute)
	p.stop()
	if got := columnTypes(t, s.table()); strings.Join(got, ",") != "event_id text,n bigint,note text,amount numeric(12,2)" {
		t.Fatalf("columns after v2: %v", got)
	}
	rows := psqlLines(t, "SELECT concat_ws('|', event_id, n, coalesce(note, '<null>'), coalesce(amount::text, '<null>')) FROM "+s.table()+" ORDER BY event_id")
	for i, r := range rows {
		want := fmt.Sprintf("e-%03d|%d|<null>|<null>", i, i)
		if i >= 20 {
			want = fmt.Sprintf("e-%03d|%d|note-%d|%d.05", i, i, i, i)
		}
		if r != want {
			t.Fatalf("row %d %q, want %q", i, r, want)
		}
	}
	if n := kcatCount(t, s.dlq); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	if !positionsTableAtEnd(t, pool, s.positions(), s.in) {
		t.Fatalf("positions %v, want the ends %v", storedPositions(t, pool, s.positions(), s.in), committedEnds(t, s.in))
	}

	id3 := srRegister(t, reg, subject, evolveV3)
	c3 := mustCodec(t, evolveV3)
	kgoProduce(t, s.in, []*kgo.Record{{Value: frame(t, id3, c3, map[string]any{"event_id": "e-999", "n": "many"})}})
	p = startSink(t, topo, "a1")
	err := p.wait(2 * time.Minute)
	logs := p.logs.String()
	named := strings.Contains(logs, `column \"n\"`) || strings.Contains(logs, `column "n"`)
	if err == nil || !named || !strings.Contains(logs, "cannot hold field") || !strings.Contains(logs, fmt.Sprintf("schema id %d", id3)) {
		t.Fatalf("sink on an incompatible field: exit %v, want a stop naming column n and schema id %d\n%s", err, id3, tail(logs, 20))
	}
	if n, _ := rowStats(t, pool, s.table()); n != 40 {
		t.Fatalf("%d rows after the incompatible record, want 40", n)
	}
	t.Logf("schema ids v1 %d, v2 %d, v3 %d; stop: %s", id1, id2, id3, lastLine(logs, "schema id"))
}

func lastLine(logs, with string) string {
	lines := strings.Split(logs, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], with) {
			return lines[i]
		}
	}
	return ""
}

const (
	dbzValue    = `{"type":"record","name":"Value","namespace":"it.typ17.db.t","fields":[{"name":"id","type":"long"},{"name":"a","type":"string"}]}`
	dbzEnvelope = `{"type":"record","name":"Envelope","namespace":"it.typ17.db.t","fields":[
  {"name":"before","type":["null",` + dbzValue + `],"default":null},
  {"name":"after","type":["null","it.typ17.db.t.Value"],"default":null},
  {"name":"op","type":"string"},
  {"name":"ts_ms","type":["null","long"],"default":null}
]}`
)

// TestSinkDebeziumAvroChanges is TestSinkDebeziumChanges with the events
// in Debezium's Avro form (before and after nullable records of the row):
// c(id=1,a), u(id=1,b), d(id=1), the tombstone, c(id=2,c), u(id=2,d), then
// an event of an unknown op; killed around the third commit and
// restarted, the table ends as the one row 2|d and the bad event is one
// dead letter.
func TestSinkDebeziumAvroChanges(t *testing.T) {
	reg := registryURL(t)
	codec := mustCodec(t, dbzEnvelope)
	row := func(id int64, a string) any {
		return goavro.Union("it.typ17.db.t.Value", map[string]any{"id": id, "a": a})
	}
	type ev struct {
		key           string
		op            string
		before, after any
		tombstone     bool
	}
	evs := []ev{
		{key: `{"id":1}`, op: "c", after: row(1, "a")},
		{key: `{"id":1}`, op: "u", before: row(1, "a"), after: row(1, "b")},
		{key: `{"id":1}`, op: "d", before: row(1, "b")},
		{key: `{"id":1}`, tombstone: true},
		{key: `{"id":2}`, op: "c", after: row(2, "c")},
		{key: `{"id":2}`, op: "u", before: row(2, "c"), after: row(2, "d")},
		{key: `{"id":3}`, op: "t", after: row(3, "e")},
	}
	for _, fp := range []string{crashBeforeDBCommit, crashAfterDBCommit} {
		t.Run(fp, func(t *testing.T) {
			s := newSinkSpec("typ17_dbz")
			s.maxRecords = 1
			id := srRegister(t, reg, s.in+"-value", dbzEnvelope)
			topo := avroSinkTopology(t, s, "{ event_id: id, a: a }", "      mode: upsert\n      envelope: debezium\n")
			var recs []*kgo.Record
			for _, e := range evs {
				r := &kgo.Record{Key: []byte(e.key)}
				if !e.tombstone {
					r.Value = frame(t, id, codec, map[string]any{"before": e.before, "after": e.after, "op": e.op, "ts_ms": nil})
				}
				recs = append(recs, r)
			}
			kgoProduce(t, s.in, recs)
			checkChangesCrash(t, s, topo, fp)
		})
	}
}
