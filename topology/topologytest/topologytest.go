// Package topologytest writes the small topology files that tests of
// several packages share. Tests import it; nothing else does.
package topologytest

import "fmt"

// Stage returns the text of a topology file on brokers (one address):
// topics in and out with partitions partitions each and dlq with 1, and one
// stage named stage reading in and writing out as JSON, dead letters to dlq.
// extra is appended as it is: more keys of the stage (indented four
// spaces), or further sections such as PGSink's.
func Stage(brokers, stage string, partitions int, extra string) string {
	return fmt.Sprintf(`version: 1
kafka: { brokers: [%q] }
topics:
  - { name: in, partitions: %d }
  - { name: out, partitions: %d }
  - { name: dlq, partitions: 1 }
stages:
  - name: %s
    input: { topic: in, format: json }
    output: { topic: out, format: json }
    dead_letter: { topic: dlq }
`, brokers, partitions, partitions, stage) + extra
}

// PGSink returns a sinks section to follow Stage's text: one sink "pg"
// reading out as JSON into table of the database ${PG_DSN}, the event ID and
// the whole value as columns event_id and body, dead letters to dlq.
func PGSink(table string) string {
	return `sinks:
  - name: pg
    input: { topic: out, format: json }
    postgres: { dsn: "${PG_DSN}", table: ` + table + `, event_id: event_id, columns: { event_id: event_id, body: $value } }
    dead_letter: { topic: dlq }
`
}
