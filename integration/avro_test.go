//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
)

// These tests run against a real Confluent-compatible schema registry
// (Apicurio Registry, started by deploy/local/up.sh as EXACTLY_REGISTRY_URL).
// Frames are built here from the registry's own answers and goavro, and
// read back with kcat, so that exactly's serde checks nothing about itself.

// registryURL returns EXACTLY_REGISTRY_URL or fails the test.
var registryURL = envVar("EXACTLY_REGISTRY_URL")

// srCall sends one request to the registry's Confluent API and decodes the
// JSON answer into out; it returns the HTTP status.
func srCall(t testing.TB, method, u string, body, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 == 2 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, u, err, b)
		}
	}
	if resp.StatusCode/100 != 2 && out != nil {
		t.Fatalf("%s %s: HTTP %d: %s", method, u, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// srRegister registers schema under subject and returns its ID.
func srRegister(t testing.TB, base, subject, schema string) int {
	t.Helper()
	var got struct{ ID int }
	srCall(t, http.MethodPost, base+"/subjects/"+url.PathEscape(subject)+"/versions", map[string]string{"schema": schema}, &got)
	if got.ID <= 0 {
		t.Fatalf("registering under %s gave schema ID %d", subject, got.ID)
	}
	return got.ID
}

// srLatestID returns the schema ID of the latest version under subject.
func srLatestID(t testing.TB, base, subject string) int {
	t.Helper()
	var got struct{ ID int }
	srCall(t, http.MethodGet, base+"/subjects/"+url.PathEscape(subject)+"/versions/latest", nil, &got)
	return got.ID
}

// readFramed reads n records of topic read_committed (a minute at most)
// and requires each to be in the Confluent wire format with the schema ID
// the registry at reg holds latest under <topic>-value, its datum decoding
// whole with schema; it passes each record and its decoded value to check
// and returns the ID.
func readFramed(t testing.TB, reg, topic, schema string, n int, check func(r *kgo.Record, m map[string]any)) int {
	t.Helper()
	id := srLatestID(t, reg, topic+"-value")
	codec := mustCodec(t, schema)
	cl := readCommittedClient(t, topic)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read %s: %d of %d: %v", topic, got, n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			if len(r.Value) < 5 || r.Value[0] != 0 || int(binary.BigEndian.Uint32(r.Value[1:5])) != id {
				t.Fatalf("%s: record %s is not framed with schema id %d: % x", topic, r.Key, id, r.Value[:min(len(r.Value), 8)])
			}
			native, rest, err := codec.NativeFromBinary(r.Value[5:])
			if err != nil || len(rest) != 0 {
				t.Fatalf("%s: record %s: goavro: %v (%d bytes left)", topic, r.Key, err, len(rest))
			}
			check(r, native.(map[string]any))
		})
	}
	return id
}

// frame is a value in the Confluent wire format: magic byte 0, the
// big-endian schema ID, then the Avro binary datum.
func frame(t testing.TB, id int, c *goavro.Codec, native map[string]any) []byte {
	t.Helper()
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	b, err := c.BinaryFromNative(b, native)
	if err != nil {
		t.Fatalf("encode %v: %v", native, err)
	}
	return b
}

func mustCodec(t testing.TB, schema string) *goavro.Codec {
	t.Helper()
	c, err := goavro.NewCodec(schema)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// kgoProduce writes records to topic, idempotently, and waits for them.
func kgoProduce(t testing.TB, topic string, recs []*kgo.Record) {
	t.Helper()
	cl := kafkaClient(t, kgo.DefaultProduceTopic(topic))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// kcatProduceFile writes one record with key and the exact bytes of value
// (kcat produces each file named on its command line as one message).
func kcatProduceFile(t testing.TB, topic, key string, value []byte) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "value.bin")
	if err := os.WriteFile(f, value, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kcatBin(t), "-P", "-b", brokers(t), "-t", topic, "-k", key,
		"-X", "enable.idempotence=true", "-X", "acks=all", f).CombinedOutput()
	if err != nil {
		t.Fatalf("kcat produce file to %s: %v\n%s", topic, err, out)
	}
}

