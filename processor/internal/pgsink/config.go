package pgsink

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/reader"
	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// Config is what a Sink needs. Every field without a stated default is
// required.
type Config struct {
	Sink       string   // sink name; part of the group name
	InstanceID string   // stable per instance, e.g. the hostname
	Brokers    []string // seed brokers, host:port
	ClientID   string   // Kafka client.id; default "exactly"

	Input      string // input topic
	DeadLetter string // dead-letter topic; or:
	// DeadLetterTable is the dead-letter table, "schema.table", in the
	// sink's database, set instead of DeadLetter: its rows commit with the
	// batch (exactly once) where a topic's dead letters are at least once.
	DeadLetterTable string
	InputFormat     string // serde format name; default "json"
	// InputCodec is the codec's settings for InputFormat avro: a schema
	// file, or a registry (Format and Topic are set from InputFormat and
	// Input).
	InputCodec serde.Config
	// ColumnTypes are the declared types of columns, by name: what the
	// sink creates them with when it creates the table.
	ColumnTypes map[string]string
	// Types is topology.TypesDeclared (default) or TypesFromSchema: a
	// field's column takes the type of the field in the Avro schema
	// (ColumnTypes win).
	Types string
	// AutoColumns maps every top-level Avro field that no column maps to
	// a column of its name, added when a new writer schema brings it
	// (needs Types TypesFromSchema).
	AutoColumns bool

	// DSN is the Postgres connection string. It is never logged or put in
	// an error.
	DSN            string
	Table          string   // target table, "schema.table"
	EventID        string   // the primary key column, one of Columns
	Columns        []Column // in table order
	PositionsTable string   // "schema.table"; default exactly_positions in Table's schema
	// Peers are the other sinks of the topology file that read Input
	// into PositionsTable. Positions stored before they were keyed by
	// sink cannot be told apart between them (see Sink).
	Peers      []string
	Tombstones string // topology.TombstonesSkip (default) or TombstonesDelete
	Mode       string // topology.ModeInsert (default) or ModeUpsert
	// Version is the column, one of Columns, whose greater value lets a
	// record replace a stored row (upsert mode only); "" for none.
	Version string
	// Envelope is topology.EnvelopeNone (default) or EnvelopeDebezium.
	Envelope string
	// UnavailableValue is a change event's text for a value it did not
	// capture (Debezium's unavailable.value.placeholder): the column keeps
	// its stored value. "" for none.
	UnavailableValue string
	// BinaryHandling is how a change event writes bytes that no schema
	// types (topology.BinaryBytes, …): a string into a bytea column is
	// decoded by it. "" for none: bytea's text input.
	BinaryHandling string
	// DecimalHandling, IntervalHandling and TimePrecision are how a
	// change event writes decimals, intervals, dates and times that no
	// schema types (Debezium's decimal.handling.mode, …; see modes.go).
	// "" for none: the column type's text input.
	DecimalHandling  string
	IntervalHandling string
	TimePrecision    string
	// Timeout bounds one attempt at a call to PostgreSQL (a batch's
	// transaction, from taking a connection to COMMIT; a read of the
	// positions; the set-up); default 1m (the topology spec's). An
	// attempt past it is cancelled and retried as a transient fault.
	Timeout time.Duration

	// CommitInterval bounds how long records are gathered into one
	// database transaction; default 200ms.
	CommitInterval time.Duration
	// MaxRecords bounds the records in one database transaction; default
	// 10000. The batch is held in memory until it commits, and up to
	// FetchMaxBytes of the next one's records are polled beside its write.
	MaxRecords int
	// SessionTimeout is the consumer group session timeout; default 45s.
	SessionTimeout time.Duration
	// MetadataMaxAge bounds how late a partition added to the input topic
	// is read; default 30s.
	MetadataMaxAge time.Duration
	// FetchMaxBytes and MaxPartitionFetchBytes size the consumer's
	// fetches (kafkaconn.FetchOpts); default 4 MiB and 1 MiB.
	FetchMaxBytes, MaxPartitionFetchBytes int32

	// Origin locates these settings in their topology file, for the
	// errors of the checks at start; SinkConfig sets it.
	Origin reader.Origin
}

// Column is one column of the target table and what it holds: a top-level
// field of the JSON value, or one of the topology.Source names.
type Column struct {
	Name   string
	Source string
}

// Group returns the consumer group of the sink: exactly-sink-<sink>.
func (c Config) Group() string { return "exactly-sink-" + c.Sink }

// GroupInstanceID returns the static group instance ID of the instance
// (KIP-345 group.instance.id), exactly-sink-<sink>-<instance>: a restarted
// instance takes its predecessor's partitions at once. (The member ID is
// another thing: the broker assigns it.)
func (c Config) GroupInstanceID() string { return c.Group() + "-" + c.InstanceID }

