package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/exactly-io/exactly/processor/internal/fault"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/exactly-io/exactly/topology"
)

// Origin locates the settings of one stage or sink in its topology file,
// so that a check at start can name the field the way validate does. The
// zero Origin (a Config built by hand) names fields by path alone.
type Origin struct {
	File   *topology.File // nil when the config was built by hand
	Prefix string         // the stage's or sink's path, e.g. "stages[2]"
}

// OriginOf returns the Origin of the stage or sink at prefix of f.
func OriginOf(f *topology.File, prefix string) Origin { return Origin{File: f, Prefix: prefix} }

// Field returns the field at rel below the prefix ("input.topic"), located
// as "file:line:col: stages[2].input.topic" when the file has it.
func (o Origin) Field(rel string) string { return o.Abs(o.Prefix + "." + rel) }

// Abs returns the field at the file's path ("kafka.transaction_timeout"),
// located as Field does.
func (o Origin) Abs(path string) string {
	if o.File == nil {
		return strings.TrimPrefix(path, ".")
	}
	return o.File.Where(path)
}

// CreateHint is what to run to create a topology's missing topics.
func (o Origin) CreateHint() string {
	if o.File == nil || o.File.Path == "" {
		return "create it, e.g. exactly topics create --topology FILE"
	}
	return "create it: exactly topics create --topology " + o.File.Path
}

// NeededTopic is a topic a stage or sink needs at start: what it is for
// ("input", "dead-letter"), its name and its field (see Origin.Field).
type NeededTopic struct{ Role, Name, Field string }

// CheckTopicsExist returns a *ConfigError naming every topic of need that
// the broker does not have (UNKNOWN_TOPIC_OR_PARTITION in Metadata), or
// the error of the request itself, which the caller retries. A topic the
// client may not describe (TOPIC_AUTHORIZATION_FAILED) is left to the
// client that uses it, which fails on it.
func CheckTopicsExist(ctx context.Context, adm *kadm.Client, o Origin, need ...NeededTopic) error {
	names := make([]string, 0, len(need))
	for _, n := range need {
		names = append(names, n.Name)
	}
	td, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("describe topics: %w", err)
	}
	var errs []error
	seen := map[string]bool{}
	for _, n := range need {
		d, ok := td[n.Name]
		if seen[n.Name+"\x00"+n.Role] || (ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition)) {
			continue
		}
		seen[n.Name+"\x00"+n.Role] = true
		errs = append(errs, fmt.Errorf("%s: %s topic %s does not exist on the broker (%s)", n.Field, n.Role, strconv.Quote(n.Name), o.CreateHint()))
	}
	if len(errs) > 0 {
		return &fault.ConfigError{Err: errors.Join(errs...)}
	}
	return nil
}

// BrokerLimits are the broker settings that bound a stage's or a sink's
// timeouts, the tightest over all brokers. A zero field was not read.
type BrokerLimits struct {
	// TransactionMax is transaction.max.timeout.ms: the broker refuses a
	// producer whose transaction.timeout.ms is larger
	// (INVALID_TRANSACTION_TIMEOUT, KIP-98).
	TransactionMax time.Duration
	// SessionMin and SessionMax are group.min.session.timeout.ms and
	// group.max.session.timeout.ms: the group coordinator refuses a join
	// with a session timeout outside them (INVALID_SESSION_TIMEOUT).
	SessionMin, SessionMax time.Duration
}

// Broker configuration names (Kafka's broker configs documentation).
const (
	cfgTransactionMax = "transaction.max.timeout.ms"
	cfgSessionMin     = "group.min.session.timeout.ms"
	cfgSessionMax     = "group.max.session.timeout.ms"
)