// kcatKeys returns the keys of topic's records, read_committed; for topics
// whose values are binary (and may hold newlines).
func kcatKeys(t testing.TB, topic string) []string {
	t.Helper()
	out, err := exec.Command(kcatBin(t), "-C", "-b", brokers(t), "-t", topic, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k\n").Output()
	if err != nil {
		t.Fatalf("kcat keys of %s: %v", topic, err)
	}
	keys := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(keys) == 1 && keys[0] == "" {
		return nil
	}
	return keys
}

// kcatJSONRecord is one record as kcat -J prints it; unlike kcatRead it
// keeps header values with commas and equals signs whole.
type kcatJSONRecord struct {
	Partition int32
	Offset    int64
	Key       string
	Payload   string
	Headers   map[string]string
}

func kcatReadJSON(t testing.TB, topic string) []kcatJSONRecord {
	t.Helper()
	out, err := exec.Command(kcatBin(t), "-C", "-b", brokers(t), "-t", topic, "-o", "beginning", "-e", "-q", "-J",
		"-X", "isolation.level=read_committed").Output()
	if err != nil {
		t.Fatalf("kcat -J %s: %v", topic, err)
	}
	var recs []kcatJSONRecord
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var r struct {
			Partition int32    `json:"partition"`
			Offset    int64    `json:"offset"`
			Key       *string  `json:"key"`
			Payload   *string  `json:"payload"`
			Headers   []string `json:"headers"`
		}
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("kcat -J %s: %v", topic, err)
		}
		rec := kcatJSONRecord{Partition: r.Partition, Offset: r.Offset, Headers: map[string]string{}}
		if r.Key != nil {
			rec.Key = *r.Key
		}
		if r.Payload != nil {
			rec.Payload = *r.Payload
		}
		for i := 0; i+1 < len(r.Headers); i += 2 {
			rec.Headers[r.Headers[i]] = r.Headers[i+1]
		}
		recs = append(recs, rec)
	}
	return recs
}

