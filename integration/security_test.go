//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// saslService is Kafka's SASL_SSL listener (SCRAM-SHA-512; PLAIN for
// kcat) as deploy/local/up.sh writes it to the env file.
type saslService struct {
	brokers, ca, user, password string
}

func sasl(t testing.TB) saslService {
	t.Helper()
	s := saslService{os.Getenv("EXACTLY_SASL_BROKERS"), os.Getenv("EXACTLY_CA_FILE"), os.Getenv("KAFKA_USER"), os.Getenv("KAFKA_PASSWORD")}
	if s.brokers == "" || s.ca == "" || s.user == "" || s.password == "" {
		t.Fatal("EXACTLY_SASL_BROKERS, EXACTLY_CA_FILE, KAFKA_USER or KAFKA_PASSWORD is not set: start the services with deploy/local/up.sh (a broker with the SASL_SSL listener) and source the env file it prints")
	}
	return s
}

// env is the environment of an exactly process reaching the SASL_SSL
// listener: the topology names ${EXACTLY_CA_FILE}, ${KAFKA_USER} and
// ${KAFKA_PASSWORD}, and EXACTLY_BROKERS is cleared so that it does not
// replace the file's brokers with the plaintext listener.
func (s saslService) env(extra ...string) []string {
	return append([]string{"EXACTLY_BROKERS=", "EXACTLY_CA_FILE=" + s.ca, "KAFKA_USER=" + s.user, "KAFKA_PASSWORD=" + s.password}, extra...)
}

// createTopics runs `exactly topics create` on topo over the SASL_SSL
// listener, with extra environment entries (KEY=VALUE), and fails t unless
// it exits 0. It returns the command's output.
func (s saslService) createTopics(t testing.TB, topo string, extra ...string) string {
	t.Helper()
	text, code, _ := exactlyRun(t, s.env(extra...), time.Minute, "topics", "create", topo)
	if code != 0 {
		t.Fatalf("topics create over SASL_SSL: exit %d\n%s", code, text)
	}
	return text
}

// secureKafka is the kafka section of a topology file for the SASL_SSL
// listener, secrets by reference.
func (s saslService) secureKafka() string {
	return fmt.Sprintf("kafka:\n  brokers: [%q]\n  tls: { ca_file: \"${EXACTLY_CA_FILE}\" }\n"+
		"  sasl: { mechanism: SCRAM-SHA-512, username: \"${KAFKA_USER}\", password: \"${KAFKA_PASSWORD}\" }\n", s.brokers)
}

// stageTopology writes the file of one stage, raw -> clean with dead
// letters to dlq (unique names), for the SASL_SSL listener.
func (s saslService) stageTopology(t testing.TB) (raw, clean, dlq, topo string) {
	t.Helper()
	raw, clean, dlq = uniqueName("sec_raw"), uniqueName("sec_clean"), uniqueName("sec_dlq")
	topo = s.secureTopology(t, topologyFile(t, []stageSpec{{uniqueName("sec"), raw, clean, dlq}}, "100ms", "60s", 1000))
	return raw, clean, dlq, topo
}

// secureTopology rewrites the topology file at path (as topologyFile
// writes it) to reach the SASL_SSL listener.
func (s saslService) secureTopology(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	plain := fmt.Sprintf("kafka:\n  brokers: [%q]\n", brokers(t))
	if !bytes.Contains(data, []byte(plain)) {
		t.Fatalf("%s has no %q", path, plain)
	}
	return writeFile(t, "secure.yaml", strings.Replace(string(data), plain, s.secureKafka(), 1))
}

// kcat runs kcat against the SASL_SSL listener with PLAIN: the librdkafka
// of Debian's kcat (2.0) fails SCRAM against Kafka 4 (librdkafka#4895).
func (s saslService) kcat(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	base := []string{"-b", s.brokers, "-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=PLAIN",
		"-X", "sasl.username=" + s.user, "-X", "sasl.password=" + s.password, "-X", "ssl.ca.location=" + s.ca}
	return exec.CommandContext(ctx, kcatBin(t), append(base, args...)...)
}

func (s saslService) produce(t testing.TB, topic string, lines [][]byte) {
	t.Helper()
	cmd := s.kcat(context.Background(), t, "-P", "-t", topic, "-K", "|", "-Z", "-X", "enable.idempotence=true", "-X", "acks=all")
	cmd.Stdin = bytes.NewReader(append(bytes.Join(lines, []byte("\n")), '\n'))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce to %s over SASL_SSL: %v\n%s", topic, err, out)
	}
}

