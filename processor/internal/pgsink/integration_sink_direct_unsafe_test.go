//go:build integration

package pgsink_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/topology"
)

// Where COPY would store what INSERT refuses, the direct COPY is rolled
// back and the staged INSERT decides, in either mode:
//   - a CHECK calling a function that reads the table: COPY checks a row
//     before the rows buffered ahead of it are in the table;
//   - a mapped column made GENERATED ALWAYS AS IDENTITY while the sink
//     runs: COPY writes it, INSERT refuses it (428C9) and the sink stops;
//   - in upsert mode, UPDATE revoked while the sink runs: COPY needs only
//     INSERT, INSERT ... ON CONFLICT DO UPDATE needs UPDATE (42501).
func TestSinkDirectCopyOnlyWhereInsertWouldWrite(t *testing.T) {
	for _, mode := range []string{topology.ModeInsert, topology.ModeUpsert} {
		t.Run("check reading the table, "+mode, func(t *testing.T) {
			schema := unsafeSchema(t)
			psqlLines(t, fmt.Sprintf(`CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v text);
CREATE FUNCTION %[1]s.taken(text) RETURNS bigint LANGUAGE sql VOLATILE AS $$ SELECT count(*) FROM %[1]s.events WHERE v = $1 $$;
ALTER TABLE %[1]s.events ADD CONSTRAINT v_once CHECK (%[1]s.taken(v) = 0)`, schema))
			topic := newTopic(t, "sk_unsafe_check_in")
			kcatProduce(t, topic, [][]byte{[]byte(`1|{"event_id":"1","v":"x"}`), []byte(`2|{"event_id":"2","v":"x"}`), []byte(`3|{"event_id":"3","v":"y"}`)})
			s := unsafeSink(t, schema, topic, pgDSN(t), mode)
			if err := runUntil(t, s, 3); err != nil {
				t.Fatal(err)
			}
			rows := psqlLines(t, "SELECT string_agg(event_id || '=' || v, ',' ORDER BY event_id) FROM "+schema+".events")
			dead := psqlLines(t, "SELECT string_agg(convert_from(key, 'UTF8') || ':' || sqlstate, ',') FROM "+schema+".dead")
			if rows[0] != "1=x,3=y" || dead[0] != "2:23514" {
				t.Fatalf("rows %s, dead letters %s; want 1=x,3=y and 2:23514 (stats %+v)", rows[0], dead[0], s.Stats())
			}
		})
		t.Run("identity always while running, "+mode, func(t *testing.T) {
			schema := unsafeSchema(t)
			psqlLines(t, "CREATE TABLE "+schema+".events (event_id text PRIMARY KEY, v bigint NOT NULL)")
			topic := newTopic(t, "sk_unsafe_ident_in")
			kcatProduce(t, topic, [][]byte{[]byte(`1|{"event_id":"1","v":100}`), []byte(`2|{"event_id":"2","v":200}`)})
			err := runChanging(t, unsafeSink(t, schema, topic, pgDSN(t), mode), schema, 2,
				"ALTER TABLE "+schema+".events ALTER COLUMN v ADD GENERATED ALWAYS AS IDENTITY (START 1000)",
				func() { kcatProduce(t, topic, [][]byte{[]byte(`11|{"event_id":"11","v":1100}`)}) })
			if err == nil || !strings.Contains(err.Error(), "428C9") {
				t.Fatalf("sink ended with %v; want it stopped with 428C9", err)
			}
			if rows := psqlLines(t, "SELECT string_agg(event_id, ',' ORDER BY event_id) FROM "+schema+".events"); rows[0] != "1,2" {
				t.Fatalf("rows %s; want 1,2", rows[0])
			}
		})
	}
	t.Run("update revoked while running, upsert", func(t *testing.T) {
		schema := unsafeSchema(t)
		role := uniqueName("it_unsafe_role")
		psqlLines(t, fmt.Sprintf(`CREATE ROLE %[2]s LOGIN;
GRANT ALL ON SCHEMA %[1]s TO %[2]s;
CREATE TABLE %[1]s.events (event_id text PRIMARY KEY, v bigint NOT NULL);
GRANT SELECT, INSERT, UPDATE ON %[1]s.events TO %[2]s`, schema, role))
		t.Cleanup(func() {
			psqlLines(t, fmt.Sprintf("DROP SCHEMA IF EXISTS %[1]s CASCADE; DROP OWNED BY %[2]s; DROP ROLE %[2]s", schema, role))
		})
		u, err := url.Parse(pgDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		topic := newTopic(t, "sk_unsafe_priv_in")
		kcatProduce(t, topic, [][]byte{[]byte(`1|{"event_id":"1","v":100}`), []byte(`2|{"event_id":"2","v":200}`)})
		err = runChanging(t, unsafeSink(t, schema, topic, u.String(), topology.ModeUpsert), schema, 2,
			"REVOKE UPDATE ON "+schema+".events FROM "+role,
			func() { kcatProduce(t, topic, [][]byte{[]byte(`11|{"event_id":"11","v":1100}`)}) })
		if err == nil || !strings.Contains(err.Error(), "42501") {
			t.Fatalf("sink ended with %v; want it stopped with 42501", err)
		}
		if rows := psqlLines(t, "SELECT string_agg(event_id, ',' ORDER BY event_id) FROM "+schema+".events"); rows[0] != "1,2" {
			t.Fatalf("rows %s; want 1,2", rows[0])
		}
	})
}

// unsafeSchema creates a schema for one case, dropped when it passes.
func unsafeSchema(t *testing.T) string {
	t.Helper()
	schema := uniqueName("it_unsafe")
	psqlLines(t, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	t.Cleanup(func() {
		if !t.Failed() {
			psqlLines(t, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
	})
	return schema
}

// unsafeSink is a sink of schema.events (event_id, v) in mode.
func unsafeSink(t *testing.T, schema, topic, dsn, mode string) *pgsink.Sink {
	t.Helper()
	s, err := pgsink.New(pgsink.Config{
		Sink: uniqueName("sk_unsafe"), InstanceID: "u1", Brokers: []string{brokers(t)},
		Input: topic, DeadLetterTable: schema + ".dead", DSN: dsn,
		Table: schema + ".events", PositionsTable: schema + ".positions", EventID: "event_id",
		Columns:        []pgsink.Column{{Name: "event_id", Source: "event_id"}, {Name: "v", Source: "v"}},
		CommitInterval: 50 * time.Millisecond, MaxRecords: 10, Mode: mode,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runChanging runs s until it has written n rows, then runs change with
// psql and produce, and returns what s then stopped with (nil if it ran
// on for 10 seconds).
func runChanging(t *testing.T, s *pgsink.Sink, schema string, n int64, change string, produce func()) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for s.Stats().Rows < n {
		select {
		case err := <-done:
			t.Fatalf("sink stopped before %d rows: %v", n, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sink wrote %+v of %d rows in a minute", s.Stats(), n)
		}
	}
	psqlLines(t, change)
	produce()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}
