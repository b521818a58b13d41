// Package kit holds what the stage engine (processor), the Postgres sink
// (processor/pgsink) and the tools share: the dead-letter contract (headers,
// reasons, RecordError), failpoints, broker health and the stall rule for
// readiness, the franz-go logger, leaving a static group, backoff, and the
// classification of Kafka errors that no retry mends.
//
// kit imports neither processor nor pgsink: both import it.
package kit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrCrashed is returned by a stage's or a sink's Run when a failpoint's
// crash action returned instead of ending the process (as the embedded
// demo's action does).
var ErrCrashed = errors.New("crashed at failpoint")

// IsFatal reports whether err from a Kafka session will not go away by
// rebuilding the session: authentication (SASL) and authorization failures,
// a broker certificate that fails verification, a configuration error
// (ConfigError) and a fault marked fatal (FatalError). Other errors (a
// broker restart, a fenced or timed-out transaction, a lost coordinator)
// are retried with backoff.
func IsFatal(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var cfgErr *ConfigError
	var fatal *FatalError
	if errors.As(err, &cfgErr) || errors.As(err, &fatal) {
		return true
	}
	return errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		IsCertificateError(err) ||
		// transaction_timeout above the broker's transaction.max.timeout.ms
		errors.Is(err, kerr.InvalidTransactionTimeout)
}

// IsCertificateError reports whether err is a TLS peer certificate that
// failed verification: an unknown CA, a name or date mismatch. The same
// certificate fails again on every dial, so it is a configuration fault
// (tls.ca_file, tls.server_name), not an outage.
func IsCertificateError(err error) bool {
	var verr *tls.CertificateVerificationError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	return errors.As(err, &verr) || errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// ConfigError is a configuration that a stage, a sink or their client
// rejects: fatal, since the same configuration fails again.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// NewConfigError returns a *ConfigError with a formatted message.
func NewConfigError(format string, args ...any) error {
	return &ConfigError{fmt.Errorf(format, args...)}
}

// FatalError is a fault that a rebuilt session would meet again.
type FatalError struct{ Err error }

func (e *FatalError) Error() string { return e.Err.Error() }
func (e *FatalError) Unwrap() error { return e.Err }
