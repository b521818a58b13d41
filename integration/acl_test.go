//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
)

// These tests check the README's least-privilege ACLs and grants against
// the local broker's authorizer (deploy/local/kafka.sh turns it on with
// the SASL_SSL listener; plaintext clients are a super user there): a
// SCRAM user holding exactly the documented ACLs runs a stage or a sink,
// and without one of them it is refused.

// aclAdmin is an admin client on the plaintext listener.
func aclAdmin(t testing.TB) *kadm.Client {
	t.Helper()
	cl := kafkaClient(t)
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// addUser creates a SCRAM-SHA-512 user with a random password.
func addUser(t testing.TB, adm *kadm.Client, prefix string) (user, password string) {
	t.Helper()
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	user, password = uniqueName(prefix), hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("create SCRAM user %s: %v", user, err)
	}
	return user, password
}

// grant creates the ACLs of b, allowing user.
func grant(t testing.TB, adm *kadm.Client, user string, b *kadm.ACLBuilder) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.CreateACLs(ctx, b.Allow("User:"+user).AllowHosts("*"))
	if err != nil {
		t.Fatalf("create ACLs: %v (the broker needs the authorizer: restart it with deploy/local/up.sh)", err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create ACL %s %s %s: %v %s (the broker needs the authorizer: restart it with deploy/local/up.sh)", r.Operation, r.Type, r.Name, r.Err, r.ErrMessage)
		}
	}
}

// A stage runs with the README's ACLs and no more: Read on its input,
// Write on its output and dead-letter topics, Read on its group, Write on
// its transactional ID prefix. Without the last, it stops with exit 1.
func TestLeastPrivilegeStageACLs(t *testing.T) {
	s := sasl(t)
	adm := aclAdmin(t)
	const events, bad = 1000, 10
	raw, clean, dlq, stage := uniqueName("acl_raw"), uniqueName("acl_clean"), uniqueName("acl_dlq"), uniqueName("acl")
	topo := s.secureTopology(t, topologyFile(t, []stageSpec{{stage, raw, clean, dlq}}, "100ms", "60s", 1000))
	s.createTopics(t, topo)
	s.produce(t, raw, crashInput(events, bad))

	user, password := addUser(t, adm, "stage")
	env := s.env("KAFKA_USER="+user, "KAFKA_PASSWORD="+password)
	grant(t, adm, user, kadm.NewACLs().Topics(raw).Operations(kadm.OpRead))
	grant(t, adm, user, kadm.NewACLs().Topics(clean, dlq).Operations(kadm.OpWrite))
	grant(t, adm, user, kadm.NewACLs().Groups("exactly-"+stage).Operations(kadm.OpRead))

	text, code, took := exactlyRun(t, env, 90*time.Second, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", "")
	if code != 1 || !strings.Contains(text, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED") {
		t.Fatalf("run without the TransactionalId ACL: exit %d, want 1 and TRANSACTIONAL_ID_AUTHORIZATION_FAILED:\n%s", code, tail(text, 20))
	}
	t.Logf("without the TransactionalId ACL: exit %d after %s", code, took.Round(time.Millisecond))

	grant(t, adm, user, kadm.NewACLs().TransactionalIDs("exactly-"+stage+"-").ResourcePatternType(kadm.ACLPatternPrefixed).Operations(kadm.OpWrite))
	p := start(t, env, "run", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", "")
	eventually(t, 2*time.Minute, func() bool {
		return len(s.keys(t, clean)) >= events && len(s.keys(t, dlq)) >= bad
	}, func() string {
		return fmt.Sprintf("%d of %d out, %d of %d dead letters", len(s.keys(t, clean)), events, len(s.keys(t, dlq)), bad)
	})
	p.stop()
	if logs := p.logs.String(); strings.Contains(logs, "AUTHORIZATION_FAILED") {
		t.Fatalf("authorization failures with the documented ACLs:\n%s", tail(logs, 30))
	}
	if n := len(s.keys(t, clean)); n != events {
		t.Fatalf("%d outputs, want %d", n, events)
	}
}

// A sink runs with the README's ACLs (Read on its input, Write on its
// dead-letter topic, Read on its group) as a Postgres role holding only
// USAGE and CREATE on its schema.
func TestLeastPrivilegeSinkACLsAndGrants(t *testing.T) {
	s := sasl(t)
	adm := aclAdmin(t)
	pool := pgPool(t)
	ctx := context.Background()
	const n = 300
	sp := newSinkSpec("aclsink")
	role := uniqueName("sink_role")
	for _, q := range []string{
		"CREATE ROLE " + pgx.Identifier{role}.Sanitize() + " LOGIN",
		"CREATE SCHEMA " + pgx.Identifier{sp.schema}.Sanitize(),
		"GRANT USAGE, CREATE ON SCHEMA " + pgx.Identifier{sp.schema}.Sanitize() + " TO " + pgx.Identifier{role}.Sanitize(),
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{sp.schema}.Sanitize()+" CASCADE")
		_, _ = pool.Exec(ctx, "DROP ROLE IF EXISTS "+pgx.Identifier{role}.Sanitize())
	})
	dsn := pgDSN(t)
	roleDSN := strings.Replace(dsn, "://postgres@", "://"+role+"@", 1)
	if roleDSN == dsn {
		t.Fatalf("PG_DSN %q: want postgres://postgres@..., to swap the role", dsn)
	}
	topo := s.secureSinkTopology(t, sp, "ROLE_DSN")
	s.createTopics(t, topo, "ROLE_DSN="+roleDSN)
	s.produce(t, sp.in, append(events("acl", 0, n), []byte("bad-0|{not json")))

	user, password := addUser(t, adm, "sink")
	grant(t, adm, user, kadm.NewACLs().Topics(sp.in).Operations(kadm.OpRead))
	grant(t, adm, user, kadm.NewACLs().Topics(sp.dlq).Operations(kadm.OpWrite))
	grant(t, adm, user, kadm.NewACLs().Groups("exactly-sink-"+sp.name).Operations(kadm.OpRead))
	p := start(t, s.env("KAFKA_USER="+user, "KAFKA_PASSWORD="+password, "ROLE_DSN="+roleDSN),
		"sink", "--topology", topo, "--instance-id", "it-1", "--metrics-addr", "")
	waitSinkDone(t, pool, sp, n, 2*time.Minute)
	eventually(t, time.Minute, func() bool { return len(s.keys(t, sp.dlq)) >= 1 },
		func() string { return fmt.Sprintf("%d dead letters, want 1", len(s.keys(t, sp.dlq))) })
	p.stop()
	if logs := p.logs.String(); strings.Contains(logs, "AUTHORIZATION_FAILED") || strings.Contains(logs, "permission denied") {
		t.Fatalf("authorization failures with the documented ACLs and grants:\n%s", tail(logs, 30))
	}
}
