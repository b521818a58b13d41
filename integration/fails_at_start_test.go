//go:build integration

package integration

// Every configuration error that can be found before the first record is
// found then. Each case is a topology
// whose error needs no record to be seen: `validate` must reject what it can
// tell offline, and `run` / `sink` must stop at start, with the input topic
// empty, with an error naming the problem, and never report /readyz 200.

import (
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// failsAtStart starts exactly with args (plus a metrics address) on a
// topology whose input is empty and requires that it exits non-zero within
// 20 s with every string of want in its output, never answering /readyz
// with 200.
func failsAtStart(t *testing.T, env []string, want []string, args ...string) {
	t.Helper()
	addr := freeAddr(t)
	p := start(t, env, append(args, "--metrics-addr="+addr, "--log-level", "info")...)
	deadline := time.Now().Add(20 * time.Second)
	for !p.exited() && time.Now().Before(deadline) {
		if code, body := get(t, "http://"+addr+"/readyz"); code == http.StatusOK {
			t.Fatalf("/readyz answered 200 (%q) with a configuration error that can be found at start; logs:\n%s",
				strings.TrimSpace(body), tail(p.logs.String(), 20))
		}
		time.Sleep(100 * time.Millisecond) // polling an external process
	}
	if !p.exited() {
		t.Fatalf("still running after 20 s with an empty input and a configuration error that can be found at start; logs:\n%s",
			tail(p.logs.String(), 20))
	}
	if p.err == nil {
		t.Fatalf("exited 0; want a non-zero exit; logs:\n%s", tail(p.logs.String(), 20))
	}
	for _, w := range want {
		if !strings.Contains(p.logs.String(), w) {
			t.Errorf("the error does not say %q; logs:\n%s", w, tail(p.logs.String(), 20))
		}
	}
}

// A stage whose transaction_timeout (20m) is above the broker's
// transaction.max.timeout.ms (15 min, the default, as on the shared
// broker) is a fatal error at start, as the README says, not a ready
// stage that fails only when the first record begins a transaction
// (INVALID_TRANSACTION_TIMEOUT).
func TestTransactionTimeoutAboveBrokerMax(t *testing.T) {
	in, out, dlq, stage := uniqueName("ttin"), uniqueName("ttout"), uniqueName("ttdlq"), uniqueName("tt")
	topo := userTopology(t, []fileTopic{{name: in, parts: 2}, {name: out, parts: 2}, {name: dlq, parts: 1}},
		"stages:\n"+jsonStageItem(stage, in, out, dlq, "100ms", 1000))
	raw := strings.Replace(readFile(t, topo), "transaction_timeout: 30s", "transaction_timeout: 20m", 1)
	topo = writeFile(t, "topology-20m.yaml", raw)
	exactlyCmd(t, "validate", topo) // offline it cannot know the broker's limit
	failsAtStart(t, nil, []string{"transaction"}, "run", "--topology", topo, "--instance-id", "i-1")
}

// Sink configuration errors that the broker or the database reveal at start.
func TestSinkErrorsFoundAtStart(t *testing.T) {
	pool := pgPool(t)
	cases := []struct {
		name    string
		setup   func(schema string) // creates the table (schema.events) as the user did
		columns string
		extra   string // extra YAML of the sink (after commit:)
		dsnEnv  func(schema string) []string
		noDLQ   bool // the dead-letter topic is declared but deleted from the broker
		want    []string
	}{
		{
			// 42P10 at the first record; pg_index tells at start.
			name:    "table without a unique index on the event id",
			setup:   func(s string) { pgExec(t, pool, "CREATE TABLE "+s+".events (event_id text, body jsonb)") },
			columns: "{ event_id: event_id, body: $value }",
			want:    []string{"event_id"},
		},
		{
			// 428C9 at the first record; pg_attribute.attgenerated tells at start.
			name: "columns name a generated column",
			setup: func(s string) {
				pgExec(t, pool, "CREATE TABLE "+s+".events (event_id text PRIMARY KEY, v text, vlen int GENERATED ALWAYS AS (length(v)) STORED)")
			},
			columns: "{ event_id: event_id, v: v, vlen: n }",
			want:    []string{"vlen"},
		},
		{
			// 42501 at the first record; has_table_privilege tells at start.
			name: "the sink's role has no INSERT on the table",
			setup: func(s string) {
				role := s + "_ro"
				pgExec(t, pool, "CREATE TABLE "+s+".events (event_id text PRIMARY KEY, body jsonb)")
				pgExec(t, pool, "CREATE ROLE "+role+" LOGIN")
				t.Cleanup(func() { _, _ = pool.Exec(t.Context(), "DROP OWNED BY "+role+"; DROP ROLE IF EXISTS "+role) })
				pgExec(t, pool, "GRANT USAGE, CREATE ON SCHEMA "+s+" TO "+role+"; GRANT SELECT ON "+s+".events TO "+role+
					"; GRANT TEMPORARY ON DATABASE "+dbName(t)+" TO "+role)
			},
			dsnEnv: func(s string) []string {
				return []string{"PG_DSN=" + withUser(t, pgDSN(t), s+"_ro")}
			},
			columns: "{ event_id: event_id, body: $value }",
			want:    []string{"events"},
		},
		{
			// Found only at the first bad record, its dead letter would be
			// retried forever (UNKNOWN_TOPIC_OR_PARTITION) and the good
			// records of its batch never written.
			name:    "the dead-letter topic does not exist on the broker",
			columns: "{ event_id: event_id, body: $value }",
			noDLQ:   true,
			want:    []string{"dlq"},
		},
		{
			// The group join fails with INVALID_SESSION_TIMEOUT (the broker's
			// group.max.session.timeout.ms is 30 min): retried, it would
			// never succeed while /readyz blamed "no partitions assigned yet".
			name:    "session_timeout above the broker's group.max.session.timeout.ms",
			columns: "{ event_id: event_id, body: $value }",
			extra:   "    session_timeout: 2h\n",
			want:    []string{"session"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			schema := freshSchema(t, pool, "start")
			if c.setup != nil {
				c.setup(schema)
			}
			name, in, dlq := uniqueName("start"), uniqueName("start_in"), uniqueName("start_dlq")
			body := "sinks:\n" + jsonSinkItem(name, in, dlq, schema+".events", "", c.columns, "") + c.extra
			topo := userTopology(t, []fileTopic{{name: in, parts: 2}, {name: dlq, parts: 1}}, body)
			if c.noDLQ {
				deleteTopic(t, dlq)
			}
			var env []string
			if c.dsnEnv != nil {
				env = c.dsnEnv(schema)
			}
			failsAtStart(t, env, c.want, "sink", "--topology", topo, "--instance-id", "i-1")
		})
	}
}

// A stage whose dead-letter topic is declared but not on the broker stops
// at start, rather than report ready and stall at the first bad record.
func TestStageMissingDeadLetterTopic(t *testing.T) {
	in, out, dlq, stage := uniqueName("mdin"), uniqueName("mdout"), uniqueName("mddlq"), uniqueName("md")
	topo := userTopology(t, []fileTopic{{name: in, parts: 2}, {name: out, parts: 2}, {name: dlq, parts: 1}},
		"stages:\n"+jsonStageItem(stage, in, out, dlq, "100ms", 1000))
	deleteTopic(t, dlq)
	failsAtStart(t, nil, []string{dlq}, "run", "--topology", topo, "--instance-id", "i-1")
}

// A sink session_timeout below the client's fixed 3 s heartbeat interval
// (2s): `sink` refuses it at start without any network ("heartbeat interval
// 3s is erroneously larger than the session timeout 2s"), so `validate`
// must refuse it too, naming the field and its position.
func TestValidateSessionTimeoutBelowHeartbeat(t *testing.T) {
	name, in, dlq := uniqueName("hb"), uniqueName("hb_in"), uniqueName("hb_dlq")
	body := "sinks:\n" + jsonSinkItem(name, in, dlq, "hb.events", "", "{ event_id: event_id, body: $value }", "") + "    session_timeout: 2s\n"
	raw := "version: 1\nkafka:\n  brokers: [\"127.0.0.1:9092\"]\ntopics:\n  - { name: " + in + ", partitions: 1 }\n  - { name: " + dlq + ", partitions: 1 }\n" + body
	topo := writeFile(t, "topology.yaml", raw)
	out, err := exec.Command(exactlyBin, "validate", topo).CombinedOutput()
	if err == nil {
		t.Fatalf("validate accepted session_timeout 2s, which `exactly sink` refuses at start:\n%s", out)
	}
	if !strings.Contains(string(out), "sinks[0].session_timeout") || !strings.Contains(string(out), topo+":") {
		t.Errorf("validate's error does not name sinks[0].session_timeout at file:line:col:\n%s", out)
	}
}
