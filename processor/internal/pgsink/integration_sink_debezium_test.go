//go:build integration

package pgsink_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

const placeholder = "__debezium_unavailable_value"

// dbzSchema is the Connect schema (schemas.enable) of a change event of
// table items, with its logical types, as Debezium's Postgres connector
// writes it (decimal.handling.mode precise, time.precision.mode adaptive).
const dbzSchema = `{"type":"struct","fields":[` +
	`{"type":"struct","optional":true,"field":"before","fields":%[1]s},` +
	`{"type":"struct","optional":true,"field":"after","fields":%[1]s},` +
	`{"type":"string","field":"op"}],"name":"srv.public.items.Envelope"}`

const itemFields = `[{"type":"int64","field":"id"},` +
	`{"type":"string","optional":true,"field":"big"},` +
	`{"type":"string","optional":true,"name":"io.debezium.data.Json","field":"doc"},` +
	`{"type":"bytes","optional":true,"field":"blob"},` +
	`{"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"3"},"field":"amount"},` +
	`{"type":"int32","optional":true,"name":"io.debezium.time.Date","field":"d"},` +
	`{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","field":"ts"},` +
	`{"type":"string","optional":true,"name":"io.debezium.time.ZonedTimestamp","field":"tstz"},` +
	`{"type":"array","optional":true,"items":{"type":"string"},"field":"tags"}]`

// dbzEvent is a change event of items with the schema.
func dbzEvent(op, before, after string) []byte {
	return fmt.Appendf(nil, `{"schema":%s,"payload":{"before":%s,"after":%s,"op":%q}}`,
		fmt.Sprintf(dbzSchema, itemFields), before, after, op)
}

