package serde

import "time"

// avroKind is an Avro type's kind, parsed once from the schema so that
// converting a value dispatches on a small integer, not on its name.
type avroKind uint8

const (
	kindNull avroKind = iota
	kindBoolean
	kindInt
	kindLong
	kindFloat
	kindDouble
	kindBytes
	kindString
	kindRecord
	kindEnum
	kindArray
	kindMap
	kindUnion
	kindFixed
)

// kindNames are the kinds' names in the specification (and goavro's for
// a union's unnamed branch).
var kindNames = [...]string{
	kindNull:    "null",
	kindBoolean: "boolean",
	kindInt:     "int",
	kindLong:    "long",
	kindFloat:   "float",
	kindDouble:  "double",
	kindBytes:   "bytes",
	kindString:  "string",
	kindRecord:  "record",
	kindEnum:    "enum",
	kindArray:   "array",
	kindMap:     "map",
	kindUnion:   "union",
	kindFixed:   "fixed",
}

func (k avroKind) String() string { return kindNames[k] }

// isPrimitive reports whether k is one of the specification's primitive
// types, those a schema names by a bare string.
func (k avroKind) isPrimitive() bool { return k <= kindString }

// parseKind returns the kind named s ("error" is a record); false for a
// name that is no kind (a named type's, or none).
func parseKind(s string) (avroKind, bool) {
	if s == "error" {
		return kindRecord, true
	}
	for k, name := range kindNames {
		if name == s {
			return avroKind(k), true
		}
	}
	return 0, false
}

// parsePrimitive returns the primitive kind named s; false for any other
// name.
func parsePrimitive(s string) (avroKind, bool) {
	k, ok := parseKind(s)
	if !ok || !k.isPrimitive() || s == "error" {
		return 0, false
	}
	return k, true
}

// avroLogical is a logical type this package implements, parsed once from
// the schema; logicalNone for none (or one that is ignored).
type avroLogical uint8

const (
	logicalNone avroLogical = iota
	logicalDecimal
	logicalUUID
	logicalDate
	logicalTimeMillis
	logicalTimeMicros
	logicalTimestampMillis
	logicalTimestampMicros
	logicalTimestampNanos
	logicalLocalTimestampMillis
	logicalLocalTimestampMicros
	logicalLocalTimestampNanos
)

var logicalNames = [...]string{
	logicalNone:                 "",
	logicalDecimal:              "decimal",
	logicalUUID:                 "uuid",
	logicalDate:                 "date",
	logicalTimeMillis:           "time-millis",
	logicalTimeMicros:           "time-micros",
	logicalTimestampMillis:      "timestamp-millis",
	logicalTimestampMicros:      "timestamp-micros",
	logicalTimestampNanos:       "timestamp-nanos",
	logicalLocalTimestampMillis: "local-timestamp-millis",
	logicalLocalTimestampMicros: "local-timestamp-micros",
	logicalLocalTimestampNanos:  "local-timestamp-nanos",
}

func (l avroLogical) String() string { return logicalNames[l] }

// parseLogical returns the logical type named s; false for "" and for a
// name the specification does not define.
func parseLogical(s string) (avroLogical, bool) {
	for l, name := range logicalNames {
		if s != "" && name == s {
			return avroLogical(l), true
		}
	}
	return logicalNone, false
}

// isTime reports whether l is a time of day (time-millis, time-micros).
func (l avroLogical) isTime() bool {
	return l == logicalTimeMillis || l == logicalTimeMicros
}

// isLocal reports whether l is a local timestamp: a date and time without
// a zone.
func (l avroLogical) isLocal() bool {
	return l >= logicalLocalTimestampMillis
}

// unit is the unit a timestamp or a time of day counts.
func (l avroLogical) unit() time.Duration {
	switch l {
	case logicalTimeMillis, logicalTimestampMillis, logicalLocalTimestampMillis:
		return time.Millisecond
	case logicalTimeMicros, logicalTimestampMicros, logicalLocalTimestampMicros:
		return time.Microsecond
	}
	return time.Nanosecond
}
