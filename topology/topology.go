package topology

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"
)

// Position is a place in a topology file. Line and Col are 1-based; the zero
// Position means unknown.
type Position struct {
	Line, Col int
}

// isValid reports whether p points into a file.
func (p Position) isValid() bool { return p.Line > 0 }

// String returns "line:col", or "-" for the zero Position.
func (p Position) String() string {
	if !p.isValid() {
		return "-"
	}
	return strconv.Itoa(p.Line) + ":" + strconv.Itoa(p.Col)
}

// Duration is a time.Duration written in YAML as a Go duration string such
// as "100ms", "5s" or "1m30s" (see time.ParseDuration).
type Duration struct{ time.Duration }

// parseScalar implements scalarDecoder. The error does not repeat s, which
// may hold the value of an environment variable.
func (d *Duration) parseScalar(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errBadDuration
	}
	d.Duration = v
	return nil
}

// UnmarshalYAML lets a Duration be decoded with plain yaml.Unmarshal too.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("duration: expected a scalar")
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes d as a duration string, so that it round-trips.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Retention is a long duration written as numbers with the units d (24h),
// h, m and s, such as "7d", "36h" or "1d12h".
type Retention struct{ time.Duration }

// parseScalar implements scalarDecoder.
func (r *Retention) parseScalar(s string) error {
	v, err := parseRetention(s)
	if err != nil {
		return err
	}
	r.Duration = v
	return nil
}

// MarshalYAML writes r in hours, minutes and seconds, so that it
// round-trips.
func (r Retention) MarshalYAML() (any, error) { return r.String(), nil }

// parseRetention parses s, one or more non-negative integers each followed
// by a unit d, h, m or s ("7d", "1d12h"), at most 100 years in all. It
// returns errBadRetention or errRetentionTooLong, which do not repeat s.
func parseRetention(s string) (time.Duration, error) {
	if s == "" {
		return 0, errBadRetention
	}
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 || i == len(s) {
			return 0, errBadRetention
		}
		if i > 9 {
			return 0, errRetentionTooLong
		}
		n, _ := strconv.Atoi(s[:i])
		var unit time.Duration
		switch s[i] {
		case 'd':
			unit = 24 * time.Hour
		case 'h':
			unit = time.Hour
		case 'm':
			unit = time.Minute
		case 's':
			unit = time.Second
		default:
			return 0, errBadRetention
		}
		// Checked before multiplying: a product past int64 would wrap.
		if n > int(maxRetention/unit) {
			return 0, errRetentionTooLong
		}
		if total += time.Duration(n) * unit; total > maxRetention {
			return 0, errRetentionTooLong
		}
		s = s[i+1:]
	}
	return total, nil
}

// maxRetention bounds a retention: 100 years, far inside int64 ns.
const maxRetention = 100 * 365 * 24 * time.Hour

// File is a parsed and validated topology file. Defaults are applied: a File
// returned by Parse or Load needs no further checks.
type File struct {
	Version int     `yaml:"version"` // always 1
	Kafka   Kafka   `yaml:"kafka"`
	Topics  []Topic `yaml:"topics"`
	Stages  []Stage `yaml:"stages"`
	Sinks   []Sink  `yaml:"sinks"`
	Path    string  `yaml:"-"` // the name the file was loaded from

	// pos holds the position of every decoded node by field path, e.g.
	// "stages[0].input.topic"; the root mapping is "".
	pos map[string]Position
	// warnings are problems that do not stop the file from working, such
	// as a literal password.
	warnings Errors
	// problems are the field paths of the problems of a draft (ParseDraft).
	problems map[string]bool
}

// Problem reports whether a problem of a draft (ParseDraft) was reported
// at path, above it (the mapping that holds it, up to the file) or below
// it. It is false for every path of a file that Parse accepted.
func (f *File) Problem(path string) bool {
	if len(f.problems) == 0 {
		return false
	}
	if f.problems[""] {
		return true
	}
	for p := range f.problems {
		if p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") ||
			strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return true
		}
	}
	return false
}

// Warnings returns the file's warnings, sorted by position: settings that
// work but should change, such as a password written literally in the file
// instead of as ${VAR} or a *_file reference. exactly validate prints them.
func (f *File) Warnings() Errors { return f.warnings }

// Kafka is how every stage reaches the cluster.
type Kafka struct {
	// Brokers are seed "host:port" addresses. EXACTLY_BROKERS, a
	// comma-separated list, replaces them when set and non-empty.
	Brokers []string `yaml:"brokers"`
	// ClientID is sent with every request; default "exactly".
	ClientID string `yaml:"client_id"`
	// TransactionTimeout is the producer's transaction.timeout.ms: how long
	// the coordinator waits before aborting the open transaction of an
	// instance that died. Default 30s, at least 1s; it must not exceed the
	// broker's transaction.max.timeout.ms (15m by default).
	TransactionTimeout Duration `yaml:"transaction_timeout"`
	// TLS encrypts every connection to the brokers; zero means plaintext.
	TLS TLS `yaml:"tls"`
	// SASL authenticates every connection to the brokers; zero means none.
	SASL SASL `yaml:"sasl"`
}

// TLS is how a client reaches brokers over TLS. Every client exactly makes
// (stages, sinks, admin commands) uses the same settings.
type TLS struct {
	// Enabled turns TLS on. It defaults to true when the tls mapping is
	// written, so tls: { ca_file: ca.pem } is enough.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the CA certificates that sign the brokers'
	// certificates; default the system's roots. File paths are relative to
	// the topology file's directory; Parse makes them absolute.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// brokers that require mutual TLS (ssl.client.auth=required). Both or
	// neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the brokers' certificates must carry; default
	// the host of the address dialed.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any certificate: for tests only, as it
	// lets anyone in the middle read the traffic and the SASL password.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// SASL is how a client authenticates to brokers (KIP-43; SCRAM is KIP-84,
// OAUTHBEARER KIP-255). Each mechanism takes its own fields: PLAIN and
// SCRAM a username and password, OAUTHBEARER a token, AWS_MSK_IAM AWS
// credentials; validation rejects the fields of another mechanism.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or
	// AWS_MSK_IAM.
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	// Password is written as ${VAR}; validate warns about a literal one.
	// Alternatively PasswordFile names a file holding it (a mounted
	// Kubernetes secret, say), read when a command connects; one trailing
	// newline is dropped. Exactly one of the two.
	Password     Secret `yaml:"password"`
	PasswordFile string `yaml:"password_file"`

	// Token is OAUTHBEARER's bearer token (a JWT, say), written as ${VAR}.
	// Alternatively TokenFile names a file holding it, read again for
	// every new connection and every re-authentication (KIP-368), so that
	// a token refreshed in place (a Kubernetes projected token, a sidecar)
	// is picked up without a restart. Exactly one of the two.
	Token     Secret `yaml:"token"`
	TokenFile string `yaml:"token_file"`
	// Extensions are OAUTHBEARER's SASL extensions (KIP-342), e.g.
	// Confluent Cloud's logicalCluster and identityPoolId.
	Extensions map[string]string `yaml:"extensions"`

	// AWS holds AWS_MSK_IAM's credentials. Without the aws mapping they
	// come from the standard variables AWS_ACCESS_KEY_ID,
	// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
	AWS AWSCredentials `yaml:"aws"`
}

// AWSCredentials sign the AWS_MSK_IAM authentication (AWS Signature
// Version 4, as aws-msk-iam-auth does). The region is the one in the
// broker's host name (b-1.x.y.kafka.<region>.amazonaws.com), else
// AWS_REGION or AWS_DEFAULT_REGION.
type AWSCredentials struct {
	AccessKeyID     Secret `yaml:"access_key_id"`
	SecretAccessKey Secret `yaml:"secret_access_key"`
	// SessionToken is required with temporary credentials (an assumed
	// role, STS); optional otherwise.
	SessionToken Secret `yaml:"session_token"`
	// UserAgent replaces franz-go's default, for IAM policies that
	// condition on aws:UserAgent.
	UserAgent string `yaml:"user_agent"`
}

