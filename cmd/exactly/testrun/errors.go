package testrun

import "errors"

// ErrMismatch is returned by Run when the records differ from the
// fixture's; the Result holds the differences.
var ErrMismatch = errors.New("records differ from the fixture")