// checkExactValues requires that topic's records, by key, hold exactly the
// values of want (and nothing else).
func checkExactValues(t *testing.T, topic string, want map[string]string) {
	t.Helper()
	recs := kcatRead(t, topic)
	if len(recs) != len(want) {
		t.Errorf("%s: %d records, want %d", topic, len(recs), len(want))
	}
	bad := 0
	for _, r := range recs {
		if w, ok := want[r.Key]; !ok || r.Value != w {
			bad++
			if bad <= 5 {
				t.Errorf("%s: key %s:\n got %s\nwant %s", topic, r.Key, r.Value, w)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d records differ from what was expected", topic, bad)
	}
}

// avroTopology writes a topology file with the given topics (name →
// partitions) and the stages' YAML, which may name .avsc files.
func avroTopology(t testing.TB, topics map[string]int, stages string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nkafka:\n  brokers: [%q]\n  transaction_timeout: 60s\ntopics:\n", brokers(t))
	for name, parts := range topics {
		fmt.Fprintf(&b, "  - { name: %s, partitions: %d }\n", name, parts)
	}
	b.WriteString("stages:\n")
	b.WriteString(stages)
	return writeFile(t, "topology.yaml", b.String())
}

// schemaFile writes an .avsc file and returns its path.
func schemaFile(t testing.TB, name, schema string) string {
	t.Helper()
	return writeFile(t, name, schema)
}

const orderSchema = `{"type":"record","name":"Order","namespace":"it.exactly","fields":[
  {"name":"event_id","type":"string"},
  {"name":"n","type":"long"},
  {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
  {"name":"rate","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":6}},
  {"name":"big","type":{"type":"fixed","name":"Big","size":10,"logicalType":"decimal","precision":20,"scale":0}},
  {"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"ts_us","type":{"type":"long","logicalType":"timestamp-micros"}},
  {"name":"note","type":["null","string"],"default":null}
]}`

// orderEvent returns event i as the JSON input and the JSON the chain
// must give back for it: decimals as strings with exactly their scale,
// timestamps as RFC 3339 in UTC, the nullable union unwrapped.
func orderEvent(i int) (in, out string) {
	base := time.Date(2024, 2, 29, 12, 34, 56, 789_000_000, time.UTC)
	ts := base.Add(time.Duration(i) * time.Millisecond)
	tsUs := base.Add(time.Duration(i)*time.Second + time.Duration(i%1000)*time.Microsecond)
	amount := fmt.Sprintf("%d.%02d", i/100, i%100)
	bigV := new(big.Int).Add(new(big.Int).SetUint64(1<<63), big.NewInt(int64(i))).String()
	note, noteIn := "null", ""
	switch i % 3 {
	case 0: // absent: takes the default, null
	case 1:
		noteIn = `,"note":null`
	case 2:
		note = fmt.Sprintf(`"n:%d, x=y"`, i)
		noteIn = `,"note":` + note
	}
	// Half the timestamps come with an offset and as numbers: both are
	// accepted, and both come out in UTC.
	tsIn := strconv.Quote(ts.In(time.FixedZone("", 3600)).Format(time.RFC3339Nano))
	tsUsIn := strconv.FormatInt(tsUs.UnixMicro(), 10)
	if i%2 == 0 {
		tsIn = strconv.FormatInt(ts.UnixMilli(), 10)
		tsUsIn = strconv.Quote(tsUs.Format(time.RFC3339Nano))
	}
	in = fmt.Sprintf(`{"event_id":"e-%d","n":%d,"amount":%q,"rate":0.000123,"big":%q,"ts":%s,"ts_us":%s%s}`,
		i, i, amount, bigV, tsIn, tsUsIn, noteIn)
	out = fmt.Sprintf(`{"amount":%q,"big":%q,"event_id":"e-%d","n":%d,"note":%s,"rate":"0.000123","ts":%q,"ts_us":%q}`,
		amount, bigV, i, i, note, ts.Format(time.RFC3339Nano), tsUs.Format(time.RFC3339Nano))
	return in, out
}

// TestAvroChainCrashCheck: JSON → Avro (registry, TopicNameStrategy) →
// JSON on the real broker and registry, killed at the third commit and
// restarted: every event comes out exactly once and exactly as it went in.
func TestAvroChainCrashCheck(t *testing.T) {
	const events, bad = 5000, 30
	reg := registryURL(t)
	in, mid, out := uniqueName("avro_in"), uniqueName("avro_mid"), uniqueName("avro_out")
	dlq1, dlq2 := uniqueName("avro_dlq"), uniqueName("avro_dlq")
	schema := schemaFile(t, "order.avsc", orderSchema)
	topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{{
		name: uniqueName("to_avro"), in: in, out: mid, dlq: dlq1, key: "event_id", interval: "100ms", maxRecords: 500,
		inFormat: "json", outFormat: "avro, schema: " + schema + `, registry: { url: "${EXACTLY_REGISTRY_URL}" }`,
	}, {
		name: uniqueName("from_avro"), in: mid, out: out, dlq: dlq2, key: "event_id", interval: "100ms", maxRecords: 500,
		inFormat: `avro, registry: { url: "${EXACTLY_REGISTRY_URL}" }`, outFormat: "json",
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)

	want := map[string]string{}
	var lines [][]byte
	badValues := []string{
		`{"event_id":"bad","n":1,"amount":"1.234","rate":"0","big":"1","ts":0,"ts_us":0}`,        // scale 3 > 2: never rounded
		`{"event_id":"bad","n":1,"amount":"123456789.00","rate":"0","big":"1","ts":0,"ts_us":0}`, // 11 digits > precision 10
		`{"event_id":"bad","amount":"1.00","rate":"0","big":"1","ts":0,"ts_us":0}`,               // n missing, no default
		`{"event_id":"bad","n":1.5,"amount":"1.00","rate":"0","big":"1","ts":0,"ts_us":0}`,       // not a long
		`{"event_id":"bad","n":1,"amount":"1.00","rate":"0","big":"1","ts":"yesterday","ts_us":0}`,
		`{"event_id":"bad","n":1,"amount":"1.00","rate":"0","big":"1","ts":0,"ts_us":0,"extra":1}`, // not in the schema
		`{"event_id": "e-broken`,
	}
	j := 0
	for i := range events {
		v, w := orderEvent(i)
		want["e-"+strconv.Itoa(i)] = w
		lines = append(lines, fmt.Appendf(nil, "k-%d|%s", i, v))
		if i%(events/bad) == events/bad-1 && j < bad {
			lines = append(lines, fmt.Appendf(nil, "bad-%d|%s", j, badValues[j%len(badValues)]))
			j++
		}
	}
	kcatProduce(t, in, lines)

	crashAndRecover(t, topo, crashBeforeCommit, out, dlq1, events, bad, 3*time.Minute)

	checkOutput(t, out, events)
	checkExactValues(t, out, want)
	checkDeadLetters(t, dlq1, in, bad)
	if n := kcatCount(t, dlq2); n != 0 {
		t.Fatalf("the Avro → JSON stage dead-lettered %d records; its input held only valid frames", n)
	}
	for _, r := range kcatReadJSON(t, dlq1) {
		if r.Headers[deadletter.HeaderReason] == "" || r.Headers[deadletter.HeaderError] == "" {
			t.Errorf("dead letter %s lacks a reason or error: %v", r.Key, r.Headers)
		}
	}

	// The middle topic: every event once, each framed with the ID the
	// registry holds under <topic>-value (TopicNameStrategy).
	keys := kcatKeys(t, mid)
	seen := map[string]int{}
	for _, k := range keys {
		seen[k]++
	}
	if len(keys) != events || len(seen) != events {
		t.Fatalf("%s: %d records with %d distinct keys, want %d each", mid, len(keys), len(seen), events)
	}
	id := readFramed(t, reg, mid, orderSchema, events, func(r *kgo.Record, m map[string]any) {
		if got := m["event_id"]; got != string(r.Key) {
			t.Fatalf("%s: record keyed %s holds event_id %v", mid, r.Key, got)
		}
	})
	t.Logf("%d events through JSON → Avro (schema id %d under %s-value) → JSON; %d dead letters", events, id, mid, bad)
}

const (
	evolV1 = `{"type":"record","name":"Event","namespace":"it.exactly","fields":[{"name":"event_id","type":"string"}]}`
	evolV2 = `{"type":"record","name":"Event","namespace":"it.exactly","fields":[{"name":"event_id","type":"string"},
  {"name":"source","type":"string","default":"legacy"}]}`
	// v3 adds a field the reader (v2) does not know: it is dropped.
	evolV3 = `{"type":"record","name":"Event","namespace":"it.exactly","fields":[{"name":"event_id","type":"string"},
  {"name":"source","type":"string","default":"legacy"},{"name":"extra","type":"int","default":0}]}`
)

// TestAvroSchemaEvolution: a topic mixes records written with v1, v2 and
// v3 of a schema; the stage reads them all with v2 as its reader schema.
func TestAvroSchemaEvolution(t *testing.T) {
	const events = 600
	reg := registryURL(t)
	in, out, dlq, stage := uniqueName("evol_in"), uniqueName("evol_out"), uniqueName("evol_dlq"), uniqueName("evol")
	subject := in + "-value"
	ids := []int{srRegister(t, reg, subject, evolV1), srRegister(t, reg, subject, evolV2), srRegister(t, reg, subject, evolV3)}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("v1, v2 and v3 got schema IDs %v, want three", ids)
	}
	codecs := []*goavro.Codec{mustCodec(t, evolV1), mustCodec(t, evolV2), mustCodec(t, evolV3)}
	reader := schemaFile(t, "event-v2.avsc", evolV2)
	topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, key: "event_id",
		inFormat: `avro, registry: { url: "${EXACTLY_REGISTRY_URL}", reader_schema: ` + reader + " }", outFormat: "json",
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)

	want := map[string]string{}
	var recs []*kgo.Record
	for i := range events {
		id := "e-" + strconv.Itoa(i)
		v := i % 3
		native := map[string]any{"event_id": id}
		source := "legacy"
		if v >= 1 {
			source = "src-" + strconv.Itoa(i)
			native["source"] = source
		}
		if v == 2 {
			native["extra"] = int32(i)
		}
		recs = append(recs, &kgo.Record{Key: []byte(id), Value: frame(t, ids[v], codecs[v], native)})
		want[id] = fmt.Sprintf(`{"event_id":%q,"source":%q}`, id, source)
	}
	kgoProduce(t, in, recs)

	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	eventually(t, 2*time.Minute, func() bool { return kcatCount(t, out)+kcatCount(t, dlq) >= events },
		func() string {
			return fmt.Sprintf("%d of %d out, %d dead letters", kcatCount(t, out), events, kcatCount(t, dlq))
		})
	p.stop()
	if dl := kcatReadJSON(t, dlq); len(dl) != 0 {
		t.Fatalf("%d dead letters, want none; the first: %v", len(dl), dl[0].Headers)
	}
	checkExactValues(t, out, want)
	t.Logf("%d records written with schema ids %v read with v2: v1 records got source \"legacy\", v3's extra field was dropped", events, ids)
}

// TestAvroBadFramesDeadLettered: frames that kcat writes byte for byte,
// each broken in one way, become dead letters that say what is wrong;
// the good frames around them pass.
func TestAvroBadFramesDeadLettered(t *testing.T) {
	reg := registryURL(t)
	in, out, dlq, stage := uniqueName("frames_in"), uniqueName("frames_out"), uniqueName("frames_dlq"), uniqueName("frames")
	schema := `{"type":"record","name":"Ping","namespace":"it.exactly","fields":[{"name":"event_id","type":"string"},{"name":"n","type":"long"}]}`
	id := srRegister(t, reg, in+"-value", schema)
	codec := mustCodec(t, schema)
	topo := stagesTopology{txnTimeout: "60s", partitions: 1, stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq,
		inFormat: `avro, registry: { url: "${EXACTLY_REGISTRY_URL}" }`, outFormat: "json",
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)

	good := func(i int) []byte {
		return frame(t, id, codec, map[string]any{"event_id": "g-" + strconv.Itoa(i), "n": int64(i)})
	}
	valid := good(99)
	unknown := append([]byte(nil), valid...)
	binary.BigEndian.PutUint32(unknown[1:], 0x7fffff00) // an ID the registry never gave
	wrongMagic := append([]byte(nil), valid...)
	wrongMagic[0] = 1
	cases := []struct {
		key   string
		value []byte
		want  string // in the dead letter's error header
	}{
		{"good-0", good(0), ""},
		{"bad-short", []byte{0, 0, 0}, "3 bytes, shorter than the 5-byte header"},
		{"bad-magic", wrongMagic, "magic byte 0x01, want 0x00"},
		{"good-1", good(1), ""},
		{"bad-unknown-id", unknown, "schema id 2147483392: the registry does not have it"},
		{"bad-trailing", append(append([]byte(nil), valid...), 0x02, 0x04), "2 trailing bytes after the datum with schema id " + strconv.Itoa(id)},
		{"bad-truncated", valid[:len(valid)-1], "does not match its schema"},
		{"bad-header-only", valid[:5], "does not match its schema"},
		{"good-2", good(2), ""},
	}
	for _, c := range cases {
		kcatProduceFile(t, in, c.key, c.value)
	}
	nGood, nBad := 3, len(cases)-3

	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1")
	// The dead letters hold the bad frames' raw bytes, which may hold a
	// newline (a schema id of 10, say): count them with kcat -J.
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= nGood && len(kcatReadJSON(t, dlq)) >= nBad },
		func() string {
			return fmt.Sprintf("%d of %d out, %d of %d dead letters", kcatCount(t, out), nGood, len(kcatReadJSON(t, dlq)), nBad)
		})
	p.stop()

	outs := kcatRead(t, out)
	if len(outs) != nGood {
		t.Fatalf("%s: %d records, want %d", out, len(outs), nGood)
	}
	for i, r := range outs {
		if w := fmt.Sprintf(`{"event_id":"g-%d","n":%d}`, i, i); r.Value != w {
			t.Errorf("%s: record %d is %s, want %s", out, i, r.Value, w)
		}
	}
	dls := map[string]kcatJSONRecord{}
	for _, r := range kcatReadJSON(t, dlq) {
		dls[r.Key] = r
	}
	if len(dls) != nBad {
		t.Errorf("%d distinct dead letters, want %d", len(dls), nBad)
	}
	for _, c := range cases {
		r, ok := dls[c.key]
		if c.want == "" {
			if ok {
				t.Errorf("good frame %s was dead-lettered: %v", c.key, r.Headers)
			}
			continue
		}
		if !ok {
			t.Errorf("%s: no dead letter", c.key)
			continue
		}
		if got := r.Headers[deadletter.HeaderReason]; got != deadletter.ReasonDecode {
			t.Errorf("%s: reason %q, want %q", c.key, got, deadletter.ReasonDecode)
		}
		if msg := r.Headers[deadletter.HeaderError]; !strings.Contains(msg, c.want) {
			t.Errorf("%s: error %q does not say %q", c.key, msg, c.want)
		} else {
			t.Logf("%-16s → %s", c.key, msg)
		}
	}
}

