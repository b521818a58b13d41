package failpoint

import "errors"

// ErrCrashed is returned by a stage's or a sink's Run when a failpoint's
// crash action returned instead of ending the process (as the embedded
// demo's action does).
var ErrCrashed = errors.New("crashed at failpoint")