// Standard AWS environment variables, read for AWS_MSK_IAM when the
// topology has no kafka.sasl.aws mapping.
const (
	envAWSAccessKeyID     = "AWS_ACCESS_KEY_ID"
	envAWSSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	envAWSSessionToken    = "AWS_SESSION_TOKEN"
)

// SASL mechanisms.
const (
	mechanismPlain       = "PLAIN"
	mechanismScramSHA256 = "SCRAM-SHA-256"
	mechanismScramSHA512 = "SCRAM-SHA-512"
	mechanismOAuthBearer = "OAUTHBEARER"
	mechanismAWSMSKIAM   = "AWS_MSK_IAM"
)

// Topic is a topic the topology reads or writes. Provisioning creates it
// with these settings when it does not exist.
type Topic struct {
	Name string `yaml:"name"`
	// Partitions bounds how many instances of a stage reading the topic
	// can share the work; at least 1.
	Partitions int32 `yaml:"partitions"`
	// ReplicationFactor is -1 (the default) for the broker's
	// default.replication.factor, or at least 1.
	ReplicationFactor int16 `yaml:"replication_factor"`
	// Config holds topic configs passed to CreateTopics, such as
	// "retention.ms" or "cleanup.policy".
	Config map[string]string `yaml:"config"`
}

// Stage reads one topic, transforms each record and writes another, all in
// one Kafka transaction per batch.
type Stage struct {
	// Name is 1-100 characters of [A-Za-z0-9._-], starting with a letter or
	// digit; it is part of the stage's transactional IDs and group name.
	Name       string     `yaml:"name"`
	Input      Endpoint   `yaml:"input"`
	Output     Endpoint   `yaml:"output"`
	DeadLetter DeadLetter `yaml:"dead_letter"`
	// Key, when set, names a top-level field of the JSON output value whose
	// value becomes the output record's key. Output format must be json.
	Key    string `yaml:"key"`
	Commit Commit `yaml:"commit"`
	// OutputTimestamp is the timestamp of the stage's outputs:
	// OutputTimestampInput (the default) or OutputTimestampWrite.
	OutputTimestamp string `yaml:"output_timestamp"`
	// UpstreamIdleTimeout is how long an upstream partition that sends
	// nothing holds back the stream time of a dedupe or aggregate step
	// (its windows and ID expiry); 0 holds it until it sends. Default 30s.
	UpstreamIdleTimeout Duration `yaml:"upstream_idle_timeout"`
	// Transform is the list of steps each record goes through, in order,
	// between decoding and encoding (see Step).
	Transform []Step `yaml:"transform"`
	// SessionTimeout is the consumer group session timeout, as a sink's.
	// A killed instance holds its partitions until it passes: static
	// members (KIP-345) do not leave on a crash. Default 45s.
	SessionTimeout Duration `yaml:"session_timeout"`
	// MetadataMaxAge is how often the client refreshes topic metadata,
	// which bounds how late a partition added to the input topic is
	// read. Default 30s (franz-go's own is 5m).
	MetadataMaxAge Duration `yaml:"metadata_max_age"`
	// FetchMaxBytes is the consumer's fetch.max.bytes: the most one fetch
	// from one broker returns. The client holds about two fetches per
	// broker (one being read, one arriving), so it bounds the memory of
	// the input whatever the partition count. Default 2 MiB, 1 KiB to
	// 100 MiB.
	FetchMaxBytes int32 `yaml:"fetch_max_bytes"`
	// MaxPartitionFetchBytes is the consumer's max.partition.fetch.bytes:
	// the most one fetch returns of one partition. Default 1 MiB (the
	// Java consumer's), 1 KiB to FetchMaxBytes. A record batch larger than either still comes whole
	// (KIP-74): they bound memory, never progress.
	MaxPartitionFetchBytes int32 `yaml:"max_partition_fetch_bytes"`
	// MaxBufferedBytes is the most the producer holds of records not yet
	// acknowledged (the Java producer's buffer.memory): a record that
	// would pass it waits for room, or fails with its transaction if
	// none comes before the transaction timeout. Default 4 MiB, 1 MiB to
	// 1 GiB; 1 MiB holds any record the producer sends (its batches are
	// at most 1000012 bytes).
	MaxBufferedBytes int `yaml:"max_buffered_bytes"`
}