// privateRegistry starts a registry of its own on a free port, through
// deploy/local/registry.sh, and stops it when the test ends. It returns
// the API URL and functions to stop and start it again.
func privateRegistry(t *testing.T) (base string, stop, restart func()) {
	t.Helper()
	base, _, stop, restart = privateRegistryAt(t)
	return base, stop, restart
}

// privateRegistryAt is privateRegistry that also returns host:port.
func privateRegistryAt(t *testing.T) (base, addr string, stop, restart func()) {
	t.Helper()
	addr = freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	runDir := t.TempDir()
	script, err := filepath.Abs("../deploy/local/registry.sh")
	if err != nil {
		t.Fatal(err)
	}
	do := func(verb string) {
		t.Helper()
		cmd := exec.Command("bash", script, verb)
		cmd.Env = append(os.Environ(), "REGISTRY_PORT="+port, "EXACTLY_RUN_DIR="+runDir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("registry.sh %s: %v\n%s", verb, err, out)
		} else {
			t.Logf("registry.sh %s: %s", verb, strings.TrimSpace(string(out)))
		}
	}
	do("start")
	t.Cleanup(func() { do("stop") })
	return "http://127.0.0.1:" + port + "/apis/ccompat/v7", addr, func() { do("stop") }, func() { do("start") }
}