// SinkConfig returns the Config of sink s of topology f for the instance
// instanceID.
func SinkConfig(f *topology.File, s *topology.Sink, instanceID string) Config {
	cols := make([]Column, 0, len(s.Postgres.ColumnOrder))
	for _, name := range s.Postgres.ColumnOrder {
		cols = append(cols, Column{Name: name, Source: s.Postgres.Columns[name]})
	}
	var peers []string
	for _, o := range f.Sinks {
		if o.Name != s.Name && o.Input.Topic == s.Input.Topic && o.Postgres.PositionsTable == s.Postgres.PositionsTable {
			peers = append(peers, o.Name)
		}
	}
	return Config{
		Peers:                  peers,
		Sink:                   s.Name,
		InstanceID:             instanceID,
		Brokers:                f.Kafka.Brokers,
		ClientID:               f.Kafka.ClientID,
		Input:                  s.Input.Topic,
		DeadLetter:             s.DeadLetter.Topic,
		DeadLetterTable:        s.DeadLetter.Table,
		InputFormat:            s.Input.Format,
		InputCodec:             reader.CodecConfig(f, s.Input),
		ColumnTypes:            s.Postgres.ColumnTypes,
		Types:                  s.Postgres.Types,
		AutoColumns:            s.Postgres.AutoColumns,
		DSN:                    string(s.Postgres.DSN),
		Table:                  s.Postgres.Table,
		EventID:                s.Postgres.EventID,
		Columns:                cols,
		PositionsTable:         s.Postgres.PositionsTable,
		Tombstones:             s.Postgres.Tombstones,
		Mode:                   s.Postgres.Mode,
		Version:                s.Postgres.Version,
		Envelope:               s.Postgres.Envelope,
		UnavailableValue:       s.Postgres.UnavailableValue,
		BinaryHandling:         s.Postgres.BinaryHandling,
		DecimalHandling:        s.Postgres.DecimalHandling,
		IntervalHandling:       s.Postgres.IntervalHandling,
		TimePrecision:          s.Postgres.TimePrecision,
		Timeout:                s.Postgres.Timeout.Duration,
		CommitInterval:         s.Commit.Interval.Duration,
		MaxRecords:             s.Commit.MaxRecords,
		SessionTimeout:         s.SessionTimeout.Duration,
		MetadataMaxAge:         s.MetadataMaxAge.Duration,
		FetchMaxBytes:          s.FetchMaxBytes,
		MaxPartitionFetchBytes: s.MaxPartitionFetchBytes,
		Origin:                 reader.OriginOf(f, topology.ItemPath("sinks", f.Sinks, s)),
	}
}

// Option configures a Sink.
type Option func(*Sink)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(s *Sink) { s.log = l } }

// WithKafkaOptions appends franz-go options to the client the sink builds,
// after its own.
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(s *Sink) { s.kopts = append(s.kopts, opts...) }
}

// WithFailpoints arms failpoints; the sink acts on
// failpoint.CrashBeforeDBCommit and failpoint.CrashAfterDBCommit, counting
// database commits from 1.
func WithFailpoints(fps ...failpoint.Failpoint) Option {
	return func(s *Sink) { s.fp.List = append(s.fp.List, fps...) }
}

// DirectCopy turns the direct path (a batch COPYed straight into the
// table when it can be, see direct.go) on, the default, or off, for
// every batch to take the staged load: to compare the two, or to rule the
// direct path out.
func DirectCopy(on bool) Option { return func(s *Sink) { s.noDirect = !on } }

// WithCrashAction replaces what a failpoint does; the default is
// failpoint.KillSelf. If the action returns, Run returns failpoint.ErrCrashed.
func WithCrashAction(f func()) Option { return func(s *Sink) { s.fp.Crash = f } }

// table is a parsed schema-qualified name.
type table struct{ schema, name string }

func (t table) ident() pgx.Identifier { return pgx.Identifier{t.schema, t.name} }
func (t table) String() string        { return t.ident().Sanitize() }

// tableOf is the parsed s, or the zero table.
func tableOf(s string) table { t, _ := parseTable(s); return t }

func parseTable(s string) (table, bool) {
	schema, name, ok := strings.Cut(s, ".")
	if !ok || schema == "" || name == "" || strings.Contains(name, ".") {
		return table{}, false
	}
	return table{schema, name}, true
}

var sources = []string{topology.SourceValue, topology.SourceKey, topology.SourceTopic,
	topology.SourcePartition, topology.SourceOffset, topology.SourceTimestamp}

