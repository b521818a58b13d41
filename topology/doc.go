// Package topology reads the topology file that declares the topics and
// stages of an exactly deployment, and checks it before any network I/O.
// It imports no Kafka client.
//
// # File format
//
// A topology file is one YAML document:
//
//	version: 1                          # required; must be 1
//	kafka:
//	  brokers: ["127.0.0.1:9092"]       # required, host:port each; EXACTLY_BROKERS overrides
//	  client_id: exactly                # default "exactly"
//	  transaction_timeout: 30s          # default 30s, at least 1s
//	  tls:                              # optional; enabled defaults to true once tls: is written
//	    ca_file: ca.pem                 # PEM CAs; default the system's roots
//	    cert_file: client.pem           # optional client certificate, with key_file
//	    key_file: client.key
//	    server_name: kafka.internal     # default: the host dialed
//	    insecure_skip_verify: false     # tests only (warned about)
//	  sasl:                             # optional
//	    mechanism: SCRAM-SHA-512        # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (any case)
//	    username: ${KAFKA_USER}         # PLAIN and SCRAM: required
//	    password: ${KAFKA_PASSWORD}     # PLAIN and SCRAM: required, or password_file: /run/secrets/kafka
//	    # token: ${KAFKA_OAUTH_TOKEN}   # OAUTHBEARER: required, or token_file (re-read for every authentication)
//	    # extensions: { logicalCluster: lkc-abc123 }  # OAUTHBEARER: optional SASL extensions (KIP-342)
//	    # aws:                          # AWS_MSK_IAM: optional; default AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
//	    #   access_key_id: ${AWS_ACCESS_KEY_ID}
//	    #   secret_access_key: ${AWS_SECRET_ACCESS_KEY}
//	    #   session_token: ${AWS_SESSION_TOKEN}   # for temporary credentials
//	topics:
//	  - name: orders.raw                # required; 1-249 of [a-zA-Z0-9._-], not "." or ".."
//	    partitions: 3                   # required, at least 1
//	    replication_factor: -1          # default -1 (broker default), else at least 1
//	    config: { retention.ms: "604800000" }  # optional topic configs for CreateTopics
//	  - { name: orders.clean, partitions: 3 }
//	  - { name: orders.dlq,   partitions: 1 }
//	stages:
//	  - name: clean                     # required; ^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$
//	    input:  { topic: orders.raw,   format: json }   # topic required, declared above
//	    output: { topic: orders.clean, format: json }   # format: json (default), string, bytes or avro
//	    dead_letter: { topic: orders.dlq }              # required, declared above
//	    key: event_id                   # optional; output key = this top-level JSON field
//	    commit: { interval: 100ms, max_records: 10000 } # the defaults
//	    session_timeout: 45s            # consumer group session timeout, 1s or more; default 45s
//	    metadata_max_age: 30s           # new input partitions are read within this; 1s-1h, default 30s
//	    fetch_max_bytes: 2097152        # bytes one fetch returns at most; 1 KiB-100 MiB, default 2 MiB
//	    max_partition_fetch_bytes: 1048576  # of one partition; 1 KiB-fetch_max_bytes, default 1 MiB
//	    max_buffered_bytes: 4194304     # the producer's unacknowledged records; 1 MiB-1 GiB, default 4 MiB
//	sinks:
//	  - name: orders-pg                 # required; same rules as stage names
//	    input: { topic: orders.clean, format: json }    # topic required, declared above
//	    dead_letter: { topic: orders.dlq }              # required, declared above
//	    postgres:
//	      dsn: ${PG_DSN}                # required; never shown in messages
//	      table: raw.events             # required, schema.table
//	      event_id: event_id            # required: the primary key column, one of columns
//	      columns:                      # column -> field, or $value $key $topic $partition $offset $timestamp
//	        event_id: event_id
//	        body: $value
//	        amount: { field: amount, type: "numeric(12,2)" }  # long form: the type a created table gets
//	      types: declared               # declared (default) or from_schema (avro input: types from the Avro schema)
//	      auto_columns: false           # with from_schema: every field is a column; new fields add columns
//	      positions_table: raw.stream_positions  # default <schema of table>.exactly_positions
//	      tombstones: skip              # skip (default) or delete (the row whose event_id is the key)
//	      mode: insert                  # insert (default: ON CONFLICT DO NOTHING) or upsert
//	      version: v                    # optional, mode upsert only: a column; a row is replaced only by a greater version
//	      envelope: none                # none (default) or debezium (change events; needs mode upsert)
//	      timeout: 1m                   # bounds one attempt at a PostgreSQL call (a batch's transaction); 1s to 1h; default 1m
//	    commit: { interval: 200ms, max_records: 10000 } # the defaults; the batch is held in memory
//	    session_timeout: 45s            # consumer group session timeout; default 45s
//	    metadata_max_age: 30s           # as a stage's; default 30s
//	    fetch_max_bytes: 4194304        # as a stage's; default 4 MiB
//	    max_partition_fetch_bytes: 1048576  # as a stage's; default 1 MiB
//
// An endpoint with format avro also takes schema (an .avsc path, relative
// to the topology file's directory) and/or registry, a Confluent-compatible
// schema registry:
//
//	input:  { topic: orders.avro, format: avro, schema: order.avsc }    # raw Avro binary
//	input:
//	  topic: orders.avro
//	  format: avro
//	  registry:                         # Confluent wire format: the writer schema comes by ID
//	    url: ${SCHEMA_REGISTRY_URL}     # required, http(s)://host[:port][/path], no credentials in it
//	    reader_schema: order-v2.avsc    # optional: resolve every record to this schema
//	    username: ${SR_USER}            # optional basic auth; password needs username
//	    password: ${SR_PASSWORD}        # or password_file: sr.pass
//	    ca_file: sr-ca.pem              # https only: PEM CAs; default the system's roots
//	    insecure_skip_verify: false     # https only; tests only (warned about)
//	output:
//	  topic: orders.avro
//	  format: avro
//	  schema: order-v2.avsc             # required on avro outputs: what is written (and registered)
//	  registry: { url: "${SCHEMA_REGISTRY_URL}", subject: orders.avro-value }  # subject default <topic>-value
//
// An input takes schema or registry, not both; subject is for outputs and
// reader_schema for inputs. Schema files must exist and be JSON when the
// file is parsed; File.Resolve gives the path to open.
//
// Durations are Go duration strings ("100ms", "5s", "1m30s"). Unknown keys
// and duplicate keys are errors. YAML anchors, aliases and merge keys
// ("<<: *defaults") may be used to share settings between stages.
//
// # Rules
//
// Every topic a stage names (input, output, dead letter) must be declared
// under topics, and topic and stage names must be unique. Topic names that
// differ only in '.' versus '_' are rejected, as Kafka does. A stage must
// not read its own output, nor use its input or output topic as its dead
// letter topic. Several stages may read or write the same topic, but stages
// must not form a cycle (A's output is B's input, ..., back to A).
// A key needs input format json or avro: it is a field of the record's value.
//
// A sink's table and positions table are schema-qualified identifiers of
// letters, digits and '_' (quoted in SQL, so case is kept), and differ.
// Column names follow the same rule; event_id must be one of them. Field
// sources (anything not starting with $) need input format json. Sink names
// are unique among sinks, and a sink must not dead-letter to its input.
//
// # Security
//
// The tls and sasl settings of kafka apply to every client a command makes.
// File paths (ca_file, cert_file, key_file, password_file, token_file) are relative to
// the topology file's directory; Parse makes the kafka ones absolute, and
// the files are read when a command connects, not by Parse. cert_file and
// key_file go together; password and password_file exclude each other, as
// do token and token_file. Each SASL mechanism takes only its own fields.
//
// Passwords belong in ${VAR} references or *_file fields. A password
// written literally in the file (sasl, registry, or in a literal postgres
// DSN) is not an error but a warning, returned by File.Warnings together
// with other risky settings: insecure_skip_verify, PLAIN, OAUTHBEARER or
// AWS_MSK_IAM without tls, a literal token or AWS secret,
// basic auth over http, tls settings under enabled: false.
//
// # Environment
//
// In any scalar value (not in keys), ${VAR} is replaced by the variable's
// value and ${VAR:-default} by the value, or by default when VAR is unset or
// empty; $$ is a literal $ and any other $ is kept. An unset VAR without a
// default is an error. Expansion happens before the scalar is decoded, so
// partitions: "${PARTITIONS:-3}" works. Quote values holding ${...} inside
// flow collections ({...} and [...]), where braces are syntax. Messages
// never show an expanded value, which may be a secret: they show the
// ${...} source text instead.
//
// EXACTLY_BROKERS, when set and non-empty, replaces kafka.brokers with its
// comma-separated entries (spaces trimmed, empty entries dropped); the
// file's brokers are then not checked.
//
// # Errors
//
// Parse reports every problem it finds, not just the first, as Errors:
// one *Error per line, sorted by position, each formatted as
//
//	file:line:col: path.to.field: message (hint)
//
// for example
//
//	topology.yaml:7:13: stages[0].input.topic: topic "nope" is not declared (add it under topics:)
//
// A missing field is reported at the mapping that should hold it.
package topology