// keys reads topic read_committed over SASL_SSL and returns the key of
// every record.
func (s saslService) keys(t testing.TB, topic string) []string {
	t.Helper()
	kcat := func(ctx context.Context, args ...string) *exec.Cmd { return s.kcat(ctx, t, args...) }
	return kcatConsume(t, kcat, topic, "%k\n", " over SASL_SSL")
}

// outputs collects everything exactly printed during a test, to check that
// no secret is among it.
type outputs struct{ texts []string }

func (o *outputs) add(what, text string) { o.texts = append(o.texts, what+":\n"+text) }

// checkNoSecret fails the test if any output holds one of secrets.
func (o *outputs) checkNoSecret(t *testing.T, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s == "" {
			t.Fatal("empty secret")
		}
		for _, text := range o.texts {
			if strings.Contains(text, s) {
				t.Errorf("a secret appears in the output of %s", tail(text, 20))
			}
		}
	}
	if !t.Failed() {
		t.Logf("no secret in %d outputs", len(o.texts))
	}
}

// exactlyRun runs exactly with env to completion and returns its output,
// exit code and how long it ran.
func exactlyRun(t testing.TB, env []string, timeout time.Duration, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exactlyBin, args...)
	cmd.Env = append(os.Environ(), env...)
	began := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(began)
	if ctx.Err() != nil {
		t.Fatalf("exactly %s did not exit within %s (a hang); output:\n%s", strings.Join(args, " "), timeout, tail(string(out), 40))
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code, took
}

// untrustedCA writes a CA certificate that signed nothing the services
// use.
func untrustedCA(t testing.TB) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "untrusted test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "untrusted-ca.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
}

// secureSinkTopology writes the topology of the sink sp over the SASL_SSL
// listener, its DSN taken from the variable dsnVar.
func (s saslService) secureSinkTopology(t testing.TB, sp sinkSpec, dsnVar string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\n" + s.secureKafka())
	fmt.Fprintf(&b, "topics:\n  - { name: %s, partitions: 3 }\n  - { name: %s, partitions: 1 }\n", sp.in, sp.dlq)
	fmt.Fprintf(&b, "sinks:\n  - name: %s\n    input: { topic: %s, format: json }\n    dead_letter: { topic: %s }\n", sp.name, sp.in, sp.dlq)
	fmt.Fprintf(&b, "    postgres:\n      dsn: ${%s}\n      table: %s\n      positions_table: %s\n      event_id: event_id\n      columns: { event_id: event_id, body: $value }\n",
		dsnVar, sp.table(), sp.positions())
	fmt.Fprintf(&b, "    commit: { interval: 50ms, max_records: 1000 }\n")
	return writeFile(t, "sink.yaml", b.String())
}

// The crash check over the SASL_SSL listener: topics created, records
// produced and read back (kcat), and the stage killed at a failpoint and
// restarted, all over TLS with SCRAM-SHA-512; every event comes out once.
func TestSASLCrashCheck(t *testing.T) {
	s := sasl(t)
	const events, bad = 10000, 50
	var out outputs
	raw, clean, dlq, topo := s.stageTopology(t)

	out.add("topics create", s.createTopics(t, topo))
	s.produce(t, raw, crashInput(events, bad))

	crashing := start(t, s.env(failpointEnv+"="+crashBeforeCommit+"@3"), "run", "--topology", topo, "--instance-id", "it-1", "--log-level", "debug", "--metrics-addr", "")
	_ = crashing.wait(2 * time.Minute)
	out.add("run (crashing)", crashing.logs.String())
	if !crashing.killedBySIGKILL() {
		t.Fatalf("want the process killed by SIGKILL at %s@3, got %v", crashBeforeCommit, crashing.cmd.ProcessState)
	}
	before := len(s.keys(t, clean))
	if before >= events {
		t.Fatalf("the crash came after all %d events were out: nothing was tested", before)
	}
	t.Logf("committed before the crash: %d of %d events", before, events)

	restarted := start(t, s.env(), "run", "--topology", topo, "--instance-id", "it-1", "--log-level", "debug", "--metrics-addr", "")
	eventually(t, 2*time.Minute, func() bool {
		return len(s.keys(t, clean)) >= events && len(s.keys(t, dlq)) >= bad
	}, func() string {
		return fmt.Sprintf("%s has %d of %d, %s has %d of %d", clean, len(s.keys(t, clean)), events, dlq, len(s.keys(t, dlq)), bad)
	})
	restarted.stop()
	out.add("run (restarted)", restarted.logs.String())

	seen := map[string]int{}
	keys := s.keys(t, clean)
	for _, k := range keys {
		seen[k]++
	}
	missing, dups := 0, 0
	for i := range events {
		switch seen[fmt.Sprintf("e-%d", i)] {
		case 0:
			missing++
		case 1:
		default:
			dups++
		}
	}
	if len(keys) != events || missing > 0 || dups > 0 {
		t.Fatalf("%s: %d records, want %d; %d event IDs missing, %d duplicated", clean, len(keys), events, missing, dups)
	}
	if n := len(s.keys(t, dlq)); n != bad {
		t.Fatalf("%s: %d dead letters, want %d", dlq, n, bad)
	}
	out.checkNoSecret(t, s.password)
}