// ReadBrokerLimits describes every broker's configuration (DescribeConfigs
// on each broker ID, which includes static and default values, unlike the
// cluster-level resource) and returns the tightest limits. It returns an
// error when the request fails or no broker answers; the caller decides
// whether to go on without the limits (a principal without the
// DescribeConfigs ACL, say).
func ReadBrokerLimits(ctx context.Context, adm *kadm.Client) (BrokerLimits, error) {
	// A metadata request for no topic: brokers only.
	m, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return BrokerLimits{}, fmt.Errorf("list brokers: %w", err)
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, m.Brokers.NodeIDs()...)
	if err != nil && len(rcs) == 0 {
		return BrokerLimits{}, fmt.Errorf("describe broker configs: %w", err)
	}
	var lim BrokerLimits
	var errs []error
	for _, rc := range rcs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("broker %s: %w", rc.Name, rc.Err))
			continue
		}
		for _, c := range rc.Configs {
			ms, perr := strconv.ParseInt(c.MaybeValue(), 10, 64)
			if perr != nil || ms <= 0 {
				continue
			}
			d := time.Duration(ms) * time.Millisecond
			switch c.Key {
			case cfgTransactionMax:
				lim.TransactionMax = tighter(lim.TransactionMax, d, false)
			case cfgSessionMin:
				lim.SessionMin = tighter(lim.SessionMin, d, true)
			case cfgSessionMax:
				lim.SessionMax = tighter(lim.SessionMax, d, false)
			}
		}
	}
	if lim == (BrokerLimits{}) {
		return lim, fmt.Errorf("describe broker configs: no broker answered: %w", errors.Join(append(errs, err)...))
	}
	return lim, nil
}

// tighter returns d if cur was not read yet, else the larger of the two
// for a lower bound, the smaller for an upper bound.
func tighter(cur, d time.Duration, lower bool) time.Duration {
	switch {
	case cur == 0:
		return d
	case lower:
		return max(cur, d)
	}
	return min(cur, d)
}

// CheckTransactionTimeout returns a *ConfigError when d, the value of
// field, is above the broker's transaction.max.timeout.ms.
func (l BrokerLimits) CheckTransactionTimeout(d time.Duration, field string) error {
	if l.TransactionMax > 0 && d > l.TransactionMax {
		return fault.NewConfigError("%s: %s is above the broker's %s %s, so the broker would refuse every transaction (INVALID_TRANSACTION_TIMEOUT); lower it or raise the broker's limit",
			field, d, cfgTransactionMax, l.TransactionMax)
	}
	return nil
}

// CheckSessionTimeout returns a *ConfigError when d, the value of field,
// is outside the broker's group session timeout bounds.
func (l BrokerLimits) CheckSessionTimeout(d time.Duration, field string) error {
	switch {
	case l.SessionMin > 0 && d < l.SessionMin:
		return fault.NewConfigError("%s: %s is below the broker's %s %s, so the broker would refuse to let it join its group (INVALID_SESSION_TIMEOUT)",
			field, d, cfgSessionMin, l.SessionMin)
	case l.SessionMax > 0 && d > l.SessionMax:
		return fault.NewConfigError("%s: %s is above the broker's %s %s, so the broker would refuse to let it join its group (INVALID_SESSION_TIMEOUT)",
			field, d, cfgSessionMax, l.SessionMax)
	}
	return nil
}

// WarnLimitsUnread logs that the broker limits could not be read, at warn
// level: the process goes on, and the broker refuses a value beyond them
// when it is used. A principal without DescribeConfigs on the cluster (the
// least-privilege ACLs of security.md) is told in words, without Kafka's
// error code, which operators search logs for.
func WarnLimitsUnread(log *slog.Logger, err error) {
	const msg = "the broker's timeout limits are not checked at start: transaction_timeout and session_timeout fail only when the broker refuses them"
	if errors.Is(err, kerr.ClusterAuthorizationFailed) {
		log.Warn(msg, "why", "the principal may not describe the brokers' configs (grant DescribeConfigs on the Cluster to check them)")
		return
	}
	log.Warn(msg, "err", err)
}
