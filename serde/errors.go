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
	// ErrUnknownFormat is returned by New for a format name it does not know.
	ErrUnknownFormat = errors.New("unknown format")
	// ErrTransient marks a failure that is not the record's fault and may
	// pass on retry, such as a schema registry that is down or answers
	// 5xx. The stage retries the record; it never dead-letters it.
	ErrTransient = errors.New("transient")
)

// IsTransient reports whether err is a transient failure (ErrTransient).
func IsTransient(err error) bool { return errors.Is(err, ErrTransient) }
