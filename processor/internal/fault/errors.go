// Package kit holds what the stage engine (processor), the Postgres sink
// (processor/pgsink) and the tools share: the dead-letter contract (headers,
// reasons, RecordError), failpoints, broker health and the stall rule for
// readiness, the franz-go logger, leaving a static group, backoff, the
// defaults and checks of the settings every reader of an input has
// (Reader), and the classification of Kafka errors that no retry mends.
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

	"github.com/exactly-io/exactly/serde"
)

// ErrCrashed is returned by a stage's or a sink's Run when a failpoint's
// crash action returned instead of ending the process (as the embedded
// demo's action does).
var ErrCrashed = errors.New("crashed at failpoint")

// IsFatal reports whether err from a Kafka session will not go away by
// rebuilding the session: authentication (SASL) and authorization failures,
// a broker certificate that fails verification, a configuration error
// (ConfigError), a fault marked fatal (FatalError), a fenced static member
// (FencedError) and a group shared with another consumer
// (GroupClashError). Other errors (a
// broker restart, a fenced or timed-out transaction, a lost coordinator)
// are retried with backoff.
func IsFatal(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var cfgErr *ConfigError
	var fatal *FatalError
	var fenced *FencedError
	var clash *GroupClashError
	if errors.As(err, &cfgErr) || errors.As(err, &fatal) || errors.As(err, &fenced) || errors.As(err, &clash) {
		return true
	}
	return errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		// another live process holds our group.instance.id (FencedError)
		errors.Is(err, kerr.FencedInstanceID) ||
		IsCertificateError(err) ||
		// transaction_timeout above the broker's transaction.max.timeout.ms
		errors.Is(err, kerr.InvalidTransactionTimeout) ||
		// the schema registry refuses the credentials or the schema
		serde.IsRegistryRefused(err)
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

// FencedError is a static member (KIP-345) that the group coordinator
// fenced (FENCED_INSTANCE_ID): most often another live process joined
// group Group with the same group.instance.id InstanceID. A restart of
// this instance fences its predecessor on purpose (a paused or
// partitioned "zombie" must stop), and two processes that both rejoin
// fence each other in turn forever, each processing nothing. A stage or
// sink rejoins after a first fence, which a moved coordinator can send
// spuriously, and returns this error, fatal, at a second one within
// FenceRejoinWindow (see FenceHistory).
type FencedError struct {
	Group, InstanceID string
	Err               error
}

func (e *FencedError) Error() string {
	by := fmt.Sprintf("fenced out of consumer group %s: another process joined it with group.instance.id %s (KIP-345)", e.Group, e.InstanceID)
	if errors.Is(e.Err, kerr.ProducerFenced) || errors.Is(e.Err, kerr.InvalidProducerEpoch) {
		by = fmt.Sprintf("fenced in consumer group %s: another process initialized transactional ID %s (KIP-98)", e.Group, e.InstanceID)
	}
	return fmt.Sprintf("%s and took this instance's place; "+
		"if that process is this instance's restart, this one was a stale copy and stopping is right; otherwise "+
		"two live instances share one --instance-id, or two topology files name a stage or a sink alike, "+
		"or a stage named sink-<x> and a sink named <x> share group exactly-sink-<x>: "+
		"give each running instance its own --instance-id and each stage and sink a name unique across files: %v",
		by, e.Err)
}

func (e *FencedError) Unwrap() error { return e.Err }

// GroupClashError is a live member of consumer group Group that cannot
// share it with the consumer about to join (CheckGroup): it consumes
// other topics, or it is of the other role (a stage in a sink's group, or
// the reverse). Two such consumers would split the topic's partitions
// between them, each silently skipping the other's.
type GroupClashError struct {
	Group  string
	Member GroupMember
	Reason string // what differs, e.g. "it consumes topics [a], this stage consumes b"
}

func (e *GroupClashError) Error() string {
	id := e.Member.MemberID
	if e.Member.InstanceID != "" {
		id = "group.instance.id " + e.Member.InstanceID
	}
	return fmt.Sprintf("consumer group %s is in use by another consumer (%s, client.id %s, host %s): %s; "+
		"a group belongs to one stage or one sink reading one topic: two topology files name a stage or a sink alike, "+
		"or a stage named sink-<x> and a sink named <x> share group exactly-sink-<x>; rename one "+
		"(or, when changing what a stage or sink reads, stop all of its instances first)",
		e.Group, id, e.Member.ClientID, e.Member.Host, e.Reason)
}