// itemSink runs a sink of envelope debezium (mode upsert) into items of a
// new schema, created by the test, until its stored position reaches n
// and its counts satisfy ready (nil: any), which they may do a moment
// after the commit that stored the position.
func itemSink(t *testing.T, topic string, n int64, envelope, tombstones string, ready func(pgsink.Stats) bool, mods ...func(*pgsink.Config)) (schema string, s *pgsink.Sink) {
	t.Helper()
	pool := pgPool(t)
	ctx := context.Background()
	schema = uniqueName("it_dbz")
	for _, q := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + schema + ".items (id bigint PRIMARY KEY, big text, doc jsonb, blob bytea, amount numeric(12,3), d date, ts timestamp, tstz timestamptz, tags text[])",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
	})
	var cols []pgsink.Column
	for _, c := range []string{"id", "big", "doc", "blob", "amount", "d", "ts", "tstz", "tags"} {
		cols = append(cols, pgsink.Column{Name: c, Source: c})
	}
	cfg := pgsink.Config{
		Sink: uniqueName("dbz"), InstanceID: "d1", Brokers: []string{brokers(t)},
		Input: topic, DeadLetterTable: schema + ".dead", DSN: pgDSN(t),
		Table: schema + ".items", PositionsTable: schema + ".positions", EventID: "id", Columns: cols,
		CommitInterval: 50 * time.Millisecond, MaxRecords: 100, Mode: topology.ModeUpsert,
		Envelope: envelope, Tombstones: tombstones, UnavailableValue: placeholder,
	}
	for _, m := range mods {
		m(&cfg)
	}
	s, err := pgsink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("sink: %v", err)
		}
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var next int64
		err := pool.QueryRow(ctx, "SELECT coalesce(sum(next_offset), 0) FROM "+schema+".positions").Scan(&next)
		if err == nil && next >= n && (ready == nil || ready(s.Stats())) {
			return schema, s
		}
		if time.Now().After(deadline) {
			t.Fatalf("stored position %d of %d in 2 minutes (%v)", next, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSinkDebeziumPlaceholderAndLogicalTypes writes change events with
// Connect schemas: logical types decoded exactly, the unavailable-value
// placeholder keeping the stored value in every column type, two updates
// of one row in one batch each missing another column, an update of a
// row not stored (a dead letter naming the field), and a delete followed
// by its tombstone (one deleted row).
func TestSinkDebeziumPlaceholderAndLogicalTypes(t *testing.T) {
	topic := newTopic(t, "dbz_in")
	big := strings.Repeat("x", 3000)
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	row := func(id int, big, doc, blob, amount, d, ts, tstz, tags string) string {
		return fmt.Sprintf(`{"id":%d,"big":%s,"doc":%s,"blob":%s,"amount":%s,"d":%s,"ts":%s,"tstz":%s,"tags":%s}`, id, big, doc, blob, amount, d, ts, tstz, tags)
	}
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	// -2667.212 at scale 3 is the bytes d7 4d 34, whose base64 is "1000":
	// text that reads as a number, and must not be stored as 1000.
	neg := base64.StdEncoding.EncodeToString([]byte{0xd7, 0x4d, 0x34})
	thousand := base64.StdEncoding.EncodeToString([]byte{0x0f, 0x42, 0x40}) // 1000.000
	ph, phB := q(placeholder), q(b64(placeholder))
	lines := [][]byte{
		append([]byte(`{"id":1}|`), dbzEvent("c", "null", row(1, q(big), q(`{"a":1}`), q(b64("\x00\x01")), q(neg), "-1", "1704067200123456", q("2024-01-01T10:00:00.5+05:30"), `["p","q"]`))...),
		append([]byte(`{"id":2}|`), dbzEvent("r", "null", row(2, q("two"), q(`{"b":2}`), q(b64("two")), q(thousand), "19723", "0", q("2024-01-01T00:00:00Z"), `[]`))...),
	}
	// Batch two (the sink reads on; they may share a batch, which is the
	// harder case): row 1 updated with every large column missing, then
	// big given and doc missing, then doc given and big missing.
	lines = append(lines,
		append([]byte(`{"id":1}|`), dbzEvent("u", "null", row(1, ph, ph, phB, q(neg), "0", "1", q("2024-01-01T10:00:00.5+05:30"), `[`+ph+`]`))...),
		append([]byte(`{"id":2}|`), dbzEvent("u", "null", row(2, q("two-b"), ph, phB, q(thousand), "19723", "0", q("2024-01-01T00:00:00Z"), `[`+ph+`]`))...),
		append([]byte(`{"id":2}|`), dbzEvent("u", "null", row(2, ph, q(`{"b":3}`), phB, q(thousand), "19723", "0", q("2024-01-01T00:00:00Z"), `["z"]`))...),
		// An update of a row the table never had: nothing to keep.
		append([]byte(`{"id":3}|`), dbzEvent("u", "null", row(3, ph, q(`{}`), "null", "null", "null", "null", "null", "null"))...),
		// A delete, then its tombstone.
		append([]byte(`{"id":4}|`), dbzEvent("c", "null", row(4, q("four"), "null", "null", "null", "null", "null", "null", "null"))...),
		append([]byte(`{"id":4}|`), dbzEvent("d", `{"id":4}`, "null")...),
		[]byte(`{"id":4}|`),
	)
	kcatProduce(t, topic, lines)
	schema, s := itemSink(t, topic, int64(len(lines)), topology.EnvelopeDebezium, topology.TombstonesSkip,
		func(st pgsink.Stats) bool { return st.Deleted >= 1 && st.DeadLettered >= 1 })

	got := psqlLines(t, "SELECT id, length(big), doc, encode(blob, 'hex'), amount, d, ts, tstz, tags FROM "+schema+".items ORDER BY id")
	want := []string{
		`1|3000|{"a": 1}|0001|-2667.212|1970-01-01|1970-01-01 00:00:00.000001|2024-01-01 04:30:00.5+00|{p,q}`,
		`2|5|{"b": 3}|74776f|1000.000|2024-01-01|1970-01-01 00:00:00|2024-01-01 00:00:00+00|{z}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if big := psqlLines(t, "SELECT big = repeat('x', 3000) FROM "+schema+".items WHERE id = 1"); big[0] != "t" {
		t.Fatalf("big kept: %v", big)
	}
	dead := psqlLines(t, "SELECT reason || ': ' || message FROM "+schema+".dead ORDER BY \"offset\"")
	if len(dead) != 1 || !strings.Contains(dead[0], `field "big" holds the unavailable-value placeholder`) {
		t.Fatalf("dead letters: %q; want one, of id 3's big", dead)
	}
	if st := s.Stats(); st.Deleted != 1 {
		t.Fatalf("stats %+v: want 1 deleted", st)
	}
}

// TestSinkTombstoneJSONKeys deletes by tombstones whose keys are JSON
// objects, as Connect's JSON converter writes a row's key, with and
// without a schema: the key's field is the event id column's; a key of
// other fields is a dead letter naming them; a key that matches no row
// deletes nothing.
func TestSinkTombstoneJSONKeys(t *testing.T) {
	topic := newTopic(t, "tomb_in")
	row := func(id int) []byte {
		return fmt.Appendf(nil, `{"id":%d}|{"id":%d,"big":"b%d"}`, id, id, id)
	}
	lines := [][]byte{
		row(1), row(2), row(3),
		[]byte(`{"id":1}|`),
		[]byte(`{"schema":{"type":"struct","fields":[{"type":"int64","field":"id"}]},"payload":{"id":2}}|`),
		[]byte(`{"id":99}|`),
		[]byte(`{"id":3,"tenant":7}|`),
	}
	kcatProduce(t, topic, lines)
	schema, s := itemSink(t, topic, int64(len(lines)), topology.EnvelopeNone, topology.TombstonesDelete,
		func(st pgsink.Stats) bool { return st.Deleted >= 2 && st.DeadLettered >= 1 })
	if got := psqlLines(t, "SELECT id FROM "+schema+".items ORDER BY id"); strings.Join(got, ",") != "3" {
		t.Fatalf("rows left %v; want 3", got)
	}
	dead := psqlLines(t, "SELECT reason || ': ' || message FROM "+schema+".dead")
	if len(dead) != 1 || !strings.Contains(dead[0], `"id", "tenant"`) {
		t.Fatalf("dead letters %q; want the key of id and tenant", dead)
	}
	if st := s.Stats(); st.Deleted != 2 {
		t.Fatalf("stats %+v: want 2 deleted", st)
	}
}

// TestSinkUnavailableValueRows writes rows without an envelope (as
// Debezium's ExtractNewRecordState leaves them) holding the placeholder,
// on each load path: upsert mode (the COPY into the staging table
// streams, and falls back at the first placeholder), insert mode (the
// direct COPY, which falls back the same way), and upsert guarded by a
// version, where a batch record's value is kept only if it is newer
// than the stored row's.
func TestSinkUnavailableValueRows(t *testing.T) {
	ph := fmt.Sprintf("%q", placeholder)
	line := func(id int, big, d string) []byte {
		return fmt.Appendf(nil, `%d|{"id":%d,"big":%s,"d":%s}`, id, id, big, d)
	}
	for _, tc := range []struct {
		name  string
		mode  string
		lines [][]byte
		seed  string // rows stored before the sink starts
		want  []string
		dead  int
	}{
		{"upsert", topology.ModeUpsert, [][]byte{
			line(1, `"one"`, `"2024-01-01"`), line(1, ph, `"2024-01-02"`), line(2, ph, `"2024-01-03"`), line(3, ph, `"2024-01-04"`),
		}, `(2, 'stored', '2000-01-01')`, []string{"1|one|2024-01-02", "2|stored|2024-01-03"}, 1},
		{"insert", topology.ModeInsert, [][]byte{
			line(1, `"one"`, `"2024-01-01"`), line(2, ph, `"2024-01-03"`), line(3, ph, `"2024-01-04"`),
		}, `(2, 'stored', '2000-01-01')`, []string{"1|one|2024-01-01", "2|stored|2000-01-01"}, 1},
		{"version", topology.ModeUpsert, [][]byte{
			// d is the version: id 1's stored row (2000) is older than
			// the batch's first record, whose big the second keeps;
			// id 2's stored row (2030) is newer than the batch's first
			// record, so the second keeps the stored big.
			line(1, `"one"`, `"2024-01-01"`), line(1, ph, `"2024-01-02"`),
			line(2, `"older"`, `"2024-01-01"`), line(2, ph, `"2031-01-01"`),
		}, `(1, 'stored', '2000-01-01'), (2, 'stored', '2030-01-01')`, []string{"1|one|2024-01-02", "2|stored|2031-01-01"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := newTopic(t, "unavail_in")
			kcatProduce(t, topic, tc.lines)
			var seeded string
			schema, _ := itemSink(t, topic, int64(len(tc.lines)), topology.EnvelopeNone, topology.TombstonesSkip, nil, func(c *pgsink.Config) {
				c.Mode = tc.mode
				c.Columns = []pgsink.Column{{Name: "id", Source: "id"}, {Name: "big", Source: "big"}, {Name: "d", Source: "d"}}
				if tc.name == "version" {
					c.Version = "d"
				}
				seeded = c.Table
				if _, err := pgPool(t).Exec(context.Background(), "INSERT INTO "+c.Table+" (id, big, d) VALUES "+tc.seed); err != nil {
					t.Fatal(err)
				}
			})
			if got := psqlLines(t, "SELECT id, big, d FROM "+seeded+" ORDER BY id"); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("rows %q; want %q", got, tc.want)
			}
			dead := psqlLines(t, "SELECT count(*) FROM "+schema+".dead")
			if dead[0] != fmt.Sprint(tc.dead) {
				t.Fatalf("%s dead letters; want %d", dead[0], tc.dead)
			}
		})
	}
}