// Output timestamps of a stage (Stage.OutputTimestamp). Time-based
// retention counts from a record's timestamp.
const (
	OutputTimestampInput = "input" // the input record's: its event time
	OutputTimestampWrite = "write" // the time the stage writes the output
)

// Step is one transform step. Exactly one of its operation fields is set.
// Expressions are CEL (https://cel.dev); they see value, key, headers,
// topic, partition, offset and timestamp, and are compiled when the file is
// loaded by the processor/transform package.
type Step struct {
	// Name labels the step in dead letters; default "transform[i] <op>".
	Name string `yaml:"name"`
	// Filter drops the record when the bool expression is false.
	Filter string `yaml:"filter"`
	// Set assigns fields of the value: field path (a.b.c) -> expression.
	// Every expression sees the value as it was before the step.
	Set map[string]string `yaml:"set"`
	// Drop removes fields (paths).
	Drop []string `yaml:"drop"`
	// Rename moves fields: old path -> new path.
	Rename map[string]string `yaml:"rename"`
	// Key is an expression whose result becomes the output key.
	Key string `yaml:"key"`
	// Route picks the output topic: the first rule whose when is true, or
	// the rule without when. No match keeps the stage's output topic.
	Route []Route `yaml:"route"`
	// Explode is a list expression: one record per element, the element
	// as its value.
	Explode string `yaml:"explode"`
	// Headers sets output headers: name -> string expression.
	Headers map[string]string `yaml:"headers"`
	// Func names a Go transform registered with transform.Register.
	Func string `yaml:"func"`
	// Dedupe drops a record whose ID was seen within a retention: a
	// stateful step, at most one per stage and only as its first step
	// (see Dedupe).
	Dedupe Dedupe `yaml:"dedupe"`
	// Aggregate computes windowed results per record key: a stateful
	// step, the last of its stage (see Aggregate).
	Aggregate Aggregate `yaml:"aggregate"`
	// Stateful calls a Go transform registered with
	// transform.RegisterStateful, with a key-value store of the stage: a
	// stateful step, at most one per stage (see Stateful).
	Stateful Stateful `yaml:"stateful"`
	// Join looks a key up in a table topic as of the record's timestamp
	// and sets a field of the value to the table's value: a stateful
	// step, at most one per stage (see Join).
	Join Join `yaml:"join"`
}

// Dedupe is the dedupe step: `- dedupe: { id: value.event_id, retention: 7d }`.
//
// State is kept per input partition, so duplicates must share their
// input partition: produce them with the same record key, or re-key in an
// earlier stage. The step must be the first of its stage: it decides
// whether an input record is processed at all, on the record as it was
// read.
type Dedupe struct {
	// ID is a CEL expression giving the record's event ID: a non-empty
	// string, or any value but null, used as its JSON text.
	ID string `yaml:"id"`
	// Retention is how long, in stream time (the largest record timestamp
	// seen in the partition), an ID is remembered after it was first seen.
	Retention Retention `yaml:"retention"`
}

// DedupeStore is the name of the dedupe step's store, part of its
// changelog topic's name (see ChangelogTopic).
const DedupeStore = "dedupe"

// ChangelogTopic returns the compacted topic that holds every change to
// store of stage: exactly-<stage>-<store>-changelog.
func ChangelogTopic(stage, store string) string {
	return "exactly-" + stage + "-" + store + "-changelog"
}

// DedupeStep returns the stage's dedupe step, nil if it has none.
func (s *Stage) DedupeStep() *Dedupe {
	for i := range s.Transform {
		if s.Transform[i].Op() == "dedupe" {
			return &s.Transform[i].Dedupe
		}
	}
	return nil
}

