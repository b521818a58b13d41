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
//	    output: { topic: orders.clean, format: json }   # format: json (default), string or bytes
//	    dead_letter: { topic: orders.dlq }              # required, declared above
//	    key: event_id                   # optional; output key = this top-level JSON field
//	    commit: { interval: 100ms, max_records: 10000 } # the defaults
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
// A key needs output format json, since it is read from the JSON value.
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
