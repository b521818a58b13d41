//go:build integration

package pgsink_test

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// A database of another encoding than UTF8 gets the records' text as
// they mean it: the sink's sessions send UTF-8 (client_encoding, whatever
// the database's default), so Postgres converts it, and a character the
// encoding cannot hold fails its record alone (22P05), a dead letter. In
// SQL_ASCII, which converts nothing, a jsonb \u escape beyond ASCII fails
// with 0A000 (feature not supported): it follows its record, which is
// dead-lettered, and the records around it load.
func TestSinkDatabaseEncodings(t *testing.T) {
	topic := newTopic(t, "sk_enc_in")
	kcatProduce(t, topic, [][]byte{
		[]byte(`e0|{"event_id":"e0","t":"café","jb":{"s":"é"}}`),
		[]byte(`e1|{"event_id":"e1","t":"€"}`),
		[]byte(`e2|{"event_id":"e2","t":"plain","jb":{"a":"\u00e9"}}`),
		[]byte(`e3|{"event_id":"e3","t":"end","jb":{"a":"y"}}`),
	})
	for _, tc := range []struct {
		encoding string
		// rows is event_id|t as UTF-8 hex|jb, for the stored rows; dead
		// is event_id|sqlstate, for the dead letters.
		rows, dead []string
	}{
		{"LATIN1",
			[]string{`e0|636166c3a9|{"s": "é"}`, `e2|706c61696e|{"a": "é"}`, `e3|656e64|{"a": "y"}`},
			[]string{"e1|22P05"}},
		{"SQL_ASCII",
			[]string{`e0|636166c3a9|{"s": "é"}`, `e1|e282ac|`, `e3|656e64|{"a": "y"}`},
			[]string{"e2|0A000"}},
	} {
		for _, mode := range []string{topology.ModeInsert, topology.ModeUpsert} {
			t.Run(tc.encoding+" "+mode, func(t *testing.T) {
				dsn := encodedDatabase(t, tc.encoding)
				psqlAt(t, dsn, "CREATE TABLE public.events (event_id text PRIMARY KEY, t text, jb jsonb)")
				s, err := pgsink.New(pgsink.Config{
					Sink: uniqueName("sk_enc"), InstanceID: "e1", Brokers: []string{brokers(t)},
					Input: topic, DeadLetterTable: "public.dead", DSN: dsn,
					Table: "public.events", PositionsTable: "public.positions", EventID: "event_id",
					Columns:        []pgsink.Column{{Name: "event_id", Source: "event_id"}, {Name: "t", Source: "t"}, {Name: "jb", Source: "jb"}},
					CommitInterval: 50 * time.Millisecond, MaxRecords: 10, Mode: mode,
				})
				if err != nil {
					t.Fatal(err)
				}
				if err := runUntil(t, s, 4); err != nil {
					t.Fatal(err)
				}
				rows := psqlAt(t, dsn, "SELECT event_id || '|' || encode(convert_to(t, 'UTF8'), 'hex') || '|' || coalesce(jb::text, '') FROM events ORDER BY event_id")
				dead := psqlAt(t, dsn, "SELECT convert_from(key, 'UTF8') || '|' || sqlstate FROM dead ORDER BY \"offset\"")
				if !slices.Equal(rows, tc.rows) || !slices.Equal(dead, tc.dead) {
					t.Fatalf("rows %q, dead letters %q; want %q, %q", rows, dead, tc.rows, tc.dead)
				}
			})
		}
	}
}

// encodedDatabase creates a database of encoding enc, dropped when the
// test ends, and returns PG_DSN naming it.
func encodedDatabase(t *testing.T, enc string) string {
	t.Helper()
	name := uniqueName("it_enc_" + strings.ToLower(enc))
	psqlLines(t, fmt.Sprintf("CREATE DATABASE %s ENCODING '%s' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'", pgx.Identifier{name}.Sanitize(), enc))
	t.Cleanup(func() { psqlLines(t, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") })
	u, err := url.Parse(pgDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// psqlAt is psqlLines against dsn; no output is no line.
func psqlAt(t *testing.T, dsn, query string) []string {
	t.Helper()
	cmd := exec.Command("psql", dsn, "-X", "-At", "-c", query)
	cmd.Env = append(os.Environ(), "PGCLIENTENCODING=UTF8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("psql %q: %v\n%s", query, err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return strings.Split(s, "\n")
	}
	return nil
}
