//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// dbzColumns are the source table's columns after id, in order, with their
// types: each Postgres type that Debezium writes as a Connect logical type
// or a Debezium semantic type, and a text column of large values; b and j
// hold large values now and then (toasted). The sink's target table has the
// same columns and types.
var dbzColumns = []struct{ name, typ string }{
	{"n", "numeric(20,6)"},
	{"d", "date"},
	{"t", "time"},
	{"ts", "timestamp"},
	{"tstz", "timestamptz"},
	{"iv", "interval"},
	{"b", "bytea"},
	{"j", "jsonb"},
	{"u", "uuid"},
	{"big", "text"},
}

// dbzConverter is one way Kafka Connect writes Debezium's events: the
// converter settings of the connector (with the value representations
// that converter needs, as cmd/exactly/docs/debezium.md says), and the
// sink's input format and the settings that mirror the connector's modes.
type dbzConverter struct {
	name   string
	config map[string]string
	input  string // the sink's input: mapping, after the topic
	binary string // the sink's binary_handling; "" for its default
	// modes are the sink's decimal_handling, interval_handling and
	// time_precision lines; "" keeps their defaults (Debezium's).
	modes string
	// refused, when set, is what every dead letter must say: the sink's
	// defaults cannot read the connector's values, and each row becomes a
	// dead letter naming the option instead of a guessed value.
	refused string
}

func dbzConverters(t *testing.T) []dbzConverter {
	jsonConv := func(schemas string) map[string]string {
		return map[string]string{
			"key.converter":                  "org.apache.kafka.connect.json.JsonConverter",
			"key.converter.schemas.enable":   schemas,
			"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
			"value.converter.schemas.enable": schemas,
		}
	}
	// Apicurio's converter, in Confluent's wire format (magic byte, 4-byte
	// ID, no headers), the ID being the content ID that the registry's
	// Confluent API serves (registry.sh turns its legacy ID mode off).
	avro := map[string]string{}
	apicurioURL := strings.Replace(registryURL(t), "/apis/ccompat/v7", "/apis/registry/v2", 1)
	for _, side := range []string{"key", "value"} {
		avro[side+".converter"] = "io.apicurio.registry.utils.converter.AvroConverter"
		for k, v := range map[string]string{
			"url": apicurioURL, "auto-register": "true", "find-latest": "true",
			"as-confluent": "true", "use-id": "contentId", "headers.enabled": "false",
		} {
			avro[side+".converter.apicurio.registry."+k] = v
		}
	}
	// Without a schema in the event, nothing says that a Decimal's base64
	// or a MicroTime's number is one: the sink reads them by settings that
	// mirror the connector's modes. Here decimals, intervals and times as
	// text.
	plain := jsonConv("false")
	plain["decimal.handling.mode"] = "string"
	plain["interval.handling.mode"] = "string"
	plain["time.precision.mode"] = "isostring"
	const plainModes = "\n      decimal_handling: string\n      interval_handling: string\n      time_precision: isostring"
	// Debezium's default interval and time modes (microseconds, days,
	// milli- or microseconds by precision), read by the sink's defaults.
	numbers := jsonConv("false")
	numbers["decimal.handling.mode"] = "string"
	const numbersModes = "\n      decimal_handling: string"
	// Every mode at Debezium's default: a precise decimal's base64 has
	// its scale in the schema only, so each row with one is refused.
	defaults := jsonConv("false")
	// bytea as hex text, without schemas and with them (typed as a
	// string): the sink reads both by its binary_handling. Not base64 or
	// base64-url-safe: there the connector writes null, not its
	// placeholder, for a bytea value it did not capture.
	hexText := maps.Clone(plain)
	hexText["binary.handling.mode"] = "hex"
	hexSchemas := jsonConv("true")
	hexSchemas["binary.handling.mode"] = "hex"
	return []dbzConverter{
		{name: "json", config: plain, input: "format: json", modes: plainModes},
		{name: "json_hex", config: hexText, input: "format: json", binary: "hex", modes: plainModes},
		{name: "json_numbers", config: numbers, input: "format: json", modes: numbersModes},
		{name: "json_defaults", config: defaults, input: "format: json",
			refused: `into a numeric(20,6) column (decimal_handling precise, the connector's decimal.handling.mode): text`},
		{name: "json_schemas", config: jsonConv("true"), input: "format: json"},
		{name: "json_schemas_hex", config: hexSchemas, input: "format: json", binary: "hex"},
		{name: "avro", config: avro, input: `format: avro, registry: { url: "${EXACTLY_REGISTRY_URL}" }`},
	}
}

