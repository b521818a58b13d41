// Package kafkaconn turns the kafka settings of a topology file into
// franz-go client options. Every Kafka client exactly makes (stage
// sessions, sinks, admin commands, audits) is built from Options, so that
// TLS and SASL apply to all of them alike.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/topology"
)

// Options returns the client options for k: seed brokers, client ID, TLS
// and SASL. It reads the files k names (CA, client certificate, password
// or token file) now, so a missing or unreadable one fails here, before
// any dial.
// Errors name the field and the file, never a password.
func Options(k topology.Kafka) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}
	if k.ClientID != "" {
		opts = append(opts, kgo.ClientID(k.ClientID))
	}
	if k.TLS.Enabled {
		cfg, err := TLSConfig(k.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if k.SASL.Mechanism != "" {
		m, err := mechanism(k.SASL)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// TLSConfig returns the client TLS configuration of t. franz-go sets
// ServerName to each broker's host when it is empty here.
func TLSConfig(t topology.TLS) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // opt-in, and validate warns about it
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka.tls.ca_file: no PEM certificate in %s", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			// The error of LoadX509KeyPair never quotes the key itself.
			return nil, fmt.Errorf("kafka.tls.cert_file and key_file (%s, %s): %w", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// mechanism returns the SASL mechanism of s. The credentials it holds are
// never part of an error.
func mechanism(s topology.SASL) (sasl.Mechanism, error) {
	switch mech := strings.ToUpper(s.Mechanism); mech {
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		pass := string(s.Password)
		if s.PasswordFile != "" {
			var err error
			if pass, err = ReadSecretFile(s.PasswordFile); err != nil {
				return nil, fmt.Errorf("kafka.sasl.password_file: %w", err)
			}
		}
		switch mech {
		case "PLAIN":
			return plain.Auth{User: s.Username, Pass: pass}.AsMechanism(), nil
		case "SCRAM-SHA-256":
			return scram.Auth{User: s.Username, Pass: pass}.AsSha256Mechanism(), nil
		}
		return scram.Auth{User: s.Username, Pass: pass}.AsSha512Mechanism(), nil
	case "OAUTHBEARER":
		return oauthBearer(s)
	case "AWS_MSK_IAM":
		c := s.AWS
		if c.AccessKeyID == "" || c.SecretAccessKey == "" {
			return nil, errors.New("kafka.sasl.aws: access_key_id and secret_access_key are required for AWS_MSK_IAM")
		}
		return aws.Auth{
			AccessKey:    string(c.AccessKeyID),
			SecretKey:    string(c.SecretAccessKey),
			SessionToken: string(c.SessionToken),
			UserAgent:    c.UserAgent,
		}.AsManagedStreamingIAMMechanism(), nil
	}
	return nil, fmt.Errorf("kafka.sasl.mechanism: unknown mechanism %q", s.Mechanism)
}

// oauthBearer returns the OAUTHBEARER mechanism (RFC 7628, KIP-255) of s.
// A token_file is read now, so that a missing one fails before any dial,
// and again for every new connection and every re-authentication
// (KIP-368), so that a token rotated in place is used without a restart.
func oauthBearer(s topology.SASL) (sasl.Mechanism, error) {
	ext := maps.Clone(s.Extensions)
	if s.TokenFile == "" {
		if s.Token == "" {
			return nil, errors.New("kafka.sasl.token: required for OAUTHBEARER")
		}
		return oauth.Auth{Token: string(s.Token), Extensions: ext}.AsMechanism(), nil
	}
	if _, err := ReadSecretFile(s.TokenFile); err != nil {
		return nil, fmt.Errorf("kafka.sasl.token_file: %w", err)
	}
	file := s.TokenFile
	return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
		tok, err := ReadSecretFile(file)
		if err != nil {
			return oauth.Auth{}, fmt.Errorf("kafka.sasl.token_file: %w", err)
		}
		return oauth.Auth{Token: tok, Extensions: ext}, nil
	}), nil
}

// ReadSecretFile returns the content of a secret file (a password, say),
// without one trailing newline. An empty file is an error.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", errors.New("empty secret file " + path)
	}
	return s, nil
}

// IsAuthError reports whether err is a connection failure that retrying
// cannot mend: the broker refused the SASL credentials or mechanism
// (KIP-152 SaslAuthenticate), or its certificate failed verification.
func IsAuthError(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState) ||
		fault.IsCertificateError(err)
}

// FatalHook returns a client hook that calls fatal, once, with the first
// connection error for which IsAuthError is true. franz-go retries such
// connections for as long as a client lives and only logs them, so that a
// stage with a wrong password would otherwise retry forever instead of
// failing; give the hook to every long-lived client and stop on fatal.
func FatalHook(fatal func(error)) kgo.Hook {
	return &fatalHook{fatal: fatal}
}

type fatalHook struct {
	once  sync.Once
	fatal func(error)
}

func (h *fatalHook) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil && IsAuthError(err) {
		h.once.Do(func() {
			h.fatal(fmt.Errorf("connect to broker %s: %w", net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port))), err))
		})
	}
}
