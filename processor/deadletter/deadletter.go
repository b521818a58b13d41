// Package deadletter is the contract of exactly's dead letters: the
// headers that every dead letter carries, and the reasons its
// HeaderReason header takes. A dead letter is the input record as it came
// (key, value, headers) plus these headers; consumers of a dead-letter
// topic parse them to tell why a record was rejected and where it came
// from.
package deadletter

// Headers that every dead letter carries, beside the input record's own
// headers, whether a stage or a sink wrote it. Their values are UTF-8 text.
// The source triple identifies the input record exactly: it is what a
// replay or an audit needs.
const (
	HeaderReason          = "exactly.dlq.reason"           // one of the Reason constants, or a sink's own reason
	HeaderError           = "exactly.dlq.error"            // the error message
	HeaderStep            = "exactly.dlq.step"             // the transform step that failed, for reason transform
	HeaderValueOmitted    = "exactly.dlq.value.omitted"    // envelope: size of the value left out, bytes
	HeaderKeyOmitted      = "exactly.dlq.key.omitted"      // envelope: size of the key left out, bytes
	HeaderWindowResult    = "exactly.dlq.window.result"    // "true": the value is an aggregate window's result, not an input record
	HeaderStage           = "exactly.dlq.stage"            // stage or sink name
	HeaderSourceTopic     = "exactly.dlq.source.topic"     // input topic
	HeaderSourcePartition = "exactly.dlq.source.partition" // decimal
	HeaderSourceOffset    = "exactly.dlq.source.offset"    // decimal
	HeaderSourceTimestamp = "exactly.dlq.source.timestamp" // Unix milliseconds, decimal
	// HeaderSourceTopicID is the input topic's ID (KIP-516), base64 as
	// kadm.TopicID prints it: a topic deleted and created again under
	// its name starts its offsets at 0 again, and only the ID tells its
	// dead letters from the old topic's.
	HeaderSourceTopicID = "exactly.dlq.source.topic_id"
)

// Dead-letter reasons, written to the HeaderReason header. They name the
// step of the pipeline that rejected the record. A sink adds its own
// (ReasonEventID, ReasonPostgres, ...).
const (
	ReasonDecode    = "decode"    // the input value is not valid in its format
	ReasonTransform = "transform" // a transform step failed; HeaderStep names it
	ReasonKey       = "key"       // the key field is missing
	ReasonEncode    = "encode"    // the output value does not fit the output format
	ReasonProduce   = "produce"   // the broker refused the output, e.g. too large
	ReasonLate      = "late"      // an aggregate step: every window of the record's event time has closed
)

// Dead-letter reasons of the sink, written to the exactly.dlq.reason header
// (deadletter.HeaderReason) beside deadletter.ReasonDecode.
const (
	// ReasonEventID: the record has no event ID (the event_id column's
	// field is missing, null or empty), or a tombstone to delete has no key.
	ReasonEventID = "event_id"
	// ReasonPostgres: Postgres rejected the row itself (SQLSTATE
	// class 22, data exception, 23, integrity constraint violation, P0, a
	// trigger that raised, ...): a NUL character in text or jsonb, a value
	// too long or out of range, a value of the wrong type, a check, not
	// null, unique, foreign key or exclusion constraint, at statement time
	// or (a deferred one) at commit. Also an error of no known class
	// that the bisection finds following single records.
	// HeaderSQLState holds the SQLSTATE.
	ReasonPostgres = "postgres"
	// ReasonVersion: in a version-guarded upsert, the record's version
	// (the version column's field) is missing or null, so it cannot be
	// ordered against the stored row.
	ReasonVersion = "version"
	// ReasonEnvelope: a change event (envelope debezium) that cannot be
	// applied: not an object, an unknown op, no after on c, u or r, no
	// before on d.
	ReasonEnvelope = "envelope"
)

// HeaderSQLState is the header holding the SQLSTATE of a dead letter whose
// reason is ReasonPostgres.
const HeaderSQLState = "exactly.dlq.sqlstate"

// Headers of a record that `exactly redrive` wrote back to its source.
const (
	// HeaderRedriveCount counts how many times `exactly redrive` wrote a
	// dead letter back to its source: decimal text, 1 on the first
	// redrive.
	HeaderRedriveCount = "exactly.redrive.count"
	// HeaderRedriveTimestamp is the record's original timestamp, Unix
	// milliseconds, decimal. Redrive writes the record with the time of
	// writing, so that the source topic's retention.ms counts from then
	// and does not delete it before the stage reads it; the stage takes
	// this header as the record's timestamp.
	HeaderRedriveTimestamp = "exactly.redrive.timestamp"
)