// A source table in PostgreSQL, captured by Debezium's Postgres connector
// (pgoutput, a replication slot of its own) on a real Kafka Connect worker,
// is loaded by `exactly sink` (envelope: debezium, upsert) into a table of
// the same columns; then the two tables are compared cell by cell and must
// be equal. The rows exist before the connector starts (its snapshot, op r)
// and then change while it streams: inserts, updates that leave the TOASTed
// text, bytea and jsonb values out of the change (REPLICA IDENTITY DEFAULT:
// Debezium writes its unavailable-value placeholder there), updates of
// them, updates to NULL, a
// primary-key change, deletes with their tombstones, a delete and insert
// again of one ID, several changes of one row in one transaction. Each
// converter is a subtest: JSON without schemas (decimals, intervals and
// times as text; bytea as base64, and as hex; Debezium's default interval
// and time numbers, read by the sink's default settings; every mode at its
// default, where each row with a decimal must be a dead letter naming
// decimal.handling.mode), JSON with schemas and bytea as
// hex strings, and with Debezium's defaults (Connect's Decimal, Debezium's Date,
// MicroTime, MicroTimestamp) JSON with schemas and Avro through Apicurio
// Registry's converter in Confluent's wire format (Confluent's own Avro
// converter is not on Maven Central).
func TestDebeziumPostgresSink(t *testing.T) {
	worker := startConnectWorker(t)
	for _, cv := range dbzConverters(t) {
		t.Run(cv.name, func(t *testing.T) {
			t.Parallel()
			checkDebeziumSink(t, worker, cv)
		})
	}
}