// validate applies defaults to cfg and returns every problem. It never
// mentions the DSN's value.
func (cfg *Config) validate() error {
	rd := reader.Reader{Role: reader.Sinks, Brokers: cfg.Brokers, ClientID: &cfg.ClientID, InputFormat: &cfg.InputFormat,
		CommitInterval: &cfg.CommitInterval, MaxRecords: &cfg.MaxRecords, SessionTimeout: &cfg.SessionTimeout, MetadataMaxAge: &cfg.MetadataMaxAge,
		FetchMaxBytes: &cfg.FetchMaxBytes, MaxPartitionFetchBytes: &cfg.MaxPartitionFetchBytes}
	rd.Defaults()
	cfg.defaults()
	errs := reader.Required([]reader.Field{
		{Name: "sink", Value: cfg.Sink}, {Name: "instance id", Value: cfg.InstanceID}, {Name: "input topic", Value: cfg.Input},
		{Name: "postgres dsn", Value: cfg.DSN}, {Name: "table", Value: cfg.Table}, {Name: "event id column", Value: cfg.EventID},
	})
	errs = append(errs, rd.Check()...)
	errs = append(errs, cfg.checkSpec()...)
	if _, err := serde.NewCodec(cfg.inputCodec()); err != nil {
		errs = append(errs, &fault.ConfigError{Err: fmt.Errorf("input: %w", err)})
	}
	errs = append(errs, cfg.validateTypes()...)
	errs = append(errs, cfg.checkTables()...)
	errs = append(errs, cfg.checkColumns()...)
	errs = append(errs, cfg.checkVersion()...)
	errs = append(errs, cfg.checkEnvelope()...)
	return errors.Join(errs...)
}

// defaults applies the topology spec's defaults of a sink's own settings
// to those left zero (rd.Defaults applies those it shares with a stage).
func (cfg *Config) defaults() {
	reader.OrDefault(&cfg.Tombstones, topology.Default[string]("sinks[].postgres.tombstones"))
	reader.OrDefault(&cfg.Mode, topology.Default[string]("sinks[].postgres.mode"))
	reader.OrDefault(&cfg.Types, topology.Default[string]("sinks[].postgres.types"))
	reader.OrDefault(&cfg.Timeout, topology.Default[time.Duration]("sinks[].postgres.timeout"))
	// A file leaves envelope empty for none: the spec gives it no default.
	reader.OrDefault(&cfg.Envelope, topology.EnvelopeNone)
	if cfg.Envelope == topology.EnvelopeDebezium {
		// As the connector's own default: Connect bytes, which the JSON
		// converter writes as base64.
		reader.OrDefault(&cfg.BinaryHandling, topology.BinaryBytes)
		reader.OrDefault(&cfg.DecimalHandling, topology.DecimalPrecise)
		reader.OrDefault(&cfg.IntervalHandling, topology.IntervalNumeric)
		reader.OrDefault(&cfg.TimePrecision, topology.TimeAdaptive)
	}
	if t, ok := parseTable(cfg.Table); ok && cfg.PositionsTable == "" {
		cfg.PositionsTable = t.schema + "." + topology.Default[string]("sinks[].postgres.positions_table")
	}
}