// A wrong password fails every command within seconds with the broker's
// authentication error, exit 1, and without showing either password.
func TestSASLWrongPasswordFailsFast(t *testing.T) {
	s := sasl(t)
	var out outputs
	_, _, _, topo := s.stageTopology(t)
	s.createTopics(t, topo)
	sp := newSinkSpec("secpw")
	sinkTopo := s.secureSinkTopology(t, sp, "PG_DSN")
	s.createTopics(t, sinkTopo)
	t.Cleanup(func() {
		_, _ = pgPool(t).Exec(context.Background(), fmt.Sprintf("DROP SCHEMA IF EXISTS %q CASCADE", sp.schema))
	})
	wrong := "wrong-" + s.password
	env := s.env("KAFKA_PASSWORD=" + wrong)
	for _, args := range [][]string{
		{"topics", "create", topo},
		{"run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", ""},
		{"sink", "--topology", sinkTopo, "--instance-id", "it-1", "--metrics-addr", ""},
		{"status", "--topology", topo},
	} {
		text, code, took := exactlyRun(t, env, 60*time.Second, args...)
		out.add(args[0], text)
		name := args[0]
		if code != 1 {
			t.Errorf("%s with a wrong password: exit %d, want 1\n%s", name, code, tail(text, 20))
		}
		if !strings.Contains(text, "SASL_AUTHENTICATION_FAILED") {
			t.Errorf("%s with a wrong password: no SASL_AUTHENTICATION_FAILED in the output:\n%s", name, tail(text, 20))
		}
		if took > 15*time.Second {
			t.Errorf("%s with a wrong password took %s to fail, want seconds", name, took.Round(time.Millisecond))
		}
		t.Logf("%s with a wrong password: exit %d after %s", name, code, took.Round(time.Millisecond))
	}
	out.checkNoSecret(t, s.password, wrong)
}

// A broker certificate that does not chain to tls.ca_file is refused:
// the commands fail at once with a certificate error instead of retrying.
func TestSASLUntrustedBrokerCertificate(t *testing.T) {
	s := sasl(t)
	var out outputs
	_, _, _, topo := s.stageTopology(t)
	env := s.env("EXACTLY_CA_FILE=" + untrustedCA(t))
	for _, args := range [][]string{
		{"topics", "create", topo},
		{"run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", ""},
	} {
		text, code, took := exactlyRun(t, env, 60*time.Second, args...)
		out.add(args[0], text)
		if code != 1 || !strings.Contains(text, "certificate signed by unknown authority") {
			t.Errorf("%s with an untrusted broker certificate: exit %d, want 1 and a certificate error:\n%s", args[0], code, tail(text, 20))
		}
		t.Logf("%s with an untrusted broker certificate: exit %d after %s", args[0], code, took.Round(time.Millisecond))
	}
	out.checkNoSecret(t, s.password)
}

