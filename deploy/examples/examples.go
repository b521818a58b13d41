// Package examples holds example topology files, embedded so that
// `exactly demo` runs the same file a reader sees here.
package examples

import _ "embed"

// Orders is orders.yaml: one stage, orders.raw → orders.clean, with
// dead letters in orders.dlq, and the sink orders-pg, orders.clean →
// Postgres table raw.events, with dead letters in orders.sink-dlq.
//
//go:embed orders.yaml
var Orders []byte
