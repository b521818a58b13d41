package serde

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// An https registry is trusted through ca_file, refused without it, and
// its password may come from a file.
func TestRegistryTLS(t *testing.T) {
	reg := srfake.NewRegistry(srfake.WithAuth("Basic dXNlcjpzM2NyZXQ=")) // user:s3cret
	srv := httptest.NewTLSServer(reg.Handler())
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	pass := filepath.Join(dir, "sr.pass")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	value := map[string]any{"event_id": "x"}

	trusted := mustCodec(t, Config{Format: Avro, Topic: "t", Schema: v1Schema,
		Registry: Registry{URL: srv.URL, Username: "user", PasswordFile: pass, CAFile: ca}})
	if _, err := trusted.Encode(value); err != nil {
		t.Fatalf("Encode through a trusted https registry: %v", err)
	}

	untrusted := mustCodec(t, Config{Format: Avro, Topic: "t", Schema: v1Schema,
		Registry: Registry{URL: srv.URL, Username: "user", Password: "s3cret"}})
	_, err := untrusted.Encode(value)
	if err == nil || !strings.Contains(err.Error(), "certificate") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("Encode through an untrusted https registry: %v, want a certificate error without the password", err)
	}

	skip := mustCodec(t, Config{Format: Avro, Topic: "t", Schema: v1Schema,
		Registry: Registry{URL: srv.URL, Username: "user", Password: "s3cret", InsecureSkipVerify: true}})
	if _, err := skip.Encode(value); err != nil {
		t.Fatalf("Encode with insecure_skip_verify: %v", err)
	}

	for _, bad := range []Registry{
		{URL: srv.URL, CAFile: filepath.Join(dir, "missing.pem")},
		{URL: srv.URL, CAFile: pass}, // not PEM
		{URL: srv.URL, Username: "user", PasswordFile: filepath.Join(dir, "missing")},
	} {
		if _, err := NewCodec(Config{Format: Avro, Topic: "t", Schema: v1Schema, Registry: bad}); err == nil {
			t.Errorf("NewCodec(%+v) accepted it", bad)
		}
	}
}
