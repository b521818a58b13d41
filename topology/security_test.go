package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// withKafka puts the lines of extra (indented by two spaces, as under
// kafka:) after the brokers on line 3 of head: they start on line 4.
func withKafka(extra string) string {
	return strings.Replace(head, "kafka:\n  brokers: [\"127.0.0.1:9092\"]\n",
		"kafka:\n  brokers: [\"127.0.0.1:9092\"]\n"+extra, 1) + "stages:\n" + stage
}

const testPassword = "s3cr3t-Pa55"

var secEnv = env(map[string]string{"KAFKA_USER": "exactly", "KAFKA_PASSWORD": testPassword, "EMPTY": ""})

func warnings(f *File) []string {
	var out []string
	for _, w := range f.Warnings() {
		out = append(out, w.Error())
	}
	return out
}

// warningCase is a file whose kafka section has the lines extra (as
// withKafka takes them), and the warnings it must give.
type warningCase struct {
	name, extra string
	want        []string
}

// checkKafkaWarnings parses each case with lookup and requires its
// warnings; noSecret checks each warning for a secret it must not show.
func checkKafkaWarnings(t *testing.T, tests []warningCase, lookup func(string) (string, bool), noSecret func(t *testing.T, warning string)) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := warnings(check(t, withKafka(tt.extra), lookup))
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for _, w := range got {
				noSecret(t, w)
			}
		})
	}
}

func TestParseKafkaSecurity(t *testing.T) {
	src := withKafka(`  tls: { ca_file: certs/ca.pem, server_name: kafka.internal }
  sasl:
    mechanism: scram-sha-512
    username: ${KAFKA_USER}
    password: ${KAFKA_PASSWORD}
`)
	f := check(t, src, secEnv)
	want := Kafka{
		Brokers:            []string{"127.0.0.1:9092"},
		ClientID:           "exactly",
		TransactionTimeout: Duration{30 * time.Second},
		TLS:                TLS{Enabled: true, CAFile: filepath.Join("certs", "ca.pem"), ServerName: "kafka.internal"},
		SASL:               SASL{Mechanism: mechanismScramSHA512, Username: "exactly", Password: testPassword},
	}
	if !reflect.DeepEqual(f.Kafka, want) {
		t.Fatalf("got  %+v\nwant %+v", f.Kafka, want)
	}
	if w := warnings(f); w != nil {
		t.Fatalf("unexpected warnings: %q", w)
	}
	if s := fmt.Sprintf("%v %+v %#v", f.Kafka, f.Kafka, f.Kafka); strings.Contains(s, testPassword) {
		t.Fatalf("formatting the settings shows the password: %s", s)
	}
}

func TestParseKafkaFilesResolved(t *testing.T) {
	src := withKafka(`  tls: { ca_file: ca.pem, cert_file: /abs/client.pem, key_file: client.key }
  sasl: { mechanism: PLAIN, username: u, password_file: secrets/kafka }
`)
	f, err := Parse(filepath.Join("deploy", "prod", "t.yaml"), []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("deploy", "prod")
	got := []string{f.Kafka.TLS.CAFile, f.Kafka.TLS.CertFile, f.Kafka.TLS.KeyFile, f.Kafka.SASL.PasswordFile}
	want := []string{filepath.Join(dir, "ca.pem"), "/abs/client.pem", filepath.Join(dir, "client.key"), filepath.Join(dir, "secrets", "kafka")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("paths %q, want %q", got, want)
	}
}

func TestParseKafkaSecurityValidation(t *testing.T) {
	tests := []struct {
		name, extra string
		want        []string
	}{
		{"tls enabled not a bool", "  tls: { enabled: yes }\n",
			[]string{`t.yaml:4:19: kafka.tls.enabled: expected true or false, got "yes"`}},
		{"cert without key", "  tls: { cert_file: c.pem }\n",
			[]string{`t.yaml:4:8: kafka.tls.key_file: required with cert_file (a client certificate needs both)`}},
		{"key without cert", "  tls: { key_file: c.key }\n",
			[]string{`t.yaml:4:8: kafka.tls.cert_file: required with key_file (a client certificate needs both)`}},
		{"empty ca file", "  tls: { ca_file: \"\" }\n",
			[]string{`t.yaml:4:19: kafka.tls.ca_file: must not be empty (or leave ca_file out)`}},
		{"unknown tls field", "  tls: { ca: x }\n",
			[]string{`t.yaml:4:10: kafka.tls.ca: unknown field (valid: enabled, ca_file, cert_file, key_file, server_name, insecure_skip_verify)`}},
		{"sasl without mechanism", "  sasl: { username: u, password: \"${KAFKA_PASSWORD}\" }\n",
			[]string{`t.yaml:4:9: kafka.sasl.mechanism: required (one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM)`}},
		{"unknown mechanism", "  sasl: { mechanism: GSSAPI, username: u, password: \"${KAFKA_PASSWORD}\" }\n",
			[]string{`t.yaml:4:22: kafka.sasl.mechanism: unknown SASL mechanism "GSSAPI" (valid: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM)`}},
		{"no username", "  sasl: { mechanism: SCRAM-SHA-256, password: \"${KAFKA_PASSWORD}\" }\n",
			[]string{`t.yaml:4:9: kafka.sasl.username: required (e.g. username: ${KAFKA_USER})`}},
		{"no password", "  sasl: { mechanism: SCRAM-SHA-256, username: u }\n",
			[]string{`t.yaml:4:9: kafka.sasl.password: required (write password: ${KAFKA_PASSWORD}, or password_file: /path/to/secret)`}},
		{"password and file", "  sasl: { mechanism: SCRAM-SHA-256, username: u, password: \"${KAFKA_PASSWORD}\", password_file: p }\n",
			[]string{`t.yaml:4:96: kafka.sasl.password_file: give password or password_file, not both`}},
		{"empty password from env", "  sasl: { mechanism: SCRAM-SHA-256, username: u, password: \"${EMPTY}\" }\n",
			[]string{`t.yaml:4:60: kafka.sasl.password: must not be empty`}},
		{"unset password variable", "  sasl: { mechanism: SCRAM-SHA-256, username: u, password: \"${NOPE}\" }\n",
			[]string{`t.yaml:4:60: kafka.sasl.password: environment variable "NOPE" is not set`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, withKafka(tt.extra), secEnv, tt.want...)
		})
	}
}