// The sink over both secured links: Kafka over SASL_SSL and Postgres with
// sslmode=verify-full. A Postgres certificate that does not chain to
// sslrootcert stops the sink with exit 1.
func TestSinkPostgresTLS(t *testing.T) {
	s := sasl(t)
	plainDSN := pgDSN(t)
	if !strings.Contains(plainDSN, "sslmode=disable") {
		t.Fatalf("PG_DSN %q: want sslmode=disable in it, to swap for verify-full", plainDSN)
	}
	tlsDSN := func(ca string) string {
		return strings.Replace(plainDSN, "sslmode=disable", "sslmode=verify-full&sslrootcert="+ca, 1)
	}
	var out outputs
	const n = 500
	sp := newSinkSpec("sectls")
	topo := s.secureSinkTopology(t, sp, "PG_TLS_DSN")
	pool := pgPool(t)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), fmt.Sprintf("DROP SCHEMA IF EXISTS %q CASCADE", sp.schema))
	})

	s.createTopics(t, topo, "PG_TLS_DSN="+tlsDSN(s.ca))
	s.produce(t, sp.in, events("tls", 0, n))

	t.Run("untrusted server certificate", func(t *testing.T) {
		text, code, took := exactlyRun(t, s.env("PG_TLS_DSN="+tlsDSN(untrustedCA(t))), time.Minute,
			"sink", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", "")
		out.add("sink (untrusted)", text)
		if code != 1 || !strings.Contains(text, "certificate") {
			t.Fatalf("sink with an untrusted Postgres certificate: exit %d, want 1 and a certificate error:\n%s", code, tail(text, 20))
		}
		t.Logf("sink with an untrusted Postgres certificate: exit %d after %s", code, took.Round(time.Millisecond))
	})
	t.Run("verify-full", func(t *testing.T) {
		p := start(t, s.env("PG_TLS_DSN="+tlsDSN(s.ca)), "sink", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", "", "--log-level", "debug")
		waitSinkDone(t, pool, sp, n, 2*time.Minute)
		p.stop()
		out.add("sink", p.logs.String())
		if rows, distinct := rowStats(t, pool, sp.table()); rows != n || distinct != n {
			t.Fatalf("%d rows, %d distinct, want %d", rows, distinct, n)
		}
	})
	out.checkNoSecret(t, s.password)
}

// Secrets stay out of everything exactly prints: validate (which warns
// about a literal password, without showing it), debug logs of a run,
// /metrics and /readyz, status and topics create.
func TestSecretsStayOutOfOutputs(t *testing.T) {
	s := sasl(t)
	var out outputs
	raw, clean, _, topo := s.stageTopology(t)

	text, code, _ := exactlyRun(t, s.env(), time.Minute, "validate", topo)
	out.add("validate", text)
	if code != 0 || strings.Contains(text, "warning") {
		t.Fatalf("validate: exit %d, want 0 and no warning:\n%s", code, text)
	}
	data, err := os.ReadFile(topo)
	if err != nil {
		t.Fatal(err)
	}
	literal := writeFile(t, "literal.yaml", strings.Replace(string(data), `"${KAFKA_PASSWORD}"`, s.password, 1))
	text, code, _ = exactlyRun(t, nil, time.Minute, "validate", literal)
	out.add("validate (literal password)", text)
	if code != 0 || !strings.Contains(text, "warning: ") || !strings.Contains(text, "kafka.sasl.password: password written literally") {
		t.Fatalf("validate of a literal password: exit %d, want 0 and a warning:\n%s", code, text)
	}

	out.add("topics create", s.createTopics(t, topo))
	s.produce(t, raw, crashInput(200, 2))
	addr := freeAddr(t)
	p := start(t, s.env(), "run", "--topology", literal, "--instance-id", "it-1", "--metrics-addr", addr, "--log-level", "debug")
	eventually(t, time.Minute, func() bool { return len(s.keys(t, clean)) >= 200 },
		func() string { return fmt.Sprintf("%d of 200 out", len(s.keys(t, clean))) })
	for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out.add(path, string(body))
	}
	for _, args := range [][]string{{"status", "--topology", topo}, {"status", "--topology", topo, "--json"}} {
		text, code, _ := exactlyRun(t, s.env(), time.Minute, args...)
		out.add(strings.Join(args, " "), text)
		if code == 2 {
			t.Errorf("%s: exit 2:\n%s", strings.Join(args, " "), text)
		}
	}
	p.stop()
	logs := p.logs.String()
	out.add("run --log-level debug", logs)
	if !strings.Contains(logs, "password written literally") {
		t.Errorf("run did not log the literal password warning:\n%s", tail(logs, 20))
	}
	out.checkNoSecret(t, s.password)
}
