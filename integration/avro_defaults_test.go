//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Schemas of a record whose fixed(2) field tag has the default
// "\u00ff\u00fe": by the Avro specification the two bytes ff fe (code
// points 0-255 are the bytes), not their four UTF-8 bytes.
const (
	tagV1 = `{"type":"record","name":"Tagged","namespace":"it.exactly","fields":[{"name":"event_id","type":"string"}]}`
	tagV2 = `{"type":"record","name":"Tagged","namespace":"it.exactly","fields":[{"name":"event_id","type":"string"},
  {"name":"tag","type":{"type":"fixed","name":"Tag","size":2},"default":"\u00ff\u00fe"}]}`
	// tagV2Plain is tagV2 without the default: the same wire form, which
	// goavro (reading its UTF-8 bytes) parses.
	tagV2Plain = `{"type":"record","name":"Tagged","namespace":"it.exactly","fields":[{"name":"event_id","type":"string"},
  {"name":"tag","type":{"type":"fixed","name":"Tag","size":2}}]}`
)

// TestAvroFixedDefault: a fixed default as the specification reads it,
// on the real registry, on every path. A topic mixes frames written with
// v1 (no tag) and v2 (its own tag, and a writer schema holding the
// default): read with v2 as reader schema, v1 records get ff fe and v2
// records keep theirs. JSON without a tag written as v2 Avro takes ff fe,
// registered with its default, and a stage reading those frames with the
// writer's schema from the registry gives the same bytes.
func TestAvroFixedDefault(t *testing.T) {
	const events = 60
	reg := registryURL(t)
	in, out, dlq := uniqueName("fixdef_in"), uniqueName("fixdef_out"), uniqueName("fixdef_dlq")
	jsonIn, mid, back, dlq2, dlq3 := uniqueName("fixdef_json"), uniqueName("fixdef_mid"), uniqueName("fixdef_back"), uniqueName("fixdef_dlq2"), uniqueName("fixdef_dlq3")
	ids := []int{srRegister(t, reg, in+"-value", tagV1), srRegister(t, reg, in+"-value", tagV2)}
	codecs := []*goavro.Codec{mustCodec(t, tagV1), mustCodec(t, tagV2Plain)}
	reader := schemaFile(t, "tagged-v2.avsc", tagV2)
	regYAML := `registry: { url: "${EXACTLY_REGISTRY_URL}" }`
	topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{
		{name: uniqueName("fixdef_read"), in: in, out: out, dlq: dlq, key: "event_id",
			inFormat: `avro, registry: { url: "${EXACTLY_REGISTRY_URL}", reader_schema: ` + reader + " }", outFormat: "json"},
		{name: uniqueName("fixdef_write"), in: jsonIn, out: mid, dlq: dlq2, key: "event_id",
			inFormat: "json", outFormat: "avro, schema: " + reader + ", " + regYAML},
		{name: uniqueName("fixdef_back"), in: mid, out: back, dlq: dlq3, key: "event_id",
			inFormat: "avro, " + regYAML, outFormat: "json"},
	}}.write(t)
	exactlyCmd(t, "validate", topo)
	exactlyCmd(t, "topics", "create", topo)

	// Base64 of the bytes, as JSON carries them: ff fe is "//4=".
	const defTag, ownTag = "//4=", "AQI="
	want := map[string]string{}
	var recs []*kgo.Record
	var lines [][]byte
	for i := range events {
		id := "e-" + strconv.Itoa(i)
		v := i % 2
		native := map[string]any{"event_id": id}
		tag := defTag
		if v == 1 {
			native["tag"] = []byte{0x01, 0x02}
			tag = ownTag
		}
		recs = append(recs, &kgo.Record{Key: []byte(id), Value: frame(t, ids[v], codecs[v], native)})
		want[id] = fmt.Sprintf(`{"event_id":%q,"tag":%q}`, id, tag)
		if v == 0 {
			lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q}`, id, id))
		} else {
			lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q,"tag":%q}`, id, id, ownTag))
		}
	}
	kgoProduce(t, in, recs)
	kcatProduce(t, jsonIn, lines)

	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	eventually(t, 2*time.Minute, func() bool {
		return kcatCount(t, out)+kcatCount(t, dlq) >= events && kcatCount(t, back)+kcatCount(t, dlq2)+kcatCount(t, dlq3) >= events
	}, func() string {
		return fmt.Sprintf("%d and %d of %d out, dead letters %d, %d, %d", kcatCount(t, out), kcatCount(t, back), events,
			kcatCount(t, dlq), kcatCount(t, dlq2), kcatCount(t, dlq3))
	})
	p.stop()
	for _, d := range []string{dlq, dlq2, dlq3} {
		if dl := kcatReadJSON(t, d); len(dl) != 0 {
			t.Fatalf("%s: %d dead letters, want none; the first: %v", d, len(dl), dl[0].Headers)
		}
	}
	checkExactValues(t, out, want)
	checkExactValues(t, back, want)

	// The Avro the JSON stage wrote, read with goavro and the schema the
	// registry holds for it: the default is ff fe on the wire, and the
	// registered text keeps the default as written.
	id := readFramed(t, reg, mid, tagV2Plain, events, func(r *kgo.Record, m map[string]any) {
		i, _ := strconv.Atoi(string(r.Key[2:]))
		wantTag := []byte{0xff, 0xfe}
		if i%2 == 1 {
			wantTag = []byte{0x01, 0x02}
		}
		if got, _ := m["tag"].([]byte); !bytes.Equal(got, wantTag) {
			t.Errorf("%s: record %s: tag % x, want % x", mid, r.Key, got, wantTag)
		}
	})
	var registered struct{ Schema string }
	srCall(t, "GET", reg+"/schemas/ids/"+strconv.Itoa(id), nil, &registered)
	if !bytes.Contains([]byte(registered.Schema), []byte(`"default"`)) {
		t.Errorf("schema id %d as registered has no default: %s", id, registered.Schema)
	}
	t.Logf("%d records through 3 stages, schema ids %v and %d: v1 records and JSON without a tag got ff fe, no dead letter", events, ids, id)
}

