//go:build integration

package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
)

// directSink is one in-process sink of a direct-path test, into its own
// schema: table events (event_id text primary key, n bigint, body jsonb,
// seeded with the event "seed-1"), positions, and the dead-letter table
// dead.
type directSink struct {
	name, schema string
	mode         string // the sink's mode; "" for insert
	sink         *pgsink.Sink
}

func newDirectSink(t *testing.T, prefix, input string, opts ...pgsink.Option) *directSink {
	t.Helper()
	return newModeSink(t, prefix, input, "", opts...)
}

// newModeSink is newDirectSink in mode.
func newModeSink(t *testing.T, prefix, input, mode string, opts ...pgsink.Option) *directSink {
	t.Helper()
	pool := pgPool(t)
	ctx := context.Background()
	d := &directSink{name: uniqueName(prefix), schema: uniqueName("it_" + prefix), mode: mode}
	for _, q := range []string{
		"CREATE SCHEMA " + pgx.Identifier{d.schema}.Sanitize(),
		"CREATE TABLE " + d.schema + ".events (event_id text PRIMARY KEY, n bigint, body jsonb)",
		"INSERT INTO " + d.schema + `.events VALUES ('seed-1', -1, '{"seed":true}')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{d.schema}.Sanitize()+" CASCADE")
		}
	})
	d.sink = d.open(t, input, opts...)
	return d
}

// open returns a new instance of d's sink.
func (d *directSink) open(t *testing.T, input string, opts ...pgsink.Option) *pgsink.Sink {
	t.Helper()
	s, err := pgsink.New(pgsink.Config{
		Sink: d.name, InstanceID: "d1", Brokers: []string{brokers(t)},
		Input: input, DeadLetterTable: d.schema + ".dead", DSN: pgDSN(t),
		Table: d.schema + ".events", PositionsTable: d.schema + ".positions", EventID: "event_id",
		Columns:        []pgsink.Column{{Name: "event_id", Source: "event_id"}, {Name: "n", Source: "n"}, {Name: "body", Source: "$value"}},
		CommitInterval: 50 * time.Millisecond, MaxRecords: 10, Mode: d.mode,
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs s until it has accounted for n records (rows, duplicates and
// dead letters), then stops it; or returns the error it stopped with.
func runUntil(t *testing.T, s *pgsink.Sink, n int64) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.After(2 * time.Minute)
	for {
		st := s.Stats()
		if st.Rows+st.Duplicates+st.DeadLettered >= n {
			cancel()
			return <-done
		}
		select {
		case err := <-done:
			return err
		case <-deadline:
			t.Fatalf("sink accounted for %+v of %d records in 2 minutes", st, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// directInput produces to a new 1-partition topic, with kcat, batches of
// 10 records (the sinks' max_records): clean ones, and ones with an event
// ID already in the table, one twice in the batch, a bad bigint (22P02),
// a NUL in a string (22P05 in jsonb) and a number out of bigint's range
// (22003). It returns the topic and the record count.
func directInput(t *testing.T) (string, int) {
	t.Helper()
	topic := newTopic(t, "sp17_direct_in")
	rec := func(id, n string) []byte {
		return fmt.Appendf(nil, `%s|{"event_id":%q,"n":%s,"pad":"tab\there, back\\slash"}`, id, id, n)
	}
	var lines [][]byte
	clean := func(batch int) {
		for i := range 10 {
			lines = append(lines, rec(fmt.Sprintf("b%d-%d", batch, i), fmt.Sprint(batch*10+i)))
		}
	}
	special := func(batch int, pos int, line []byte) {
		clean(batch)
		lines[len(lines)-10+pos] = line
	}
	clean(0)
	clean(1)
	special(2, 3, rec("seed-1", "2")) // already in the table
	clean(3)
	special(4, 5, rec("b4-4", "99")) // twice in the batch: the first wins
	clean(5)
	special(6, 7, rec("b6-7", `"abc"`)) // 22P02
	clean(7)
	special(8, 2, rec("b8-2", "1e30")) // 22003 (or 22P02): not a bigint
	clean(9)
	special(10, 0, rec("b1-1", "3")) // stored by batch 1
	clean(11)
	clean(12)
	kcatProduce(t, topic, lines)
	return topic, len(lines)
}

// The direct path and the staged load give the same table, the same
// counts and the same dead letters (reasons, SQLSTATEs, messages) for
// batches with duplicates in the table, duplicates in the batch and bad
// rows; the direct path wrote the clean batches and fell back for the
// others.
func TestSinkDirectPathSameAsStaged(t *testing.T) {
	topic, n := directInput(t)
	direct, staged := runDirectAndStaged(t, "sp17_direct", "sp17_staged", topic, n)
	ds, ss := direct.sink.Stats(), staged.sink.Stats()
	if ds.DirectCopies == 0 || ds.DirectFallbacks == 0 {
		t.Errorf("direct sink: %d direct copies, %d fallbacks; want both", ds.DirectCopies, ds.DirectFallbacks)
	}
	if ss.DirectCopies != 0 || ss.DirectFallbacks != 0 {
		t.Errorf("staged sink tried the direct path: %+v", ss)
	}
	if ds.Rows != ss.Rows || ds.Duplicates != ss.Duplicates || ds.DeadLettered != ss.DeadLettered {
		t.Errorf("counts differ: direct %+v, staged %+v", ds, ss)
	}
	if ds.Duplicates != 3 || ds.DeadLettered != 2 || ds.Rows != int64(n)-5 {
		t.Errorf("direct: %d rows, %d duplicates, %d dead letters; want %d, 3, 2", ds.Rows, ds.Duplicates, ds.DeadLettered, n-5)
	}
	dead := func(d *directSink) []string {
		return psqlLines(t, `SELECT partition, "offset", key, reason, sqlstate, message FROM `+d.schema+`.dead ORDER BY partition, "offset"`)
	}
	checkSameTables(t, direct, staged, map[string]func(*directSink) []string{"rows": sinkRows(t), "dead letters": dead})
	got := sinkRows(t)(direct)
	if len(got) != n-5+1 { // the seed row
		t.Errorf("%d rows, want %d", len(got), n-5+1)
	}
	for _, want := range []string{`seed-1|-1|{"seed": true}`, `b4-4|44|`, `b1-1|11|`} {
		found := false
		for _, l := range got {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("no row %s...", want)
		}
	}
	for _, l := range dead(direct) {
		if !strings.Contains(l, "|22") {
			t.Errorf("dead letter without a data exception SQLSTATE: %s", l)
		}
	}
}

// A crash before or after the database commit of a batch written by the
// direct path loses and doubles nothing: a restarted sink ends with every
// event once and positions at the end.
func TestSinkDirectPathCrash(t *testing.T) {
	for _, fp := range []string{failpoint.CrashBeforeDBCommit, failpoint.CrashAfterDBCommit} {
		t.Run(fp, func(t *testing.T) {
			topic := newTopic(t, "sp17_crash_in")
			const n = 50
			var lines [][]byte
			for i := range n {
				lines = append(lines, fmt.Appendf(nil, `c-%d|{"event_id":"c-%d","n":%d}`, i, i, i))
			}
			kcatProduce(t, topic, lines)
			crashed := false
			d := newDirectSink(t, "sp17_crash", topic,
				pgsink.WithFailpoints(failpoint.Failpoint{Name: fp, N: 2}), pgsink.WithCrashAction(func() { crashed = true }))
			err := runUntil(t, d.sink, n)
			if !errors.Is(err, failpoint.ErrCrashed) || !crashed {
				t.Fatalf("sink did not crash at %s@2: %v", fp, err)
			}
			// Batch 2 was loaded by the direct path when the failpoint fired.
			if st := d.sink.Stats(); st.DirectCopies < 2 || st.DirectFallbacks != 0 {
				t.Fatalf("before the crash: %+v; want 2 direct copies, no fallback", st)
			}
			var committed int
			if fp == failpoint.CrashAfterDBCommit {
				committed = 20
			} else {
				committed = 10
			}
			if got := psqlLines(t, "SELECT count(*) - 1 FROM "+d.schema+".events")[0]; got != fmt.Sprint(committed) {
				t.Fatalf("after the crash: %s rows, want %d", got, committed)
			}
			again := d.open(t, topic)
			if err := runUntil(t, again, n-int64(committed)); err != nil {
				t.Fatal(err)
			}
			st := again.Stats()
			if st.Duplicates != 0 || st.DirectCopies == 0 {
				t.Errorf("after restart: %+v; want no duplicate, direct copies", st)
			}
			got := psqlLines(t, "SELECT count(*), count(DISTINCT event_id) FROM "+d.schema+".events WHERE event_id LIKE 'c-%'")[0]
			if got != fmt.Sprintf("%d|%d", n, n) {
				t.Errorf("rows, distinct: %s; want %d|%d", got, n, n)
			}
			if pos := psqlLines(t, "SELECT next_offset FROM "+d.schema+".positions")[0]; pos != fmt.Sprint(n) {
				t.Errorf("stored position %s, want %d", pos, n)
			}
		})
	}
}

// Records that fail to decode, in a batch the direct path writes, are
// dead-lettered as the staged load does (same reasons and messages) and
// cost the batch no fallback: they are left out of the COPY as they are
// left out of the load. A batch with a bad JSON and a row Postgres
// rejects falls back once, and ends as the staged load's.
func TestSinkDirectPathDecodeDeadLetters(t *testing.T) {
	topic, n, bad := decodeInput(t)
	direct, staged := runDirectAndStaged(t, "sp17b_decode", "sp17b_decode_staged", topic, n)
	ds, ss := direct.sink.Stats(), staged.sink.Stats()
	if ds.DirectFallbacks != 1 || ds.DirectCopies < 2 {
		t.Errorf("direct sink: %d direct copies, %d fallbacks; want >= 2 and exactly 1 (the batch with a row Postgres rejects)", ds.DirectCopies, ds.DirectFallbacks)
	}
	if ss.Rows != ds.Rows || ss.DeadLettered != ds.DeadLettered {
		t.Errorf("direct %d rows, %d dead letters; staged %d, %d", ds.Rows, ds.DeadLettered, ss.Rows, ss.DeadLettered)
	}
	checkSameTables(t, direct, staged, map[string]func(*directSink) []string{"rows": sinkRows(t), "dead letters": sinkDeadLetters(t)})
	checkDecodeOutcome(t, direct, n, bad)
}

// In upsert mode, where records are decoded inside the COPY into the
// table (the direct path) or into the staging table, the same input ends
// the same either way: rows, and dead letters with prepare's reasons and
// load's SQLSTATE, in offset order.
func TestSinkUpsertStreamDecodeDeadLetters(t *testing.T) {
	topic, n, bad := decodeInput(t)
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct %v", direct), func(t *testing.T) {
			d := newModeSink(t, "sp17b_decode_upsert", topic, "upsert", pgsink.DirectCopy(direct))
			if err := runUntil(t, d.sink, int64(n)); err != nil {
				t.Fatal(err)
			}
			st := d.sink.Stats()
			t.Logf("%+v", st)
			if tried := st.DirectCopies+st.DirectFallbacks != 0; tried != direct || (direct && st.DirectCopies == 0) {
				t.Errorf("upsert sink with the direct path %v: %+v", direct, st)
			}
			checkDecodeOutcome(t, d, n, bad)
		})
	}
}

// runDirectAndStaged runs two sinks over the n records of topic, one with
// the direct path (named by prefix) and one with the staged load only
// (stagedPrefix), and returns them; their stats are logged.
func runDirectAndStaged(t *testing.T, prefix, stagedPrefix, topic string, n int) (direct, staged *directSink) {
	t.Helper()
	direct = newDirectSink(t, prefix, topic)
	staged = newDirectSink(t, stagedPrefix, topic, pgsink.DirectCopy(false))
	for _, d := range []*directSink{direct, staged} {
		if err := runUntil(t, d.sink, int64(n)); err != nil {
			t.Fatalf("sink %s: %v", d.name, err)
		}
	}
	t.Logf("direct %+v", direct.sink.Stats())
	t.Logf("staged %+v", staged.sink.Stats())
	return direct, staged
}

// checkSameTables checks that each of reads (by what it reads) gives the
// same lines for direct as for staged.
func checkSameTables(t *testing.T, direct, staged *directSink, reads map[string]func(*directSink) []string) {
	t.Helper()
	for what, f := range reads {
		a, b := f(direct), f(staged)
		if strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Errorf("%s differ:\ndirect:\n%s\nstaged:\n%s", what, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	}
}

func sinkRows(t *testing.T) func(d *directSink) []string {
	return func(d *directSink) []string {
		return psqlLines(t, "SELECT event_id, n, body::text FROM "+d.schema+".events ORDER BY event_id")
	}
}

func sinkDeadLetters(t *testing.T) func(d *directSink) []string {
	return func(d *directSink) []string {
		return psqlLines(t, `SELECT partition, "offset", convert_from(key, 'UTF8'), reason, coalesce(sqlstate, '-'), message FROM `+d.schema+`.dead ORDER BY partition, "offset"`)
	}
}

// checkDecodeOutcome checks what d made of decodeInput's n records, bad of
// them dead letters.
func checkDecodeOutcome(t *testing.T, d *directSink, n, bad int) {
	t.Helper()
	if st := d.sink.Stats(); st.Rows != int64(n-bad) || st.DeadLettered != int64(bad) || st.Duplicates != 0 {
		t.Errorf("%d rows, %d dead letters, %d duplicates; want %d, %d, 0", st.Rows, st.DeadLettered, st.Duplicates, n-bad, bad)
	}
	rows := sinkRows(t)(d)
	if len(rows) != n-bad+1 { // the seed row
		t.Errorf("%d rows, want %d", len(rows), n-bad+1)
	}
	for _, want := range []string{"d0-0|0|", "d1-5|15|", "d3-8|38|", "d4-9|49|"} {
		found := false
		for _, l := range rows {
			found = found || strings.HasPrefix(l, want)
		}
		if !found {
			t.Errorf("no row %s...", want)
		}
	}
	got := sinkDeadLetters(t)(d)
	if len(got) != bad {
		t.Fatalf("dead letters:\n%s\nwant %d", strings.Join(got, "\n"), bad)
	}
	// Offsets, keys and reasons, in offset order.
	want := []string{"0|14|d1-4|decode|-", "0|17|d1-7|event_id|-", "0|20|d2-0|decode|-", "0|29|d2-9|event_id|-", "0|32|d3-2|postgres|22P02", "0|39|d3-9|decode|-"}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w+"|") {
			t.Errorf("dead letter %d: %s, want %s|...", i, got[i], w)
		}
	}
}

// decodeInput produces to a new 1-partition topic 5 batches of 10 records
// (the sinks' max_records): batches 1 and 2 with records that fail to
// decode or have no event ID, batch 3 with such a record and a row
// Postgres rejects (22P02 in bigint). It returns the topic, the record
// count and the count of dead letters due.
func decodeInput(t *testing.T) (string, int, int) {
	t.Helper()
	topic := newTopic(t, "sp17b_decode_in")
	var lines [][]byte
	for batch := range 5 {
		for i := range 10 {
			id := fmt.Sprintf("d%d-%d", batch, i)
			line := fmt.Appendf(nil, `%s|{"event_id":%q,"n":%d}`, id, id, batch*10+i)
			switch {
			case batch == 1 && i == 4, batch == 2 && i == 0, batch == 3 && i == 9:
				line = fmt.Appendf(nil, `%s|{"event_id":%q,"n":`, id, id) // invalid JSON
			case batch == 1 && i == 7:
				line = fmt.Appendf(nil, `%s|{"n":%d}`, id, i) // no event ID
			case batch == 2 && i == 9:
				line = fmt.Appendf(nil, `%s|[%d]`, id, i) // not an object
			case batch == 3 && i == 2:
				line = fmt.Appendf(nil, `%s|{"event_id":%q,"n":"x"}`, id, id) // 22P02 in bigint
			}
			lines = append(lines, line)
		}
	}
	kcatProduce(t, topic, lines)
	return topic, len(lines), 6
}
