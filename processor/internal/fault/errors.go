// Package fault classifies the errors of a stage's or a sink's settings
// and client that no retry mends.
package fault

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

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

// ErrUsage marks an operation (a reset, a redrive) that its arguments do
// not describe.
var ErrUsage = errors.New("usage")