// checkDebeziumSink runs one converter's case of TestDebeziumPostgresSink.
func checkDebeziumSink(t *testing.T, worker string, cv dbzConverter) {
	pool := pgPool(t)
	schema := freshSchema(t, pool, "dbz_"+cv.name)
	src, dst := schema+".src", schema+".dst"
	var defs []string
	for _, c := range dbzColumns {
		defs = append(defs, c.name+" "+c.typ)
	}
	cols := "id integer PRIMARY KEY, " + strings.Join(defs, ", ")
	// STORAGE EXTERNAL: a large value is stored out of line uncompressed,
	// so it is TOASTed whatever it compresses to.
	pgExec(t, pool, fmt.Sprintf("CREATE TABLE %s (%s); ALTER TABLE %s REPLICA IDENTITY DEFAULT, ALTER COLUMN big SET STORAGE EXTERNAL, ALTER COLUMN b SET STORAGE EXTERNAL, ALTER COLUMN j SET STORAGE EXTERNAL; CREATE TABLE %s (%s)",
		src, cols, src, dst, cols))

	seed := uint64(time.Now().UnixNano())
	t.Logf("values seed %d", seed)
	g := &dbzRows{rnd: rand.New(rand.NewPCG(seed, 7)), pool: pool, table: src}
	for id := 1; id <= 20; id++ {
		g.insert(t, id)
	}

	prefix := strings.ToLower(uniqueName("dbz_" + cv.name))
	topic := prefix + "." + schema + ".src"
	dlq := prefix + "_dlq"
	var mapping []string
	for _, c := range dbzColumns {
		mapping = append(mapping, c.name+": "+c.name)
	}
	binary := ""
	if cv.binary != "" {
		binary = "\n      binary_handling: " + cv.binary
	}
	topo := userTopology(t, []fileTopic{{name: topic, parts: 3}, {name: dlq, parts: 1}}, fmt.Sprintf(`sinks:
  - name: %s
    input: { topic: %s, %s }
    dead_letter: { topic: %s }
    postgres:
      dsn: ${PG_DSN}
      table: %s
      positions_table: %s.positions
      event_id: id
      mode: upsert
      envelope: debezium%s%s
      columns: { id: id, %s }
    commit: { interval: 100ms, max_records: 1000 }
`, prefix, topic, cv.input, dlq, dst, schema, binary, cv.modes, strings.Join(mapping, ", ")))

	startDebezium(t, worker, prefix, schema+".src", cv.config)
	// The snapshot: one read event per row.
	eventually(t, 2*time.Minute, func() bool { return sumEnds(committedEnds(t, topic)) >= 20 },
		func() string {
			return fmt.Sprintf("%s has %d records, want the snapshot's 20", topic, sumEnds(committedEnds(t, topic)))
		})

	p := startSink(t, topo, "c1")
	if cv.refused != "" {
		checkRefused(t, pool, dlq, dst, cv.refused, g.rowsWithN(t))
		p.stop()
		return
	}

	// Streaming.
	for id := 21; id <= 40; id++ {
		g.insert(t, id)
	}
	for _, id := range []int{1, 2, 3, 4, 12, 13, 21, 22, 23, 24, 32, 33} {
		g.updateSmall(t, id) // b, j, big unchanged: the placeholder where TOASTed
	}
	for _, id := range []int{2, 22} {
		g.updateSmall(t, id) // and again
	}
	for _, id := range []int{3, 23} {
		g.updateToasted(t, id, "big")
	}
	for _, id := range []int{12, 32} {
		g.updateToasted(t, id, "b")
	}
	for _, id := range []int{13, 33} {
		g.updateToasted(t, id, "j")
	}
	g.exec(t, "UPDATE "+src+" SET n = NULL, d = NULL, t = NULL, ts = NULL, tstz = NULL, b = NULL, j = NULL, u = NULL WHERE id IN (5, 25)")
	g.exec(t, "UPDATE "+src+" SET big = NULL WHERE id = 6")
	g.exec(t, "DELETE FROM "+src+" WHERE id IN (7, 27, 4)")
	g.exec(t, "DELETE FROM "+src+" WHERE id = 8")
	g.insert(t, 8)
	// A new primary key: a delete of the old row and a create of the new
	// one. The update sets every toasted column to a short value (stored
	// inline), so the create carries them: one it left out would come as
	// the placeholder, for a row the sink never stored, and nobody, not
	// even Debezium, has its value.
	g.exec(t, "UPDATE "+src+` SET big = 'short', b = '\x01', j = '{"moved": true}', id = 1000 WHERE id = 9`)
	g.exec(t, "UPDATE "+src+" SET id = 1001 WHERE id = 1000")
	// Several changes of one row in one transaction.
	g.txn(t, func(tx pgx.Tx) {
		g.updateSmallIn(t, tx, 10)
		g.updateSmallIn(t, tx, 10)
		g.updateToastedIn(t, tx, 11, "big")
		g.updateSmallIn(t, tx, 11)
	})
	g.exec(t, "UPDATE "+src+" SET n = 1 WHERE id BETWEEN 30 AND 35") // one statement, six rows

	// Until the tables are equal, or the sink has stored the topic's end
	// and neither the difference nor the topic has changed for settle: the
	// connector publishes within a second of each commit here.
	const settle = 15 * time.Second
	var diff []string
	var cells int
	last, since := "", time.Now()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		p.alive()
		diff, cells = compareTables(t, pool, src, dst)
		if len(diff) == 0 {
			break
		}
		now := fmt.Sprint(committedEnds(t, topic)) + strings.Join(diff, "\n")
		if now != last || !positionsTableAtEnd(t, pool, schema+".positions", topic) {
			last, since = now, time.Now()
		} else if time.Since(since) > settle {
			break
		}
	}
	p.stop()
	t.Logf("converter %s: %d mismatches of %d cells", cv.name, len(diff), cells)
	if len(diff) > 0 {
		dead := kcatReadJSON(t, dlq)
		reasons := map[string]int{}
		for _, d := range dead {
			reasons[fmt.Sprintf("%s: %s", d.Headers[deadletter.HeaderReason], d.Headers[deadletter.HeaderError])]++
		}
		var lines []string
		for r, n := range reasons {
			lines = append(lines, fmt.Sprintf("%dx %s", n, r))
		}
		sort.Strings(lines)
		shown := diff
		if len(shown) > 40 {
			shown = append(shown[:40:40], fmt.Sprintf("... %d more", len(diff)-40))
		}
		t.Fatalf("converter %s: the sink's table differs from the source table in %d of %d cells:\n%s\n%d dead letters:\n%s",
			cv.name, len(diff), cells, strings.Join(shown, "\n"), len(dead), strings.Join(lines, "\n"))
	}
}

