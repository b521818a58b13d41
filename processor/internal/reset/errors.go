package reset

import (
	"errors"

	"github.com/exactly-io/exactly/processor/internal/fault"
)

// ErrUsage marks a reset that the flags do not describe: no target or
// more than one, a bad time, an offset outside the log. The CLI exits 2.
var ErrUsage = fault.ErrUsage

// ErrLiveMembers is a group that still has members: stop every instance
// of the stage or sink first. A killed instance is a static member
// (KIP-345) and stays one until its session timeout passes.
var ErrLiveMembers = errors.New("the group has live members; stop every instance first (a killed instance stays a member until its session_timeout passes)")