// StateTopics returns the changelog topics of the stateful steps of f's
// stages, to be created with the declared topics: compacted, with as many
// partitions as the stage's input topic and its replication factor.
func (f *File) StateTopics() []Topic {
	var out []Topic
	for i := range f.Stages {
		st := &f.Stages[i]
		store := st.StateStore()
		if store == "" {
			continue
		}
		t := Topic{Name: ChangelogTopic(st.Name, store), Partitions: 1, ReplicationFactor: -1,
			Config: map[string]string{"cleanup.policy": "compact"}}
		for _, in := range f.Topics {
			if in.Name == st.Input.Topic {
				t.Partitions, t.ReplicationFactor = in.Partitions, in.ReplicationFactor
			}
		}
		out = append(out, t)
	}
	return out
}

// Route is one rule of a route step.
type Route struct {
	When  string `yaml:"when"`  // bool expression; empty matches every record
	Topic string `yaml:"topic"` // a declared topic
}

// OutputTopics returns every topic the stage may write outputs to: its
// output topic and the topics of its route steps.
func (s *Stage) OutputTopics() []string {
	out := []string{s.Output.Topic}
	for _, st := range s.Transform {
		for _, r := range st.Route {
			if r.Topic != "" && !slices.Contains(out, r.Topic) {
				out = append(out, r.Topic)
			}
		}
	}
	return out
}

// Endpoint is a topic and the format of its record values.
type Endpoint struct {
	Topic string `yaml:"topic"`
	// Format is "json" (the default), "string", "bytes" or "avro".
	Format string `yaml:"format"`
	// Schema is the path of an Avro schema file (.avsc), relative to the
	// directory of the topology file (see File.Resolve). With format avro
	// and no registry, values are raw Avro binary written with it; on an
	// output with a registry, it is the schema registered and written.
	Schema string `yaml:"schema"`
	// Registry frames Avro values in the Confluent wire format. Zero when
	// not written.
	Registry Registry `yaml:"registry"`
}