// checkRefused waits for a dead letter per snapshot row of n with a value
// (want of them), and checks that every dead letter is a decode one that
// says refused, and that no such row reached table dst.
func checkRefused(t *testing.T, pool *pgxpool.Pool, dlq, dst, refused string, want int) {
	t.Helper()
	eventually(t, 2*time.Minute, func() bool { return sumEnds(committedEnds(t, dlq)) >= int64(want) },
		func() string {
			return fmt.Sprintf("%s has %d dead letters, want %d", dlq, sumEnds(committedEnds(t, dlq)), want)
		})
	dead := kcatReadJSON(t, dlq)
	for _, d := range dead {
		if d.Headers[deadletter.HeaderReason] != deadletter.ReasonDecode || !strings.Contains(d.Headers[deadletter.HeaderError], refused) {
			t.Fatalf("dead letter %s: %s; want a decode dead letter saying %q", d.Headers[deadletter.HeaderReason], d.Headers[deadletter.HeaderError], refused)
		}
	}
	var stored int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+dst+" WHERE n IS NOT NULL").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored > 0 || len(dead) != want {
		t.Fatalf("%d rows stored a decimal, %d dead letters; want none and %d", stored, len(dead), want)
	}
	t.Logf("%d dead letters, each saying %q", len(dead), refused)
}

// sumEnds adds up partition offsets.
func sumEnds(ends map[int32]int64) int64 {
	var n int64
	for _, e := range ends {
		n += e
	}
	return n
}

