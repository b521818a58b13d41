package processor

import "github.com/exactly-io/exactly/processor/internal/fault"

// ErrUsage marks a reset or a redrive that its arguments do not describe:
// no target or more than one, an offset outside the log, a --where
// expression that does not compile.
var ErrUsage = fault.ErrUsage

// usageError is err, which also matches ErrUsage.
type usageError struct{ err error }

func (e usageError) Error() string   { return e.err.Error() }
func (e usageError) Unwrap() []error { return []error{e.err, ErrUsage} }
