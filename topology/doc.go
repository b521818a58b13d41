// Package topology reads the topology file that declares the topics,
// stages and sinks of an exactly deployment, and checks it before any
// network I/O. It imports no Kafka client.
//
// Each setting of the file is defined once, in this package's spec: its
// path, type, default, bounds or allowed values and a line of doc. Parse
// applies the defaults and reports every problem, sorted by position, as
//
//	file:line:col: path.to.field: message (hint)
//
// for example
//
//	topology.yaml:7:13: stages[0].input.topic: topic "nope" is not declared (add it under topics:)
//
// The field reference (cmd/exactly/docs/topology.md, `exactly help
// topology`) and the JSON Schema (Schema, `exactly schema`) are generated
// from the same spec; Default and Bounds give the engine its values.
//
// ${VAR} and ${VAR:-default} in any scalar are expanded from the
// environment, and messages show the reference, never its value. Load and
// Parse stop on a variable that is not set; LoadOffline, for checking a
// file where it will not run, needs none. EXACTLY_BROKERS, when set and
// non-empty, replaces kafka.brokers.
package topology