// compareTables compares table dst with table src cell by cell, the rows
// matched by id, each value as Postgres's text of it, and returns one line
// per cell that differs (a row missing on one side is one line) and the
// number of cells compared.
func compareTables(t *testing.T, pool *pgxpool.Pool, src, dst string) (diff []string, cells int) {
	t.Helper()
	a, b := tableText(t, pool, src), tableText(t, pool, dst)
	ids := map[int64]bool{}
	for id := range a {
		ids[id] = true
	}
	for id := range b {
		ids[id] = true
	}
	sorted := make([]int64, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	for _, id := range sorted {
		ra, inA := a[id]
		rb, inB := b[id]
		switch {
		case !inB:
			diff = append(diff, fmt.Sprintf("row id=%d: in the source, missing from the sink's table", id))
			cells += len(dbzColumns)
		case !inA:
			diff = append(diff, fmt.Sprintf("row id=%d: in the sink's table, not in the source (deleted or never there)", id))
			cells += len(dbzColumns)
		default:
			for i, c := range dbzColumns {
				cells++
				if !sameCell(ra[i], rb[i]) {
					diff = append(diff, fmt.Sprintf("row id=%d column %s (%s): source %s, sink %s", id, c.name, c.typ, cellText(ra[i]), cellText(rb[i])))
				}
			}
		}
	}
	return diff, cells
}

// sameCell reports whether two cells of tableText are both NULL or hold
// the same text.
func sameCell(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// tableText returns table's rows by id, each its columns' values as text
// (nil for NULL), in dbzColumns' order; no rows while the table does not
// exist.
func tableText(t *testing.T, pool *pgxpool.Pool, table string) map[int64][]*string {
	t.Helper()
	var sel []string
	for _, c := range dbzColumns {
		sel = append(sel, c.name+"::text")
	}
	rows, err := pool.Query(context.Background(), "SELECT id, "+strings.Join(sel, ", ")+" FROM "+table)
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	out := map[int64][]*string{}
	for rows.Next() {
		var id int64
		vals := make([]*string, len(dbzColumns))
		dest := []any{&id}
		for i := range vals {
			dest = append(dest, &vals[i])
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatalf("read %s: %v", table, err)
		}
		out[id] = vals
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}

// cellText shows a cell in a failure: NULL, or the value quoted, cut in the
// middle when long.
func cellText(v *string) string {
	if v == nil {
		return "NULL"
	}
	s := *v
	if len(s) > 80 {
		s = fmt.Sprintf("%s...(%d bytes)...%s", s[:40], len(s), s[len(s)-20:])
	}
	return fmt.Sprintf("%q", s)
}

// dbzRows writes the source table's rows, with values drawn from edge
// cases of each type.
type dbzRows struct {
	rnd   *rand.Rand
	pool  *pgxpool.Pool
	table string
}

var dbzValues = map[string][]string{
	"n":    {"0", "-1.5", "12345678901234.123456", "0.000001", "-99999999999999.999999", "3.140000", "100"},
	"d":    {"1970-01-01", "1969-12-31", "2024-02-29", "0001-01-01", "9999-12-31", "1900-03-01"},
	"t":    {"00:00:00", "23:59:59.999999", "12:34:56.789012", "00:00:00.000001", "13:00:00.5"},
	"ts":   {"1970-01-01 00:00:00", "1969-12-31 23:59:59.999999", "2024-02-29 13:14:15.123456", "1900-01-01 00:00:00", "2262-04-12 00:00:00.000001", "0001-01-01 00:00:00"},
	"iv":   {"00:00:00", "01:02:03.25", "-00:00:01.5", "838:59:59.5", "-100:00:00"},
	"tstz": {"2024-02-29 13:14:15.123456+02", "1969-12-31 23:59:59.999999+00", "2000-01-01 00:00:00-08", "1900-06-01 12:00:00+01", "9999-12-31 23:59:59+00"},
	"b":    {`\x`, `\x00`, `\x00ff10`, `\xdeadbeef00`, "large"},
	"j":    {`{}`, `[]`, `{"a": [1, 2.50, "x"], "u": "é😀"}`, `null`, `{"big": 12345678901234567890.123, "neg": -0.0}`, `"text"`, `[{"k": {"n": 1e-7}}]`, "large"},
}

// toasted are the columns that may hold a value stored out of line: an
// update that does not set one leaves it out of the change.
var toasted = map[string]bool{"b": true, "j": true, "big": true}

// pick returns one of col's values, or NULL now and then.
func (g *dbzRows) pick(col string) any {
	if g.rnd.IntN(10) == 0 {
		return nil
	}
	switch col {
	case "u":
		var b [16]byte
		for i := range b {
			b[i] = byte(g.rnd.IntN(256))
		}
		return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	case "big":
		return g.bigText()
	}
	vs := dbzValues[col]
	if v := vs[g.rnd.IntN(len(vs))]; v != "large" {
		return v
	}
	return g.large(col)
}

// large returns a value of col (b or j) of 3 to 8 KB, stored out of line.
func (g *dbzRows) large(col string) string {
	text := g.bigText()
	for len(text) < 3000 {
		text = g.bigText()
	}
	if col == "b" {
		return fmt.Sprintf(`\x%x`, text)
	}
	doc, err := json.Marshal(map[string]any{"doc": text, "n": g.rnd.IntN(1000)})
	if err != nil {
		panic(err)
	}
	return string(doc)
}

// bigText returns 3 to 8 KB of text that compresses badly, with non-ASCII
// letters, or now and then a short one (stored inline).
func (g *dbzRows) bigText() string {
	if g.rnd.IntN(8) == 0 {
		return fmt.Sprintf("short %d", g.rnd.IntN(1000))
	}
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 éü€😀\"\\'"
	rs := []rune(letters)
	n := 3000 + g.rnd.IntN(5000)
	var b strings.Builder
	for b.Len() < n {
		b.WriteRune(rs[g.rnd.IntN(len(rs))])
	}
	return b.String()
}

// casts are the SQL parameters of dbzColumns, sent as text.
func casts(from int) []string {
	var out []string
	for i, c := range dbzColumns {
		out = append(out, fmt.Sprintf("$%d::text::%s", from+i, c.typ))
	}
	return out
}

func (g *dbzRows) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := g.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("source: %v\n%s", err, sql)
	}
}

// rowsWithN is the number of the source's rows whose n is not null.
func (g *dbzRows) rowsWithN(t *testing.T) int {
	t.Helper()
	var n int
	if err := g.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+g.table+" WHERE n IS NOT NULL").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (g *dbzRows) insert(t *testing.T, id int) {
	t.Helper()
	args := []any{id}
	for _, c := range dbzColumns {
		args = append(args, g.pick(c.name))
	}
	g.exec(t, fmt.Sprintf("INSERT INTO %s VALUES ($1, %s)", g.table, strings.Join(casts(2), ", ")), args...)
}

// updateSmall changes every column of row id but the toasted ones, which
// the update then leaves out of the change (unchanged TOAST).
func (g *dbzRows) updateSmall(t *testing.T, id int) {
	t.Helper()
	g.txn(t, func(tx pgx.Tx) { g.updateSmallIn(t, tx, id) })
}

func (g *dbzRows) updateSmallIn(t *testing.T, tx pgx.Tx, id int) {
	t.Helper()
	var set []string
	args := []any{id}
	for _, c := range dbzColumns {
		if toasted[c.name] {
			continue
		}
		args = append(args, g.pick(c.name))
		set = append(set, fmt.Sprintf("%s = $%d::text::%s", c.name, len(args), c.typ))
	}
	g.execIn(t, tx, fmt.Sprintf("UPDATE %s SET %s WHERE id = $1", g.table, strings.Join(set, ", ")), args...)
}

// updateToasted gives row id a new large value of the toasted column col
// alone.
func (g *dbzRows) updateToasted(t *testing.T, id int, col string) {
	t.Helper()
	g.txn(t, func(tx pgx.Tx) { g.updateToastedIn(t, tx, id, col) })
}

func (g *dbzRows) updateToastedIn(t *testing.T, tx pgx.Tx, id int, col string) {
	t.Helper()
	v := g.bigText()
	if col != "big" {
		v = g.large(col)
	}
	typ := map[string]string{"b": "bytea", "j": "jsonb", "big": "text"}[col]
	g.execIn(t, tx, fmt.Sprintf("UPDATE %s SET %s = $2::text::%s WHERE id = $1", g.table, col, typ), id, v)
}

func (g *dbzRows) execIn(t *testing.T, tx pgx.Tx, sql string, args ...any) {
	t.Helper()
	if _, err := tx.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("source: %v\n%s", err, sql)
	}
}

