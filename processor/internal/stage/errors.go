package stage

import "errors"

// ErrNoCommittedOffsets is the resume guard's refusal (see ResumeError):
// the stage's group lost its offsets while the stage's outputs remain.
var ErrNoCommittedOffsets = errors.New("no committed offsets, but outputs exist")
