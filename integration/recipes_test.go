//go:build integration

package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// recipeTopology writes the recipe's topology file dir/file with each old
// name replaced by its new one (unique topics, sink and schema, so that
// runs do not meet), creates its topics, and drops schema when the test
// passes. It returns the file's path.
func recipeTopology(t *testing.T, dir, file, schema string, names ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "deploy", "examples", "recipes", dir, file))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.NewReplacer(names...).Replace(string(data))
	path := writeFile(t, file, text)
	exactlyCmd(t, "topics", "create", path)
	pool := pgPool(t)
	t.Cleanup(func() {
		if !t.Failed() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
	})
	return path
}

// recipeRows returns the rows of table, cols joined by '|', ordered by id.
func recipeRows(t *testing.T, pool *pgxpool.Pool, cols, table string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT concat_ws('|', "+cols+") FROM "+table+" ORDER BY id")
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	return out
}

// TestRecipePostgresUpsert runs the recipe postgres-upsert, stage and
// sink, on the updates of its README: the table keeps each customer's
// update of the greatest version, whatever came after it.
func TestRecipePostgresUpsert(t *testing.T) {
	t.Parallel()
	p, schema := uniqueName("rcp_upsert"), uniqueName("it_rcp_upsert")
	topo := recipeTopology(t, "postgres-upsert", "postgres-upsert.yaml", schema,
		"app.customers", schema+".customers", "customers.", p+".", "customers-pg", p+"-pg", "key-by-customer", p+"-key")
	kcatPut(t, kcatBrokers(t), p+".updates", kcatLines([][]byte{
		[]byte(`|{"id":"c-1","name":"Ada","email":"ada@old.example","version":1}`),
		[]byte(`|{"id":"c-2","name":"Bob","email":"bob@example.com","version":1}`),
		[]byte(`|{"id":"c-1","name":"Ada","email":"ada@example.com","version":3}`),
		[]byte(`|{"id":"c-1","name":"Ada L.","email":"ada@stale.example","version":2}`),
	}))
	stage := start(t, nil, "run", "--topology", topo, "--instance-id", "r1")
	sink := startSink(t, topo, "r1")
	pool := pgPool(t)
	// A partition the stage wrote nothing to has no stored position.
	atEnd := func() bool {
		stored := storedPositions(t, pool, schema+".exactly_positions", p+".latest")
		for part, end := range committedEnds(t, p+".latest") {
			if end > 0 && stored[part] != end {
				return false
			}
		}
		return kcatCount(t, p+".latest") == 4
	}
	eventually(t, 2*time.Minute, atEnd, func() string { return "the stage's 4 outputs loaded" })
	stage.stop()
	sink.stop()
	got := strings.Join(recipeRows(t, pool, "id, name, email, v", schema+".customers"), ",")
	if want := "c-1|Ada|ada@example.com|3,c-2|Bob|bob@example.com|1"; got != want {
		t.Fatalf("rows %q, want %q", got, want)
	}
}

// TestRecipeDebeziumPostgres runs the recipe debezium-postgres on its
// changes.txt, as its README does: the replica holds rows 1 and 3, and
// the event of op t is the one dead letter.
func TestRecipeDebeziumPostgres(t *testing.T) {
	t.Parallel()
	p, schema := uniqueName("rcp_cdc"), uniqueName("it_rcp_cdc")
	in := p + ".public.accounts"
	topo := recipeTopology(t, "debezium-postgres", "debezium-postgres.yaml", schema,
		"dbserver1.public.accounts", in, "accounts.sink-dlq", p+".dlq", "replica.accounts", schema+".accounts", "accounts-replica", p+"-replica")
	changes, err := os.ReadFile(filepath.Join("..", "deploy", "examples", "recipes", "debezium-postgres", "changes.txt"))
	if err != nil {
		t.Fatal(err)
	}
	kcatProduce(t, in, bytes.Split(bytes.TrimSuffix(changes, []byte("\n")), []byte("\n")))
	sink := startSink(t, topo, "r1")
	pool := pgPool(t)
	eventually(t, 2*time.Minute, func() bool { return positionsTableAtEnd(t, pool, schema+".exactly_positions", in) },
		func() string { return "the sink at the end of " + in })
	sink.stop()
	got := strings.Join(recipeRows(t, pool, "id, owner, balance", schema+".accounts"), ",")
	if want := "1|alice|80.00,3|carol|12.50"; got != want {
		t.Fatalf("rows %q, want %q", got, want)
	}
	dl := kcatReadJSON(t, p+".dlq")
	if len(dl) != 1 || dl[0].Headers["exactly.dlq.reason"] != "envelope" || !strings.Contains(dl[0].Headers["exactly.dlq.error"], `"t"`) {
		t.Fatalf("dead letters %+v, want the one event of op t, reason envelope", dl)
	}
}

// TestRecipeSessionWindows runs the recipe session-windows on the views
// of its README: u-1's two views make one session, which u-9's view an
// hour later closes; with emit update, the second view retracts the
// session of the first.
func TestRecipeSessionWindows(t *testing.T) {
	t.Parallel()
	views := [][]byte{
		[]byte(`u-1|{"page":"home","ts":1767261600000}`),
		[]byte(`u-1|{"page":"search","ts":1767261720000}`),
		[]byte(`u-9|{"page":"home","ts":1767265200000}`),
	}
	for _, tc := range []struct {
		file, out string
		want      []string
	}{
		{"session-windows.yaml", "views.sessions", []string{
			`{"key":"u-1","window":{"start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:02:00Z","start_ms":1767261600000,"end_ms":1767261720000},"results":{"first_page":"home","last_page":"search","views":2}}`,
		}},
		{"session-windows-update.yaml", "views.session-updates", []string{
			`{"key":"u-1","window":{"start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:00:00Z","start_ms":1767261600000,"end_ms":1767261600000},"results":{"first_page":"home","last_page":"home","views":1}}`,
			`{"key":"u-1","window":{"start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:00:00Z","start_ms":1767261600000,"end_ms":1767261600000},"results":null}`,
			`{"key":"u-1","window":{"start":"2026-01-01T10:00:00Z","end":"2026-01-01T10:02:00Z","start_ms":1767261600000,"end_ms":1767261720000},"results":{"first_page":"home","last_page":"search","views":2}}`,
			`{"key":"u-9","window":{"start":"2026-01-01T11:00:00Z","end":"2026-01-01T11:00:00Z","start_ms":1767265200000,"end_ms":1767265200000},"results":{"first_page":"home","last_page":"home","views":1}}`,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			p := uniqueName("rcp_sess")
			topo := recipeTopology(t, "session-windows", tc.file, uniqueName("it_rcp_sess"),
				"{ name: views,", "{ name: "+p+".views,", "topic: views }", "topic: "+p+".views }",
				"{ name: "+tc.out+",", "{ name: "+p+".out, config: { retention.ms: \"-1\" },", // results of 2026-01-01
				"topic: "+tc.out+" }", "topic: "+p+".out }", "views.dlq", p+".dlq", "- name: session", "- name: "+p+"-session")
			kcatProduce(t, p+".views", views)
			stage := start(t, nil, "run", "--topology", topo, "--instance-id", "r1")
			eventually(t, 2*time.Minute, func() bool { return kcatCount(t, p+".out") >= len(tc.want) },
				func() string { return "the session results" })
			stage.stop()
			var got []string
			for _, r := range kcatRead(t, p+".out") {
				got = append(got, r.Value)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("results:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if n := kcatCount(t, p+".dlq"); n != 0 {
				t.Fatalf("%d dead letters, want 0", n)
			}
		})
	}
}