// txn runs f in one transaction of the source database and commits it.
func (g *dbzRows) txn(t *testing.T, f func(pgx.Tx)) {
	t.Helper()
	ctx := context.Background()
	tx, err := g.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	f(tx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("source commit: %v", err)
	}
}

// startConnectWorker starts a standalone Kafka Connect worker with the
// Debezium plugins (deploy/local/connect.sh) and returns its REST URL. It is
// stopped when the test ends.
func startConnectWorker(t *testing.T) string {
	t.Helper()
	script := filepath.Join("..", "deploy", "local", "connect.sh")
	name := uniqueName("it-debezium")
	props := writeFile(t, "worker.properties", strings.Join([]string{
		"key.converter=org.apache.kafka.connect.json.JsonConverter",
		"value.converter=org.apache.kafka.connect.json.JsonConverter",
		"offset.flush.interval.ms=1000",
		"bootstrap.servers=" + brokers(t),
	}, "\n")+"\n")
	start := time.Now()
	cmd := exec.Command("bash", script, "start", name, props)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Cleanup(func() {
		if t.Failed() {
			if logs, err := exec.Command("bash", script, "logs", name, "80").Output(); err == nil {
				t.Logf("Connect worker log:\n%s", logs)
			}
		}
		// A failed test's worker keeps its run dir, with the whole log.
		verb := "remove"
		if t.Failed() {
			verb = "stop"
		}
		if out, err := exec.Command("bash", script, verb, name).CombinedOutput(); err != nil {
			t.Errorf("%s the Connect worker: %v\n%s", verb, err, out)
		}
	})
	if err != nil {
		t.Fatalf("connect.sh start: %v\n%s", err, stderr.String())
	}
	fields := strings.Fields(string(out))
	if len(fields) == 0 {
		t.Fatalf("connect.sh start printed no URL\n%s", stderr.String())
	}
	t.Logf("Connect worker up in %.1fs", time.Since(start).Seconds())
	return fields[len(fields)-1]
}