// TestSinkAvroFixedDefault: the sink reads the same topic mix, v1 frames
// and v2 frames whose writer schema has the fixed default, with v2 as
// reader schema into a bytea column it derives from the schema: psql reads
// ff fe for each v1 record and the written bytes for each v2 record.
func TestSinkAvroFixedDefault(t *testing.T) {
	const events = 40
	reg := registryURL(t)
	s := newSinkSpec("fixdef_sink")
	ids := []int{srRegister(t, reg, s.in+"-value", tagV1), srRegister(t, reg, s.in+"-value", tagV2)}
	codecs := []*goavro.Codec{mustCodec(t, tagV1), mustCodec(t, tagV2Plain)}
	reader := schemaFile(t, "tagged-v2.avsc", tagV2)
	b := sinkYAMLHead(t, s, 1, "{ event_id: event_id, tag: tag }")
	text := strings.Replace(b.String(), "format: json }", `format: avro, registry: { url: "${EXACTLY_REGISTRY_URL}", reader_schema: `+reader+" } }", 1)
	text += "      types: from_schema\n" + fmt.Sprintf("    commit: { interval: %s, max_records: %d }\n", s.interval, s.maxRecords)
	topo := writeSinkTopology(t, s, s.name+".yaml", text)
	exactlyCmd(t, "validate", topo)

	var recs []*kgo.Record
	for i := range events {
		native := map[string]any{"event_id": fmt.Sprintf("e-%03d", i)}
		if i%2 == 1 {
			native["tag"] = []byte{0x01, 0x02}
		}
		recs = append(recs, &kgo.Record{Value: frame(t, ids[i%2], codecs[i%2], native)})
	}
	kgoProduce(t, s.in, recs)
	pool := pgPool(t)
	p := startSink(t, topo, "a1")
	waitSinkDone(t, pool, s, events, 2*time.Minute)
	p.stop()
	if n := kcatCount(t, s.dlq); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
	if got := columnTypes(t, s.table()); strings.Join(got, ",") != "event_id text,tag bytea" {
		t.Fatalf("columns %v, want event_id text and tag bytea", got)
	}
	rows := psqlLines(t, "SELECT event_id || '|' || encode(tag, 'hex') FROM "+s.table()+" ORDER BY event_id")
	if len(rows) != events {
		t.Fatalf("%d rows, want %d", len(rows), events)
	}
	for i, r := range rows {
		want := fmt.Sprintf("e-%03d|fffe", i)
		if i%2 == 1 {
			want = fmt.Sprintf("e-%03d|0102", i)
		}
		if r != want {
			t.Fatalf("row %d %q, want %q", i, r, want)
		}
	}
	t.Logf("%d rows, schema ids %v: v1 records stored the default ff fe", events, ids)
}
