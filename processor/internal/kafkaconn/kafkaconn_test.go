package kafkaconn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/topology"
)

const password = "kafkaconn-Test-Pa55word"

// testCA returns a CA and a server certificate for 127.0.0.1 it signed,
// and writes the CA to a PEM file.
func testCA(t *testing.T, dir, name string) (caFile string, server tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "broker"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, name+".pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// cluster starts a kfake cluster with TLS and a SCRAM-SHA-512 user.
func cluster(t *testing.T) (seeds []string, caFile, otherCA string) {
	t.Helper()
	dir := t.TempDir()
	caFile, cert := testCA(t, dir, "ca")
	otherCA, _ = testCA(t, dir, "other")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "exactly", password),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs(), caFile, otherCA
}

func metadata(t *testing.T, k topology.Kafka) error {
	t.Helper()
	opts, err := kafkaconn.Options(k)
	if err != nil {
		t.Fatalf("Options: %v", err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.RetryTimeout(5*time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = kadm.NewClient(cl).BrokerMetadata(ctx)
	return err
}

func TestOptions(t *testing.T) {
	seeds, caFile, otherCA := cluster(t)
	passFile := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(passFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := topology.Kafka{Brokers: seeds, ClientID: "test",
		TLS:  topology.TLS{Enabled: true, CAFile: caFile},
		SASL: topology.SASL{Mechanism: "SCRAM-SHA-512", Username: "exactly", Password: password}}

	t.Run("password", func(t *testing.T) {
		if err := metadata(t, good); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("password file", func(t *testing.T) {
		k := good
		k.SASL.Password, k.SASL.PasswordFile = "", passFile
		if err := metadata(t, k); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		// kfake closes the connection where a real broker answers
		// SASL_AUTHENTICATION_FAILED (integration/security_test.go checks
		// that one, and that it is fatal).
		k := good
		k.SASL.Password = "wrong-" + password
		err := metadata(t, k)
		if err == nil || strings.Contains(err.Error(), password) {
			t.Fatalf("err %v, want a failure that does not show the password", err)
		}
	})
	t.Run("untrusted certificate is fatal", func(t *testing.T) {
		k := good
		k.TLS.CAFile = otherCA
		err := metadata(t, k)
		if !fault.IsCertificateError(err) || !kafkaconn.IsFatal(err) {
			t.Fatalf("err %v, want a certificate error, fatal", err)
		}
	})
	t.Run("server name mismatch", func(t *testing.T) {
		k := good
		k.TLS.ServerName = "kafka.example.com"
		if err := metadata(t, k); !fault.IsCertificateError(err) {
			t.Fatalf("err %v, want a certificate error", err)
		}
	})
	t.Run("plaintext to a tls listener fails", func(t *testing.T) {
		k := good
		k.TLS = topology.TLS{}
		if err := metadata(t, k); err == nil {
			t.Fatal("a plaintext client reached a TLS listener")
		}
	})
}

func TestOptionsFileErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	empty := filepath.Join(dir, "empty")
	for _, p := range []string{notPEM, empty} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		k    topology.Kafka
		want string
	}{
		{"missing ca", topology.Kafka{TLS: topology.TLS{Enabled: true, CAFile: filepath.Join(dir, "nope.pem")}}, "kafka.tls.ca_file: open "},
		{"ca not pem", topology.Kafka{TLS: topology.TLS{Enabled: true, CAFile: notPEM}}, "kafka.tls.ca_file: no PEM certificate in "},
		{"missing key pair", topology.Kafka{TLS: topology.TLS{Enabled: true, CertFile: notPEM, KeyFile: notPEM}}, "kafka.tls.cert_file and key_file"},
		{"missing password file", topology.Kafka{SASL: topology.SASL{Mechanism: "PLAIN", Username: "u", PasswordFile: filepath.Join(dir, "nope")}}, "kafka.sasl.password_file: open "},
		{"empty password file", topology.Kafka{SASL: topology.SASL{Mechanism: "PLAIN", Username: "u", PasswordFile: empty}}, "kafka.sasl.password_file: empty secret file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := kafkaconn.Options(tt.k)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want it to contain %q", err, tt.want)
			}
		})
	}
	// TLS disabled: its files are not read.
	if _, err := kafkaconn.Options(topology.Kafka{TLS: topology.TLS{CAFile: filepath.Join(dir, "nope.pem")}}); err != nil {
		t.Fatal(err)
	}
}

func TestIsFatalSASL(t *testing.T) {
	if !kafkaconn.IsFatal(fmt.Errorf("poll: %w", kerr.SaslAuthenticationFailed)) {
		t.Fatal("SASL_AUTHENTICATION_FAILED is not fatal")
	}
}