// startDebezium creates a Debezium Postgres connector named name on
// worker, capturing table (schema.table) into topic <name>.<table> with
// converter settings conv, through a replication slot and publication of
// its own; it is deleted, and its slot and publication dropped, when the
// test ends.
func startDebezium(t *testing.T, worker, name, table string, conv map[string]string) {
	t.Helper()
	u, err := url.Parse(pgDSN(t))
	if err != nil {
		t.Fatalf("PG_DSN is not a URL: %v", err)
	}
	pass, _ := u.User.Password()
	if pass == "" {
		pass = "unused" // the local cluster trusts local connections
	}
	cfg := map[string]string{
		"connector.class":             "io.debezium.connector.postgresql.PostgresConnector",
		"plugin.name":                 "pgoutput",
		"database.hostname":           u.Hostname(),
		"database.port":               u.Port(),
		"database.user":               u.User.Username(),
		"database.password":           pass,
		"database.dbname":             strings.TrimPrefix(u.Path, "/"),
		"topic.prefix":                name,
		"table.include.list":          table,
		"slot.name":                   name,
		"publication.name":            name,
		"publication.autocreate.mode": "filtered",
		"slot.drop.on.stop":           "true",
		"snapshot.mode":               "initial",
		"tombstones.on.delete":        "true",
		"topic.creation.default.replication.factor": "1",
		"topic.creation.default.partitions":         "3",
	}
	for k, v := range conv {
		cfg[k] = v
	}
	body, err := json.Marshal(map[string]any{"name": name, "config": cfg})
	if err != nil {
		t.Fatal(err)
	}
	connectREST(t, http.MethodPost, worker+"/connectors", body, http.StatusCreated)
	pool := pgPool(t)
	t.Cleanup(func() {
		connectREST(t, http.MethodDelete, worker+"/connectors/"+name, nil, http.StatusNoContent)
		// The slot holds WAL back for as long as it exists: drop it even when
		// the connector did not (it is dropped on a clean stop).
		eventually(t, time.Minute, func() bool {
			var active int
			_ = pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", name).Scan(&active)
			return active == 0
		}, func() string { return "replication slot " + name + " still active after the connector's delete" })
		_, _ = pool.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", name)
		_, _ = pool.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pgx.Identifier{name}.Sanitize())
	})
	eventually(t, time.Minute, func() bool { return connectorRunning(t, worker, name) },
		func() string { return "connector " + name + " not running: " + connectorStatus(t, worker, name) })
}

// connectREST sends a request to a Connect worker and fails the test
// unless the answer has status want.
func connectREST(t *testing.T, method, url string, body []byte, want int) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d: %s", method, url, resp.Status, want, out)
	}
	return out
}

// connectorStatus returns the worker's status document of connector name.
func connectorStatus(t *testing.T, worker, name string) string {
	t.Helper()
	return string(connectREST(t, http.MethodGet, worker+"/connectors/"+name+"/status", nil, http.StatusOK))
}

// connectorRunning reports whether connector name and its one task run; a
// failed task fails the test with its trace.
func connectorRunning(t *testing.T, worker, name string) bool {
	t.Helper()
	var st struct {
		Connector struct{ State string }
		Tasks     []struct{ State, Trace string }
	}
	raw := connectorStatus(t, worker, name)
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatalf("connector status %s: %v", raw, err)
	}
	for _, task := range st.Tasks {
		if task.State == "FAILED" {
			t.Fatalf("connector %s: task failed:\n%s", name, task.Trace)
		}
	}
	return st.Connector.State == "RUNNING" && len(st.Tasks) == 1 && st.Tasks[0].State == "RUNNING"
}
