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

// OrdersPerMinute is orders-per-minute.yaml: the stage dedupe,
// orders.events → orders.by-customer, drops resent events by event ID and
// re-keys by customer; the stage per-minute sums orders per customer per
// minute.
//
//go:embed orders-per-minute.yaml
var OrdersPerMinute []byte