// gate forwards TCP connections from a port of its own to target while
// open, and drops them at once while closed, as a service that is down.
type gate struct {
	ln     net.Listener
	target string
	open   atomic.Bool
}

func newGate(t testing.TB, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	g.open.Store(true)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return g
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) serve(c net.Conn) {
	defer c.Close()
	if !g.open.Load() {
		return
	}
	up, err := net.DialTimeout("tcp", g.target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(up, c)
		_ = up.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(c, up)
}

// TestAvroRegistryDown: the registry stops while a stage runs and records
// arrive whose writer schema the stage has not fetched yet. The stage
// retries, dead-letters nothing, and finishes once the registry is back.
// The registry is a private one, so that other tests keep theirs.
//
// Its storage is in memory: restarted, it is empty until the test
// registers the schemas again, and a stage asking in between would get a
// 404 and rightly dead-letter. A real registry comes back with its
// schemas, so the stage reaches this one through a gate that stays
// closed from the stop until the schemas are back.
func TestAvroRegistryDown(t *testing.T) {
	const batch = 200
	direct, regAddr, stopReg, startReg := privateRegistryAt(t)
	g := newGate(t, regAddr)
	reg := "http://" + g.addr() + "/apis/ccompat/v7"
	in, out, dlq, stage := uniqueName("down_in"), uniqueName("down_out"), uniqueName("down_dlq"), uniqueName("down")
	subject := in + "-value"
	id1, id2 := srRegister(t, direct, subject, evolV1), srRegister(t, direct, subject, evolV2)
	c1, c2 := mustCodec(t, evolV1), mustCodec(t, evolV2)
	topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, key: "event_id",
		inFormat: fmt.Sprintf("avro, registry: { url: %q }", reg), outFormat: "json",
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)

	want := map[string]string{}
	produce := func(from int, id int, c *goavro.Codec) {
		var recs []*kgo.Record
		for i := from; i < from+batch; i++ {
			key := "e-" + strconv.Itoa(i)
			native := map[string]any{"event_id": key}
			w := fmt.Sprintf(`{"event_id":%q}`, key)
			if c == c2 {
				native["source"] = "s"
				w = fmt.Sprintf(`{"event_id":%q,"source":"s"}`, key)
			}
			recs = append(recs, &kgo.Record{Key: []byte(key), Value: frame(t, id, c, native)})
			want[key] = w
		}
		kgoProduce(t, in, recs)
	}
	produce(0, id1, c1)
	metrics := freeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", metrics)
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= batch },
		func() string { return fmt.Sprintf("%d of %d v1 records out", kcatCount(t, out), batch) })

	g.open.Store(false)
	stopReg()
	produce(batch, id2, c2) // schema id2 is not cached yet: the stage must ask the registry
	retries := func() float64 {
		n, _ := sum(scrape(t, metrics), "exactly_stage_retries_total", map[string]string{"stage": stage, "cause": "transient_record_error"})
		return n
	}
	eventually(t, time.Minute, func() bool { return retries() >= 3 },
		func() string {
			return fmt.Sprintf("%v transient retries while the registry is down, want 3", retries())
		})
	if n, d := kcatCount(t, out), kcatCount(t, dlq); n != batch || d != 0 {
		t.Fatalf("while the registry was down: %d records out (want %d), %d dead letters (want 0)", n, batch, d)
	}
	if !strings.Contains(p.logs.String(), "transaction aborted; retrying") {
		t.Errorf("no retry was logged:\n%s", tail(p.logs.String(), 20))
	}

	// In-memory storage: the restarted registry is empty. Registering the
	// same schemas in the same order gives them back their IDs.
	startReg()
	if a, b := srRegister(t, direct, subject, evolV1), srRegister(t, direct, subject, evolV2); a != id1 || b != id2 {
		t.Fatalf("the restarted registry gave ids %d, %d, want %d, %d", a, b, id1, id2)
	}
	g.open.Store(true)
	eventually(t, time.Minute, func() bool { return kcatCount(t, out) >= 2*batch },
		func() string {
			return fmt.Sprintf("%d of %d records out after the registry came back", kcatCount(t, out), 2*batch)
		})
	n := retries()
	p.stop()
	checkExactValues(t, out, want)
	if n := kcatCount(t, dlq); n != 0 {
		t.Fatalf("%d dead letters, want 0", n)
	}
	t.Logf("%v transient retries while the registry was down; all %d records out once, none dead-lettered", n, 2*batch)
}

