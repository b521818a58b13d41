package topology

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sinkWithDSN is head and a sink pg whose postgres.dsn is dsn, on line 13.
func sinkWithDSN(dsn string) string {
	return head + `sinks:
  - name: pg
    input: { topic: out }
    dead_letter: { topic: dlq }
    postgres:
      dsn: ` + dsn + `
      table: raw.events
      event_id: id
      columns: { id: $key }
`
}

// TestOfflineNeedsNoSecrets: validating a file where it will not run
// (LoadOffline) needs none of the variables it refers to, and does not
// parse a connection string taken from the environment; running it
// (Parse, Load) still stops on an unset variable and a DSN pgx cannot
// parse.
func TestOfflineNeedsNoSecrets(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		env       map[string]string
		online    []string // Parse's errors; offline there are none
	}{
		{"unset dsn", sinkWithDSN("${PG_DSN}"), nil,
			[]string{`t.yaml:13:12: sinks[0].postgres.dsn: environment variable "PG_DSN" is not set`}},
		{"dsn that is not one", sinkWithDSN("${PG_DSN}"), map[string]string{"PG_DSN": "x"},
			[]string{`t.yaml:13:12: sinks[0].postgres.dsn: not a valid connection string (want postgres://user@host:port/db?sslmode=... or key=value pairs)`}},
		{"unset partitions", strings.Replace(head, "{ name: in,  partitions: 1 }", `{ name: in,  partitions: "${IN_PARTITIONS}" }`, 1) + "stages:\n" + stage, nil,
			[]string{`t.yaml:5:30: topics[0].partitions: environment variable "IN_PARTITIONS" is not set`}},
		{"sasl password", strings.Replace(head, `brokers: ["127.0.0.1:9092"]`,
			"brokers: [\"127.0.0.1:9092\"]\n  tls: {}\n  sasl: { mechanism: SCRAM-SHA-512, username: u, password: \"${KAFKA_PASSWORD}\" }", 1) + "stages:\n" + stage, nil,
			[]string{`t.yaml:5:60: kafka.sasl.password: environment variable "KAFKA_PASSWORD" is not set`}},
		{"aws credentials from the environment", strings.Replace(head, `brokers: ["127.0.0.1:9092"]`,
			"brokers: [\"127.0.0.1:9092\"]\n  tls: {}\n  sasl: { mechanism: AWS_MSK_IAM }", 1) + "stages:\n" + stage, nil,
			[]string{`t.yaml:5:9: kafka.sasl.aws: required: AWS_MSK_IAM takes its credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones), which are not both set; set them, or write aws: { access_key_id: ${...}, secret_access_key: ${...} }`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, tc.src, env(tc.env), tc.online...)
			f, err := parse("t.yaml", []byte(tc.src), env(tc.env), true)
			if err != nil || f == nil {
				t.Fatalf("offline: %v", err)
			}
		})
	}
}

// TestOfflineStillChecks: offline, what does not depend on the unknown
// values is checked as ever, and a literal DSN is still parsed.
func TestOfflineStillChecks(t *testing.T) {
	src := strings.Replace(sinkWithDSN(`"not a dsn"`), "table: raw.events", "table: events", 1)
	_, err := parse("t.yaml", []byte(src), env(nil), true)
	got := strings.Join(messages(t, err), "\n")
	for _, want := range []string{
		`t.yaml:13:12: sinks[0].postgres.dsn: not a valid connection string`,
		`t.yaml:14:14: sinks[0].postgres.table: invalid table "events"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("offline errors:\n%s\nwant %s", got, want)
		}
	}
	_, err = parse("t.yaml", []byte(sinkWithDSN("${PG_DSN")), env(nil), true)
	if got := strings.Join(messages(t, err), "\n"); !strings.Contains(got, "unterminated ${") {
		t.Errorf("offline errors:\n%s\nwant the malformed reference", got)
	}
}

func TestLoadOffline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.yaml")
	if err := os.WriteFile(path, []byte(sinkWithDSN("${EXACTLY_TEST_UNSET_DSN}")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOffline(path); err != nil {
		t.Errorf("LoadOffline: %v", err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), `environment variable "EXACTLY_TEST_UNSET_DSN" is not set`) {
		t.Errorf("Load = %v, want the unset variable", err)
	}
}

// TestStageKeyIsAFieldName: a stage's key is a field name; an expression
// there is refused with a pointer to the key step, which takes one.
func TestStageKeyIsAFieldName(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"value.customer_id", `t.yaml:13:10: stages[0].key: "value.customer_id" is not a field name: a stage's key names a top-level field of the output value (for an expression, add a transform step instead: - key: value.customer_id)`},
		{`"string(value.id)"`, `t.yaml:13:10: stages[0].key: "string(value.id)" is not a field name: a stage's key names a top-level field of the output value (for an expression, add a transform step instead: - key: string(value.id))`},
		{"customer.id", `t.yaml:13:10: stages[0].key: "customer.id" is not a field name: a stage's key names a top-level field of the output value (for an expression, add a transform step instead: - key: customer.id)`},
	} {
		t.Run(tc.key, func(t *testing.T) {
			check(t, head+"stages:\n"+stage+"    key: "+tc.key+"\n", nil, tc.want)
		})
	}
	for _, key := range []string{"customer_id", "event-id", "ID"} {
		check(t, head+"stages:\n"+stage+"    key: "+key+"\n", nil)
	}
}
