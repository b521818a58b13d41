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
	return hasFatalType(err) || isFatalKafkaError(err) ||
		fault.IsCertificateError(err) ||
		// the schema registry refuses the credentials or the schema
		serde.IsRegistryRefused(err)
}

// hasFatalType reports whether err is or wraps a ConfigError, a
// FatalError, a FencedError or a GroupClashError.
func hasFatalType(err error) bool {
	var cfgErr *fault.ConfigError
	var fatal *fault.FatalError
	var fenced *group.FencedError
	var clash *group.GroupClashError
	return errors.As(err, &cfgErr) || errors.As(err, &fatal) || errors.As(err, &fenced) || errors.As(err, &clash)
}

// fatalKafkaErrors are the Kafka error codes that rebuilding the session
// does not clear.
var fatalKafkaErrors = []error{
	kerr.TopicAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.SaslAuthenticationFailed,
	kerr.UnsupportedSaslMechanism,
	// another live process holds our group.instance.id (FencedError)
	kerr.FencedInstanceID,
	// transaction_timeout above the broker's transaction.max.timeout.ms
	kerr.InvalidTransactionTimeout,
}

// isFatalKafkaError reports whether err is one of fatalKafkaErrors.
func isFatalKafkaError(err error) bool {
	for _, k := range fatalKafkaErrors {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}
