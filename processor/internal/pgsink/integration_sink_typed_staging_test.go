//go:build integration

package pgsink_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// A jsonb column is staged as jsonb, so that Postgres parses the value
// during the COPY: a value jsonb refuses (a \u0000 in a string, 22P05) then
// fails the COPY rather than the INSERT's cast, and must still be its
// record's dead letter, naming the field, with the rest of its batch
// written: in insert mode (the direct path and the staged load) and in
// upsert mode (streamed into the staging table, and prepared first).
func TestSinkJSONBRefusedInStagingCopy(t *testing.T) {
	topic := newTopic(t, "sk_nul_in")
	var lines [][]byte
	for b := range 3 {
		for i := range 10 {
			id := fmt.Sprintf("j%d-%d", b, i)
			extra := ""
			if b == 1 && i == 4 {
				extra = `,"s":"a\u0000b"`
			}
			lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q,"n":%d%s}`, id, id, b*10+i, extra))
		}
	}
	kcatProduce(t, topic, lines)
	n := len(lines)

	for _, tc := range []struct {
		name, mode string
		opts       []pgsink.Option
		prepared   bool
	}{
		{"insert direct", topology.ModeInsert, nil, false},
		{"insert staged", topology.ModeInsert, []pgsink.Option{pgsink.DirectCopy(false)}, false},
		{"upsert streamed", topology.ModeUpsert, nil, false},
		{"upsert prepared", topology.ModeUpsert, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newModeSink(t, "sk_nul", topic, tc.mode, tc.opts...)
			if tc.mode == topology.ModeUpsert {
				d.sink = openUpsert(t, d, topic, "", tc.prepared, tc.opts...)
			}
			if err := runUntil(t, d.sink, int64(n)); err != nil {
				t.Fatal(err)
			}
			st := d.sink.Stats()
			t.Logf("%+v", st)
			if st.Rows != int64(n-1) || st.DeadLettered != 1 {
				t.Errorf("%d rows, %d dead letters; want %d, 1", st.Rows, st.DeadLettered, n-1)
			}
			if rows := sinkRows(t)(d); len(rows) != n { // n-1 and the seed row
				t.Errorf("%d rows, want %d", len(rows), n)
			}
			dead := sinkDeadLetters(t)(d)
			if len(dead) != 1 || !strings.HasPrefix(dead[0], "0|14|j1-4|postgres|22P05|") || !strings.Contains(dead[0], `field "$value" (column "body")`) {
				t.Errorf("dead letters:\n%s\nwant j1-4's, reason postgres, 22P05, naming field $value", strings.Join(dead, "\n"))
			}
		})
	}
}

// A column whose type changes while the sink runs (jsonb to text and back)
// changes the staging table's shape: each batch COPYs into the staging
// table of the shape it was built for, created on its connection where
// missing, and every record is loaded.
func TestSinkStagingShapeFollowsColumnTypes(t *testing.T) {
	topic := newTopic(t, "sk_shape_in")
	d := newModeSink(t, "sk_shape", topic, topology.ModeUpsert)
	d.sink = openUpsert(t, d, topic, "", false)
	pool := pgPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.sink.Run(ctx) }()
	produced := 0
	wave := func(alter string) {
		t.Helper()
		if alter != "" {
			if _, err := pool.Exec(ctx, "ALTER TABLE "+d.schema+".events "+alter); err != nil {
				t.Fatal(err)
			}
		}
		var lines [][]byte
		for i := range 25 {
			id := fmt.Sprintf("s%d", produced+i)
			lines = append(lines, fmt.Appendf(nil, `%s|{"event_id":%q,"n":%d}`, id, id, produced+i))
		}
		produced += len(lines)
		kcatProduce(t, topic, lines)
		deadline := time.Now().Add(time.Minute)
		for d.sink.Stats().Rows < int64(produced) {
			select {
			case err := <-done:
				t.Fatalf("sink stopped: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("sink wrote %+v of %d records", d.sink.Stats(), produced)
			}
		}
	}
	wave("")
	wave("ALTER COLUMN body TYPE text")
	wave("ALTER COLUMN body TYPE jsonb USING body::jsonb")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := d.sink.Stats(); st.Rows != int64(produced) || st.DeadLettered != 0 {
		t.Errorf("%+v, want %d rows and no dead letter", st, produced)
	}
	if rows := sinkRows(t)(d); len(rows) != produced+1 { // and the seed row
		t.Errorf("%d rows, want %d", len(rows), produced+1)
	}
}
