package processor

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrCrashed is returned by Run when a failpoint's crash action returned
// instead of ending the process (as the embedded demo's action does).
var ErrCrashed = errors.New("crashed at failpoint")

// Dead-letter reasons, written to the exactly.dlq.reason header. They name
// the step of the pipeline that rejected the record.
const (
	ReasonDecode    = "decode"
	ReasonTransform = "transform"
	ReasonKey       = "key"
	ReasonEncode    = "encode"
	ReasonProduce   = "produce" // the broker refused the output, e.g. too large
)

// RecordError is a permanent fault of one input record. The stage writes
// the record to the dead-letter topic, with Reason and Err in its headers,
// in the same transaction that commits its offset.
type RecordError struct {
	Reason string // one of the Reason constants
	Step   string // the failed transform step, for ReasonTransform
	Err    error
}

func (e *RecordError) Error() string {
	if e.Step != "" {
		return e.Reason + ": " + e.Step + ": " + e.Err.Error()
	}
	return e.Reason + ": " + e.Err.Error()
}
func (e *RecordError) Unwrap() error { return e.Err }

// IsFatal reports whether err from a Kafka session will not go away by
// rebuilding the session: authentication (SASL) and authorization failures,
// a broker certificate that fails verification, and a client configuration
// rejected by the client itself. Other errors (a broker restart, a fenced
// or timed-out transaction, a lost coordinator) are retried with backoff.
func IsFatal(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var cfgErr *configError
	var fatal *fatalError
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

type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

func newConfigError(format string, args ...any) error {
	return &configError{fmt.Errorf(format, args...)}
}

// fatalError is a fault a rebuilt session would meet again.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }
