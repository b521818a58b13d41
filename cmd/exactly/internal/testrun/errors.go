package testrun

import "errors"

// ErrMismatch is returned by Run when the records differ from the
// fixture's; the Result holds the differences.
var ErrMismatch = errors.New("records differ from the fixture")

// ErrCannotRun is matched (errors.Is) by Run's errors that say the fixture
// and the topology do not fit together (an undeclared topic, a partition
// the topic lacks, a stage that needs the network): a usage error, not a
// difference in the records.
var ErrCannotRun = errors.New("the fixture cannot run against the topology")

// cannotRun marks err as ErrCannotRun, keeping its text.
type cannotRun struct{ err error }

func (e cannotRun) Error() string        { return e.err.Error() }
func (e cannotRun) Unwrap() error        { return e.err }
func (e cannotRun) Is(target error) bool { return target == ErrCannotRun }
