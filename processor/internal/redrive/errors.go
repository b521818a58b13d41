package redrive

import "github.com/exactly-io/exactly/processor/internal/fault"

// ErrUsage marks a redrive that its flags do not describe (a --where
// expression that does not compile). The CLI exits 2.
var ErrUsage = fault.ErrUsage