// Registry is a Confluent-compatible schema registry for an avro Endpoint.
type Registry struct {
	// URL is http(s)://host[:port][/path]; it may come from ${ENV}.
	URL string `yaml:"url"`
	// Subject is where an output registers its schema; default
	// "<topic>-value" (TopicNameStrategy). Outputs only.
	Subject string `yaml:"subject"`
	// ReaderSchema is an .avsc path (relative like Schema) that an input
	// resolves every record's writer schema to. Inputs only.
	ReaderSchema string `yaml:"reader_schema"`
	// Username and Password are sent as HTTP basic auth. Write the
	// password as ${VAR}, or name a file holding it with PasswordFile
	// (relative like Schema; one trailing newline is dropped).
	Username     string `yaml:"username"`
	Password     Secret `yaml:"password"`
	PasswordFile string `yaml:"password_file"`
	// CAFile is a PEM file of the CA certificates an https registry's
	// certificate must chain to; default the system's roots. Relative like
	// Schema.
	CAFile string `yaml:"ca_file"`
	// InsecureSkipVerify accepts any registry certificate: tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// Resolve returns path as a stage must open it: relative paths are taken
// from the directory of the topology file.
func (f *File) Resolve(path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(filepath.Dir(f.Path), path)
}

// DeadLetter is where records that fail to decode, transform or encode go,
// in the same transaction as the stage's outputs.
type DeadLetter struct {
	Topic string `yaml:"topic"`
}

// SinkDeadLetter is where a sink's rejected records go: exactly one of a
// Kafka topic or a table in the sink's database.
type SinkDeadLetter struct {
	// Topic is a Kafka topic. Its dead letters are produced before the
	// database commit that skips their records: at least once (a crash
	// between the two produces them again).
	Topic string `yaml:"topic"`
	// Table is a table of the sink's database, schema-qualified: its
	// rows are written in the transaction of the batch's rows and
	// positions, so each rejected record is recorded exactly once.
	Table string `yaml:"table"`
}

// Commit bounds one transaction: it commits when Interval has passed since
// it began or MaxRecords input records were polled into it, whichever is
// first.
type Commit struct {
	Interval   Duration `yaml:"interval"`    // default 100ms, > 0
	MaxRecords int      `yaml:"max_records"` // default 10000, >= 1
}

// Sink reads one topic and writes its records as rows of a Postgres table,
// storing the stream positions in the same database transaction as the
// rows (see package processor/pgsink).
type Sink struct {
	// Name follows the rules of stage names; the sink consumes in group
	// exactly-sink-<name>.
	Name       string         `yaml:"name"`
	Input      Endpoint       `yaml:"input"`
	DeadLetter SinkDeadLetter `yaml:"dead_letter"`
	Postgres   Postgres       `yaml:"postgres"`
	Commit     Commit         `yaml:"commit"`
	// SessionTimeout is the consumer group session timeout: how long the
	// group waits for a silent instance before moving its partitions.
	// Default 45s; the broker bounds it (group.min.session.timeout.ms, 6s
	// by default).
	SessionTimeout Duration `yaml:"session_timeout"`
	// MetadataMaxAge is as a stage's: how late a partition added to the
	// input topic is read at most. Default 30s.
	MetadataMaxAge Duration `yaml:"metadata_max_age"`
	// FetchMaxBytes and MaxPartitionFetchBytes are as a stage's; a sink's
	// FetchMaxBytes defaults to 4 MiB.
	FetchMaxBytes          int32 `yaml:"fetch_max_bytes"`
	MaxPartitionFetchBytes int32 `yaml:"max_partition_fetch_bytes"`
}

// Postgres is where a sink writes.
type Postgres struct {
	// DSN is a libpq connection string or URL. Write it as ${VAR}: it holds
	// credentials, and it is never shown in messages.
	DSN Secret `yaml:"dsn"`
	// Table is the target table, schema-qualified: "schema.table".
	Table string `yaml:"table"`
	// EventID names the column, one of Columns, that is the table's
	// primary key; its field must be present in every record.
	EventID string `yaml:"event_id"`
	// Columns maps each column to what it holds: a top-level field of the
	// value (JSON or Avro), or $value (the whole value), $key, $topic,
	// $partition, $offset or $timestamp. A column is written "col: field"
	// or "col: { field: field, type: numeric(12,2) }"; the type is kept in
	// ColumnTypes.
	Columns ColumnSources `yaml:"columns"`
	// ColumnTypes maps the columns declared with a type to it: a Postgres
	// type name the sink creates the column with.
	ColumnTypes map[string]string `yaml:"-"`
	// ColumnOrder lists the keys of Columns in file order.
	ColumnOrder []string `yaml:"-"`
	// Types is where the types of the columns the sink creates come
	// from: "declared" (the default: a column's type, else text) or
	// "from_schema" (avro input: a field's column takes the type of the
	// field in the Avro schema; a declared type wins).
	Types string `yaml:"types"`
	// AutoColumns (avro input, types from_schema) loads every top-level
	// field that no column maps into a column named as the field, and
	// adds the column when a newer writer schema brings a new field.
	AutoColumns bool `yaml:"auto_columns"`
	// PositionsTable holds (topic, partition, next_offset); schema-qualified.
	// Default: exactly_positions in the schema of Table.
	PositionsTable string `yaml:"positions_table"`
	// Tombstones is what a record with a null value does: "skip" (the
	// default) or "delete" the row whose event ID is the record's key.
	Tombstones string `yaml:"tombstones"`
	// Mode is "insert" (the default: a row whose event ID exists is left
	// alone) or "upsert" (it is overwritten).
	Mode string `yaml:"mode"`
	// Version names a column, one of Columns, other than EventID, that
	// guards upserts (mode upsert only): a record replaces the stored row
	// only if its version is greater, compared in the column's type. A
	// record without a version is a dead letter. Default: none (the last
	// record read wins).
	Version string `yaml:"version"`
	// Envelope is how a value carries its row: "" or "none" (the value is
	// the row), or "debezium" (a change event {"op", "before", "after"},
	// optionally inside {"schema", "payload"}: c, u and r upsert the row
	// mapped from after, d deletes the row whose event ID is in before;
	// needs mode upsert).
	Envelope string `yaml:"envelope"`
	// UnavailableValue is the text a change event puts in place of a
	// value it did not capture (Debezium's unavailable.value.placeholder,
	// for an unchanged TOASTed column): such a column keeps its stored
	// value. Default __debezium_unavailable_value.
	UnavailableValue string `yaml:"unavailable_value"`
	// BinaryHandling is how a change event writes a bytea column's bytes
	// where no schema types them as bytes: Debezium's binary.handling.mode,
	// "bytes" (Connect's JSON converter writes them as base64), "base64",
	// "base64-url-safe" or "hex". A string going to a bytea column is
	// decoded by it; one that does not decode is a dead letter. Default:
	// "bytes" with envelope debezium; else none (bytea's text input).
	BinaryHandling string `yaml:"binary_handling"`
	// DecimalHandling, IntervalHandling and TimePrecision are how a
	// change event writes decimals, intervals and dates and times where no
	// schema types them: Debezium's decimal.handling.mode,
	// interval.handling.mode and time.precision.mode, with their values.
	// A value whose meaning the mode leaves open is a dead letter, never
	// guessed. Default: Debezium's (precise, numeric, adaptive) with
	// envelope debezium; else none.
	DecimalHandling  string `yaml:"decimal_handling"`
	IntervalHandling string `yaml:"interval_handling"`
	TimePrecision    string `yaml:"time_precision"`
	// Timeout bounds one attempt at a call to PostgreSQL: a batch's
	// transaction from taking a connection to COMMIT, a read of the
	// stored positions, the set-up of the sink's tables. A server that
	// stops answering on an open connection (no reset, no error) would
	// otherwise hold the sink for ever: libpq and pgx wait without end.
	// The attempt is then cancelled and retried with backoff, like any
	// transient fault. Default 1m, between 1s and 1h.
	Timeout Duration `yaml:"timeout"`
}

// ColumnSources maps a sink's columns to their sources (see
// Postgres.Columns).
type ColumnSources map[string]string

// columnSpec is the long form of a column's mapping.
type columnSpec struct {
	Field string `yaml:"field"`
	Type  string `yaml:"type"`
}

// Where a sink's column types come from (Postgres.Types).
const (
	TypesDeclared   = "declared"
	TypesFromSchema = "from_schema"
)

// Secret is a string that must not appear in messages or logs: fmt and slog
// print it redacted. Convert it with string(s) to use it.
type Secret string

func (Secret) String() string            { return "[redacted]" }
func (Secret) GoString() string          { return `"[redacted]"` }
func (Secret) LogValue() slog.Value      { return slog.StringValue("[redacted]") }
func (Secret) MarshalYAML() (any, error) { return "[redacted]", nil }

// Column sources other than a field name.
const (
	SourceValue     = "$value"
	SourceKey       = "$key"
	SourceTopic     = "$topic"
	SourcePartition = "$partition"
	SourceOffset    = "$offset"
	SourceTimestamp = "$timestamp"
)

// Tombstone policies and sink modes.
const (
	TombstonesSkip   = "skip"
	TombstonesDelete = "delete"
	ModeInsert       = "insert"
	ModeUpsert       = "upsert"
	EnvelopeNone     = "none"
	EnvelopeDebezium = "debezium"
)

// Debezium's binary.handling.mode values: how a change event writes bytes.
const (
	BinaryBytes         = "bytes"
	BinaryBase64        = "base64"
	BinaryBase64URLSafe = "base64-url-safe"
	BinaryHex           = "hex"
)

// Debezium's decimal.handling.mode, interval.handling.mode and
// time.precision.mode values (see the connector's "Data type mappings").
const (
	DecimalPrecise           = "precise"
	DecimalString            = "string"
	DecimalDouble            = "double"
	IntervalNumeric          = "numeric"
	IntervalString           = "string"
	TimeAdaptive             = "adaptive"
	TimeAdaptiveMicroseconds = "adaptive_time_microseconds"
	TimeConnect              = "connect"
	TimeISOString            = "isostring"
)

// Stage returns the stage called name.
func (f *File) Stage(name string) (*Stage, bool) {
	for i := range f.Stages {
		if f.Stages[i].Name == name {
			return &f.Stages[i], true
		}
	}
	return nil, false
}

// Sink returns the sink called name.
func (f *File) Sink(name string) (*Sink, bool) {
	for i := range f.Sinks {
		if f.Sinks[i].Name == name {
			return &f.Sinks[i], true
		}
	}
	return nil, false
}

// Topic returns the topic called name.
func (f *File) Topic(name string) (*Topic, bool) {
	for i := range f.Topics {
		if f.Topics[i].Name == name {
			return &f.Topics[i], true
		}
	}
	return nil, false
}

// Position returns where the node at path (for example
// "stages[0].input.topic", or "" for the root mapping) was written, or the
// zero Position if path was not in the file (absent, defaulted, or replaced
// by EXACTLY_BROKERS).
func (f *File) Position(path string) Position {
	return f.pos[path]
}

// ItemPath returns the field path of item, an element of items that the
// file's list list holds ("stages", "sinks"): "stages[2]", or "stages[?]"
// when item is not one of them (a copy, say).
func ItemPath[T any](list string, items []T, item *T) string {
	for i := range items {
		if &items[i] == item {
			return fmt.Sprintf("%s[%d]", list, i)
		}
	}
	return list + "[?]"
}

// Where returns path located in the file for an error message,
// "file:line:col: path", or path alone when the node is not in the file
// (a default, say).
func (f *File) Where(path string) string {
	if p := f.pos[path]; p.isValid() {
		return (&Error{File: f.Path, Pos: p}).Error() + path
	}
	return path
}

// StagesInOrder returns the stages sorted so that a stage comes after every
// stage writing its input topic, ties in file order. Stages on a cycle
// (which Parse rejects) come last, in file order.
func (f *File) StagesInOrder() []*Stage {
	n := len(f.Stages)
	adj := f.graph()
	indeg := make([]int, n)
	for _, outs := range adj {
		for _, j := range outs {
			indeg[j]++
		}
	}
	done := make([]bool, n)
	out := make([]*Stage, 0, n)
	// n is small: a linear scan for the first ready stage keeps file order
	// without a heap.
	for len(out) < n {
		next := -1
		for i := 0; i < n; i++ {
			if !done[i] && indeg[i] == 0 {
				next = i
				break
			}
		}
		if next < 0 {
			break
		}
		done[next] = true
		out = append(out, &f.Stages[next])
		for _, j := range adj[next] {
			indeg[j]--
		}
	}
	for i := range f.Stages {
		if !done[i] {
			out = append(out, &f.Stages[i])
		}
	}
	return out
}

// deadLetterGraph is graph(true) with the sinks as nodes after the stages
// (node len(Stages)+j is Sinks[j]): a stage's outputs and dead letters
// lead to the stages and sinks reading them, a sink's dead-letter topic to
// the stages and sinks reading it.
func (f *File) deadLetterGraph() [][]int {
	ns := len(f.Stages)
	readers := make(map[string][]int)
	for i, s := range f.Stages {
		if s.Input.Topic != "" {
			readers[s.Input.Topic] = append(readers[s.Input.Topic], i)
		}
	}
	for j, s := range f.Sinks {
		if s.Input.Topic != "" {
			readers[s.Input.Topic] = append(readers[s.Input.Topic], ns+j)
		}
	}
	adj := make([][]int, ns+len(f.Sinks))
	link := func(i int, topics []string) {
		for _, t := range topics {
			for _, j := range readers[t] {
				if j != i && !slices.Contains(adj[i], j) {
					adj[i] = append(adj[i], j)
				}
			}
		}
	}
	for i, s := range f.Stages {
		link(i, append(s.OutputTopics(), s.DeadLetter.Topic))
	}
	for j, s := range f.Sinks {
		link(ns+j, []string{s.DeadLetter.Topic})
	}
	return adj
}

// graph returns, for each stage index, the stages reading its output topic
// (itself excluded), in file order.
func (f *File) graph() [][]int {
	readers := make(map[string][]int)
	for i, s := range f.Stages {
		if s.Input.Topic != "" {
			readers[s.Input.Topic] = append(readers[s.Input.Topic], i)
		}
	}
	adj := make([][]int, len(f.Stages))
	for i, s := range f.Stages {
		for _, t := range s.OutputTopics() {
			for _, j := range readers[t] {
				if j != i && !slices.Contains(adj[i], j) {
					adj[i] = append(adj[i], j)
				}
			}
		}
	}
	return adj
}
