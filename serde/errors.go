package serde

import "errors"

// Sentinel errors returned (wrapped) by codecs. A record whose value fails
// with any of them is a permanent fault of that record: the stage
// dead-letters it and goes on.
var (
	// ErrNullValue means the record value is null: a Kafka tombstone, or the
	// JSON literal null, which carries no event.
	ErrNullValue = errors.New("null value")
	// ErrInvalidUTF8 means a text format received bytes that are not valid
	// UTF-8. Such bytes are rejected, never repaired into U+FFFD.
	ErrInvalidUTF8 = errors.New("invalid utf-8")
	// ErrSyntax means the bytes are not one well-formed value of the format.
	ErrSyntax = errors.New("syntax error")
	// ErrUnsupported means a value cannot be encoded in the target format.
	ErrUnsupported = errors.New("unsupported value")
	// ErrInexact means a value cannot be read or written exactly: a
	// number beyond its type's range or one that would be rounded, a
	// string with a lone surrogate, NaN or ±Inf for JSON. It is wrapped by
	// *ValueError, which names the field. Such a value is dead-lettered,
	// never rewritten into something else.
	ErrInexact = errors.New("value cannot be represented exactly")
	// ErrDuplicateKey means a JSON object that is read has two members
	// with one key (by their text: "s" and "\u0073" are one key). It is
	// wrapped by *ValueError, which names the key's path.
	ErrDuplicateKey = errors.New("duplicate key")
	// ErrUnknownFormat is returned by New for a format name it does not know.
	ErrUnknownFormat = errors.New("unknown format")
	// ErrConfig is returned by NewCodec for settings it cannot use, such as
	// an Avro schema file that does not parse.
	ErrConfig = errors.New("invalid codec config")
	// ErrFrame means a record is not in the Confluent wire format: shorter
	// than its 5-byte header, or a magic byte other than 0.
	ErrFrame = errors.New("bad wire frame")
	// ErrUnknownSchema means the schema registry has no schema with the ID
	// in a record's frame (HTTP 404): the record cannot ever be decoded.
	ErrUnknownSchema = errors.New("unknown schema id")
	// ErrIncompatible means data written with one Avro schema cannot be
	// read with the reader schema (a field without a default, say).
	ErrIncompatible = errors.New("incompatible schemas")
	// ErrRegistryRefused means the schema registry answered what asking
	// again cannot change: the credentials are refused (HTTP 401, 403), or
	// the writer schema cannot be registered under its subject (409, an
	// incompatible schema; 422, an invalid one) and is not there already.
	// It is the configuration's fault, not the record's, and not
	// transient: a stage or sink stops, naming it, instead of dead-lettering
	// every record or retrying for ever.
	ErrRegistryRefused = errors.New("refused by the schema registry")
	// ErrTransient marks a failure that is not the record's fault and may
	// pass on retry, such as a schema registry that is down or answers
	// 5xx. The stage retries the record; it never dead-letters it.
	ErrTransient = errors.New("transient")
)

// IsRegistryRefused reports whether err is ErrRegistryRefused.
func IsRegistryRefused(err error) bool { return errors.Is(err, ErrRegistryRefused) }

// IsTransient reports whether err is a transient failure (ErrTransient).
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }
