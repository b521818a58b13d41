//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sink loads the input topic into Postgres with `exactly sink` (event_id
// text primary key, body jsonb, exactly once), then loads the same rows
// into a table of the same shape with one plain COPY, as
// integration/sink_bench_test.go's BenchmarkSinkVsCopy does.
func (r *runner) sink(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, r.cfg.pgDSN)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer pool.Close()
	sinkSchema, upsertSchema, copySchema := r.k.name("sink"), r.k.name("upsert"), r.k.name("copy")
	handSchema := r.k.name("hand_upsert")
	if !r.cfg.keep {
		defer func() {
			for _, s := range []string{sinkSchema, upsertSchema, copySchema, handSchema} {
				if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
					logf("drop schema %s: %v", s, err)
				}
			}
		}()
	}
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err == nil {
		r.rep.Machine.Postgres = version
	}

	r.sinkCase(ctx, pool, sinkSchema, "insert", false)
	r.sinkCase(ctx, pool, upsertSchema, "upsert", false)
	r.sinkCase(ctx, pool, upsertSchema, "upsert", true)
	r.copyCase(ctx, pool, copySchema)
	r.handUpsertCase(ctx, pool, handSchema, false)
	r.handUpsertCase(ctx, pool, handSchema, true)
	if !r.cfg.jdbc {
		return nil
	}
	want := map[string]string{}
	for mode, schema := range map[string]string{"insert": sinkSchema, "upsert": upsertSchema} {
		if d, err := tableDigest(ctx, pool, pgx.Identifier{schema, "events"}); err == nil {
			want[mode] = d
		}
	}
	return r.jdbc(ctx, pool, want)
}

// sinkCase runs the sink case in mode ("insert" or "upsert") into schema;
// into its table as an upsert case left it when update (a sink of
// another name, which reads the input from the start: every key is
// stored, every row an update).
func (r *runner) sinkCase(ctx context.Context, pool *pgxpool.Pool, schema, mode string, update bool) {
	name, tag := caseSink, mode
	switch {
	case update:
		name, tag = caseSinkUpdate, mode+"_update"
	case mode == "upsert":
		name = caseSinkUpsert
	}
	res := caseResult{Name: name, Group: "sink", Records: r.total, Note: "1 instance, commit 100ms, default max_records, mode " + mode}
	if update {
		res.Note += ", into the upsert case's table"
	}
	defer func() { r.rep.add(res) }()
	logf("%s", name)
	dlq, err := r.k.topic(ctx, "sink_dlq_"+tag, 1)
	if err == nil {
		err = r.k.awaitTopics(ctx, dlq)
	}
	if err != nil {
		res.Error = err.Error()
		return
	}
	sinkName := r.k.name("sink_" + tag)
	r.k.group("exactly-sink-" + sinkName)
	table, positions := schema+".events", schema+".positions"
	yaml := fmt.Sprintf(`version: 1
kafka:
  brokers: %s
topics:
  - { name: %s, partitions: %d }
  - { name: %s, partitions: 1 }
sinks:
  - name: %s
    input: { topic: %s, format: json }
    dead_letter: { topic: %s }
    postgres:
      dsn: ${PG_DSN}
      table: %s
      positions_table: %s
      event_id: event_id
      columns: { event_id: event_id, body: $value }
      mode: %s
    commit: { interval: %s }
`, r.brokersYAML(), r.input, r.cfg.partitions, dlq, sinkName, r.input, dlq, table, positions, mode, commitInterval)
	path := filepath.Join(r.dir, "sink_"+tag+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		res.Error = err.Error()
		return
	}
	args := []string{"sink", "--topology", path, "--instance-id", "b1", "--log-level", "warn"}
	prof := ""
	if r.cfg.sinkProfile != "" {
		prof = filepath.Join(r.dir, "sink_"+tag+".prof")
		args = append(args, "--cpu-profile", prof)
	}
	p, err := startProc(r.dir, "sink_"+tag, nil, r.bin, args...)
	if err != nil {
		res.Error = err.Error()
		return
	}
	q := "SELECT coalesce(sum(next_offset), 0) FROM " + pgx.Identifier{schema, "positions"}.Sanitize() + " WHERE topic = $1 AND sink = $2"
	progress := func(ctx context.Context) (int64, error) {
		var n int64
		err := pool.QueryRow(ctx, q, r.input, sinkName).Scan(&n)
		return n, err
	}
	m, perr, ok := r.watchStop(ctx, &res, progress, p)
	if !ok {
		return
	}
	if perr != nil {
		res.Note += fmt.Sprintf("; exit: %v", perr)
	}
	var rows int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "events"}.Sanitize()).Scan(&rows); err != nil || rows != r.total {
		res.Error = fmt.Sprintf("table has %d rows, want %d (%v)", rows, r.total, err)
		return
	}
	res.measure(m, p)
	if prof != "" {
		if err := r.writeTop(ctx, prof, fmt.Sprintf("%s_%s.top", r.cfg.sinkProfile, tag),
			fmt.Sprintf("# %s, %d records: %.0f records/s, %.1f CPU s", name, r.total, res.RecordsPerS, res.CPUS)); err != nil {
			res.Note += fmt.Sprintf("; profile: %v", err)
		}
	}
}

