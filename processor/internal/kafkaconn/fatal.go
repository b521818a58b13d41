package kafkaconn

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/group"
	"github.com/exactly-io/exactly/serde"
)

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
	var cfgErr *fault.ConfigError
	var fatal *fault.FatalError
	var fenced *group.FencedError
	var clash *group.GroupClashError
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
		fault.IsCertificateError(err) ||
		// transaction_timeout above the broker's transaction.max.timeout.ms
		errors.Is(err, kerr.InvalidTransactionTimeout) ||
		// the schema registry refuses the credentials or the schema
		serde.IsRegistryRefused(err)
}