// TestAvroRegistryDownOnEncode: a JSON → Avro stage starts while its
// registry is down, so it cannot register its schema. It retries, writes
// and dead-letters nothing, and once the registry is up registers the
// schema and frames every record with its ID.
func TestAvroRegistryDownOnEncode(t *testing.T) {
	const events = 300
	reg, stopReg, startReg := privateRegistry(t)
	stopReg()
	in, out, dlq, stage := uniqueName("enc_in"), uniqueName("enc_out"), uniqueName("enc_dlq"), uniqueName("enc")
	schema := schemaFile(t, "event-v2.avsc", evolV2)
	topo := stagesTopology{txnTimeout: "60s", stages: []stageYAML{{
		name: stage, in: in, out: out, dlq: dlq, key: "event_id",
		inFormat: "json", outFormat: fmt.Sprintf("avro, schema: %s, registry: { url: %q }", schema, reg),
	}}}.write(t)
	exactlyCmd(t, "topics", "create", topo)
	var lines [][]byte
	for i := range events {
		lines = append(lines, fmt.Appendf(nil, `k-%d|{"event_id":"e-%d"}`, i, i))
	}
	kcatProduce(t, in, lines)

	metrics := freeAddr(t)
	p := start(t, nil, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", metrics)
	retries := func() float64 {
		n, _ := sum(scrape(t, metrics), "exactly_stage_retries_total", map[string]string{"stage": stage, "cause": "transient_record_error"})
		return n
	}
	eventually(t, time.Minute, func() bool {
		c, err := net.DialTimeout("tcp", metrics, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, func() string { return "the metrics endpoint " + metrics + " does not answer" })
	eventually(t, time.Minute, func() bool { return retries() >= 3 },
		func() string {
			return fmt.Sprintf("%v transient retries while the registry is down, want 3", retries())
		})
	if n, d := kcatCount(t, out), kcatCount(t, dlq); n != 0 || d != 0 {
		t.Fatalf("while the registry was down: %d records out, %d dead letters; want none", n, d)
	}
	startReg()
	eventually(t, time.Minute, func() bool { return len(kcatKeys(t, out)) >= events },
		func() string {
			return fmt.Sprintf("%d of %d records out after the registry came back", len(kcatKeys(t, out)), events)
		})
	n := retries()
	p.stop()

	seen := map[string]bool{}
	id := readFramed(t, reg, out, evolV2, events, func(r *kgo.Record, m map[string]any) {
		if seen[string(r.Key)] {
			t.Fatalf("%s: %s twice", out, r.Key)
		}
		seen[string(r.Key)] = true
		if m["event_id"] != string(r.Key) || m["source"] != "legacy" {
			t.Fatalf("%s: record %s decodes to %v", out, r.Key, m)
		}
	})
	if d := kcatCount(t, dlq); d != 0 {
		t.Fatalf("%d dead letters, want 0", d)
	}
	t.Logf("%v transient retries while the registry was down; then %d records framed with schema id %d", n, events, id)
}