// writeTop writes head and `go tool pprof -top` of the CPU profile prof
// to file.
func (r *runner) writeTop(ctx context.Context, prof, file, head string) error {
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", r.bin, prof).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w: %s", err, top)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, append([]byte(head+"\n"), top...), 0o644)
}

// copyCase is the plain COPY the sink is measured against: one pgx
// CopyFrom of every row.
func (r *runner) copyCase(ctx context.Context, pool *pgxpool.Pool, schema string) {
	res := caseResult{Name: caseCopy, Group: "sink", Records: r.total, Note: "one pgx CopyFrom of the same rows, rows prepared in memory"}
	r.loadCase(ctx, pool, schema, true, &res, func(ctx context.Context, tbl pgx.Identifier, rows [][]any) (int64, error) {
		return pool.CopyFrom(ctx, tbl, eventColumns, pgx.CopyFromRows(rows))
	})
}

// handUpsertCase is the upsert as a hand-written loader does it, the
// fastest way Postgres offers: per batch of the sink's max_records, one
// transaction that COPYs the batch (pgx binary CopyFrom) into a temporary
// table of the target's types and INSERTs it with ON CONFLICT DO UPDATE.
// No event ID check, no casts, no positions: the limit the sink's upsert
// is measured against. With update, into the table the case filled
// before: every row an update.
func (r *runner) handUpsertCase(ctx context.Context, pool *pgxpool.Pool, schema string, update bool) {
	res := caseResult{Name: caseHandUpsert, Group: "sink", Records: r.total,
		Note: fmt.Sprintf("per %d rows: BEGIN, pgx CopyFrom into a temp table, INSERT ... ON CONFLICT DO UPDATE, COMMIT; rows prepared in memory", sinkMaxRecords)}
	if update {
		res.Name, res.Note = caseHandUpdate, res.Note+"; into the table it filled"
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		res.Error = err.Error()
		r.rep.add(res)
		return
	}
	defer conn.Release()
	r.loadCase(ctx, pool, schema, !update, &res, func(ctx context.Context, tbl pgx.Identifier, rows [][]any) (int64, error) {
		const staging = "bench_hand_upsert"
		upsert := "INSERT INTO " + tbl.Sanitize() + " (event_id, body) SELECT event_id, body FROM " + staging +
			" ON CONFLICT (event_id) DO UPDATE SET body = EXCLUDED.body"
		if _, err := conn.Exec(ctx, "CREATE TEMPORARY TABLE IF NOT EXISTS "+staging+" (event_id text, body jsonb) ON COMMIT DELETE ROWS"); err != nil {
			return 0, err
		}
		var n int64
		for from := 0; from < len(rows); from += sinkMaxRecords {
			batch := rows[from:min(from+sinkMaxRecords, len(rows))]
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.CopyFrom(ctx, pgx.Identifier{staging}, eventColumns, pgx.CopyFromRows(batch)); err != nil {
					return err
				}
				tag, err := tx.Exec(ctx, upsert)
				n += tag.RowsAffected()
				return err
			})
			if err != nil {
				return n, fmt.Errorf("upsert rows %d..: %w", from, err)
			}
		}
		return n, nil
	})
}

// eventColumns are the columns of the sink group's events tables.
var eventColumns = []string{"event_id", "body"}

// createEvents creates schema and in it the events table the sink group
// loads (the sink's shape: event_id text primary key, body jsonb).
func createEvents(ctx context.Context, pool *pgxpool.Pool, schema string) (pgx.Identifier, error) {
	tbl := pgx.Identifier{schema, "events"}
	for _, q := range []string{
		"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		"CREATE TABLE " + tbl.Sanitize() + " (event_id text PRIMARY KEY, body jsonb)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	return tbl, nil
}

// loadCase runs a reference load of the sink group into schema.events,
// which it creates when create, and adds its result res: the input's
// rows, prepared in memory before the clock starts, written by load,
// which returns how many it wrote.
func (r *runner) loadCase(ctx context.Context, pool *pgxpool.Pool, schema string, create bool, res *caseResult,
	load func(ctx context.Context, tbl pgx.Identifier, rows [][]any) (int64, error)) {
	defer func() { r.rep.add(*res) }()
	logf("%s", res.Name)
	tbl := pgx.Identifier{schema, "events"}
	if create {
		var err error
		if tbl, err = createEvents(ctx, pool, schema); err != nil {
			res.Error = err.Error()
			return
		}
	}
	rows := make([][]any, r.total)
	for i := range rows {
		rows[i] = []any{eventID(i), value(i)}
	}
	start := time.Now()
	n, err := load(ctx, tbl, rows)
	elapsed := time.Since(start)
	if err != nil || n != r.total {
		res.Error = fmt.Sprintf("load: %d rows, want %d (%v)", n, r.total, err)
		return
	}
	res.RecordsPerS = float64(n) / elapsed.Seconds()
	res.WallS = elapsed.Seconds()
}