// checkSpec reports the settings outside the topology spec's bounds or
// allowed values (types: validateTypes).
func (cfg *Config) checkSpec() []error {
	var errs []error
	lo, hi := topology.Bounds[time.Duration]("sinks[].session_timeout")
	if cfg.SessionTimeout > 0 && (cfg.SessionTimeout < lo || cfg.SessionTimeout > hi) {
		errs = append(errs, fault.NewConfigError("session timeout %s must be between the heartbeat interval %s and %s", cfg.SessionTimeout, lo, hi))
	}
	for _, m := range []struct{ name, path, v string }{
		{"binary handling", "sinks[].postgres.binary_handling", cfg.BinaryHandling},
		{"decimal handling", "sinks[].postgres.decimal_handling", cfg.DecimalHandling},
		{"interval handling", "sinks[].postgres.interval_handling", cfg.IntervalHandling},
		{"time precision", "sinks[].postgres.time_precision", cfg.TimePrecision},
	} {
		if m.v == "" {
			continue
		}
		if err := reader.OneOf(m.name, m.path, m.v); err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range []error{
		reader.Within("postgres timeout", "sinks[].postgres.timeout", cfg.Timeout),
		reader.OneOf("envelope", "sinks[].postgres.envelope", cfg.Envelope),
		reader.OneOf("tombstones", "sinks[].postgres.tombstones", cfg.Tombstones),
		reader.OneOf("mode", "sinks[].postgres.mode", cfg.Mode),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkTables reports a table, positions table or dead-letter table that
// is not schema.table, and a dead-letter destination missing, doubled or
// shared with the sink's own tables.
func (cfg *Config) checkTables() []error {
	var errs []error
	if _, ok := parseTable(cfg.Table); cfg.Table != "" && !ok {
		errs = append(errs, fault.NewConfigError("table %q is not schema.table", cfg.Table))
	}
	if _, ok := parseTable(cfg.PositionsTable); cfg.PositionsTable != "" && !ok {
		errs = append(errs, fault.NewConfigError("positions table %q is not schema.table", cfg.PositionsTable))
	}
	switch dt, ok := parseTable(cfg.DeadLetterTable); {
	case cfg.DeadLetter == "" && cfg.DeadLetterTable == "":
		errs = append(errs, fault.NewConfigError("dead-letter topic or table is required"))
	case cfg.DeadLetter != "" && cfg.DeadLetterTable != "":
		errs = append(errs, fault.NewConfigError("dead-letter topic %q and table %q: set one, not both", cfg.DeadLetter, cfg.DeadLetterTable))
	case cfg.DeadLetterTable != "" && !ok:
		errs = append(errs, fault.NewConfigError("dead-letter table %q is not schema.table", cfg.DeadLetterTable))
	case cfg.DeadLetterTable != "" && (dt == tableOf(cfg.Table) || dt == tableOf(cfg.PositionsTable)):
		errs = append(errs, fault.NewConfigError("dead-letter table %q is also the sink's table or positions table", cfg.DeadLetterTable))
	}
	return errs
}

// checkColumns reports columns missing, unnamed, doubled or with a source
// the input cannot give, and an event id column that is not one of them.
func (cfg *Config) checkColumns() []error {
	var errs []error
	if len(cfg.Columns) == 0 {
		errs = append(errs, fault.NewConfigError("at least one column is required"))
	}
	seen := map[string]bool{}
	for _, c := range cfg.Columns {
		switch {
		case c.Name == "" || c.Source == "":
			errs = append(errs, fault.NewConfigError("column %q: name and source are required", c.Name))
		case seen[c.Name]:
			errs = append(errs, fault.NewConfigError("column %q appears twice", c.Name))
		case strings.HasPrefix(c.Source, "$") && !slices.Contains(sources, c.Source):
			errs = append(errs, fault.NewConfigError("column %q: unknown source %q", c.Name, c.Source))
		case !strings.HasPrefix(c.Source, "$") && !cfg.fieldsInput():
			errs = append(errs, fault.NewConfigError("column %q: field %q needs json or avro input, not %s", c.Name, c.Source, cfg.InputFormat))
		}
		seen[c.Name] = true
	}
	if cfg.EventID != "" && !seen[cfg.EventID] {
		errs = append(errs, fault.NewConfigError("event id column %q is not one of the columns", cfg.EventID))
	}
	return errs
}

// fieldsInput reports whether the input format has fields a column can
// name.
func (cfg *Config) fieldsInput() bool {
	return cfg.InputFormat == serde.JSON || cfg.InputFormat == serde.Avro
}

// checkVersion reports a version column without mode upsert, or that is
// the event id or no column.
func (cfg *Config) checkVersion() []error {
	switch {
	case cfg.Version == "":
	case cfg.Mode != topology.ModeUpsert:
		return []error{fault.NewConfigError("version column %q needs mode upsert", cfg.Version)}
	case cfg.Version == cfg.EventID:
		return []error{fault.NewConfigError("version column %q is the event id column", cfg.Version)}
	case !slices.ContainsFunc(cfg.Columns, func(c Column) bool { return c.Name == cfg.Version }):
		return []error{fault.NewConfigError("version column %q is not one of the columns", cfg.Version)}
	}
	return nil
}

// checkEnvelope reports what envelope debezium needs and the settings
// lack: mode upsert, tombstones skip, input with fields, an event id that
// is a field or the key.
func (cfg *Config) checkEnvelope() []error {
	if cfg.Envelope != topology.EnvelopeDebezium {
		return nil
	}
	var errs []error
	if cfg.Mode != topology.ModeUpsert {
		errs = append(errs, fault.NewConfigError("envelope debezium needs mode upsert"))
	}
	if cfg.Tombstones != topology.TombstonesSkip {
		errs = append(errs, fault.NewConfigError("envelope debezium needs tombstones skip"))
	}
	if !cfg.fieldsInput() {
		errs = append(errs, fault.NewConfigError("envelope debezium needs json or avro input, not %s", cfg.InputFormat))
	}
	for _, c := range cfg.Columns {
		if c.Name == cfg.EventID && strings.HasPrefix(c.Source, "$") && c.Source != topology.SourceKey {
			errs = append(errs, fault.NewConfigError("envelope debezium: event id column %q must be a field or $key, not %s", c.Name, c.Source))
		}
	}
	return errs
}