func TestParseSecurityWarnings(t *testing.T) {
	tests := []warningCase{
		{"literal sasl password", "  tls: {}\n  sasl: { mechanism: SCRAM-SHA-512, username: u, password: " + testPassword + " }\n",
			[]string{`t.yaml:5:60: kafka.sasl.password: password written literally in the file (write it as ${KAFKA_PASSWORD}, or use password_file, so that it stays out of version control)`}},
		{"plain without tls", "  sasl: { mechanism: PLAIN, username: u, password: \"${KAFKA_PASSWORD}\" }\n",
			[]string{`t.yaml:4:22: kafka.sasl.mechanism: PLAIN without tls sends the password in clear text (add tls: { enabled: true })`}},
		{"insecure skip verify", "  tls: { insecure_skip_verify: true }\n",
			[]string{`t.yaml:4:32: kafka.tls.insecure_skip_verify: broker certificates are not verified: anyone in the middle can read the traffic and the SASL password (use ca_file instead)`}},
		{"settings of disabled tls", "  tls: { enabled: false, ca_file: ca.pem }\n",
			[]string{`t.yaml:4:19: kafka.tls.enabled: tls is disabled, so its other settings are ignored (remove enabled: false to use them)`}},
		{"password file is fine", "  tls: {}\n  sasl: { mechanism: PLAIN, username: u, password_file: /run/secrets/kafka }\n", nil},
		{"default from the environment is fine", "  tls: {}\n  sasl: { mechanism: PLAIN, username: u, password: \"${KAFKA_PASSWORD:-x}\" }\n", nil},
	}
	checkKafkaWarnings(t, tests, secEnv, func(t *testing.T, w string) {
		if strings.Contains(w, testPassword) {
			t.Fatalf("warning shows the password: %s", w)
		}
	})
}

func TestParseLiteralDSNWarns(t *testing.T) {
	for _, tt := range []struct {
		dsn  string
		warn bool
	}{
		{"postgres://u:" + testPassword + "@db/x", true},
		{"host=db user=u password=" + testPassword, true},
		{"postgres://u@db/x?sslmode=verify-full", false},
		{"${PG_DSN}", false},
	} {
		src := strings.Replace(sinkHead+sink, "${PG_DSN}", fmt.Sprintf("%q", tt.dsn), 1)
		f := check(t, src, env(map[string]string{"PG_DSN": "postgres://u:" + testPassword + "@db/x"}))
		got := warnings(f)
		if (len(got) > 0) != tt.warn {
			t.Errorf("dsn %s: warnings %q, want a warning: %v", tt.dsn, got, tt.warn)
		}
		for _, w := range got {
			if strings.Contains(w, testPassword) {
				t.Errorf("warning shows the password: %s", w)
			}
		}
	}
}

func TestParseRegistrySecurity(t *testing.T) {
	dir := t.TempDir()
	schema := filepath.Join(dir, "o.avsc")
	if err := os.WriteFile(schema, []byte(`{"type":"record","name":"o","fields":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stageWith := func(reg string) string {
		return head + "stages:\n  - name: s\n    input: { topic: in }\n    output:\n      topic: out\n      format: avro\n      schema: " + schema +
			"\n      registry: " + reg + "\n    dead_letter: { topic: dlq }\n"
	}
	f := check(t, stageWith(`{ url: "https://sr:8081", username: u, password_file: sr.pass, ca_file: ca.pem }`), nil)
	r := f.Stages[0].Output.Registry
	if r.PasswordFile != "sr.pass" || r.CAFile != "ca.pem" || r.InsecureSkipVerify {
		t.Fatalf("registry %+v", r)
	}
	check(t, stageWith(`{ url: "http://sr:8081", ca_file: ca.pem }`), nil,
		`t.yaml:15:51: stages[0].output.registry.ca_file: only for an https registry URL`)
	check(t, stageWith(`{ url: "https://sr:8081", password_file: p }`), nil,
		`t.yaml:15:58: stages[0].output.registry.password_file: needs registry.username`)
	f = check(t, stageWith(`{ url: "https://sr:8081", username: u, password: `+testPassword+` }`), nil)
	if got := warnings(f); len(got) != 1 || !strings.Contains(got[0], "registry.password: password written literally") {
		t.Fatalf("warnings %q", got)
	}
}
