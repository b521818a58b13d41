package failpoint

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
)

// FailpointEnv is the environment variable that arms failpoints in the CLI.
const FailpointEnv = "EXACTLY_FAILPOINT"

// Failpoint names. A failpoint is armed as NAME@N and fires at the Nth
// transaction that a stage of this process ends (counting from 1), or, for
// CrashDuringRestore, at the Nth changelog record it restores.
const (
	// CrashBeforeCommit fires once the Nth transaction's records have been
	// flushed to the broker and before EndTxn is sent: the transaction is
	// left open for the broker, or the next instance, to abort.
	CrashBeforeCommit = "crash-before-commit"
	// CrashAfterCommit fires right after the Nth transaction has committed,
	// before anything else happens.
	CrashAfterCommit = "crash-after-commit"
	// CrashAfterOffsetCommit fires in an exactly-once stage inside the End
	// of the Nth transaction: once the broker has answered its
	// TxnOffsetCommit (the consumer offsets are in the transaction,
	// KIP-447) and before EndTxn is sent. The group then holds pending
	// transactional offsets, which a fetch that requires stable offsets
	// answers with UNSTABLE_OFFSET_COMMIT until the transaction ends.
	CrashAfterOffsetCommit = "crash-after-offset-commit"
	// CrashBeforeDBCommit fires in a Postgres sink once the Nth database
	// transaction has written its rows and positions, before COMMIT.
	CrashBeforeDBCommit = "crash-before-db-commit"
	// CrashAfterDBCommit fires in a Postgres sink right after the Nth
	// database transaction has committed, before anything else happens.
	CrashAfterDBCommit = "crash-after-db-commit"
	// CrashDuringRestore fires in a stage with a stateful step once it
	// has applied the Nth changelog record it restores (counting every
	// restore of the process), in the middle of a restore.
	CrashDuringRestore = "crash-during-restore"
	// PauseDuringRestore stops the process (SIGSTOP, see StopSelf) in a
	// stage with a stateful step once it has applied the Nth changelog
	// record it restores, as CrashDuringRestore counts them: a test acts
	// on the changelog while the restore is cut off, then sends SIGCONT.
	PauseDuringRestore = "pause-during-restore"
)

// failpointNames are the names ParseFailpoints accepts.
var failpointNames = []string{CrashBeforeCommit, CrashAfterCommit, CrashAfterOffsetCommit, CrashBeforeDBCommit, CrashAfterDBCommit, CrashDuringRestore, PauseDuringRestore}

// Failpoint makes a stage or a sink crash at a named point, to prove
// recovery.
type Failpoint struct {
	Name string // one of the failpoint names above
	N    int    // the transaction number, >= 1
}

// String returns the NAME@N form.
func (f Failpoint) String() string { return f.Name + "@" + strconv.Itoa(f.N) }

// ParseFailpoints parses a comma-separated list of NAME@N, as set in
// EXACTLY_FAILPOINT. An empty string yields no failpoints.
func ParseFailpoints(s string) ([]Failpoint, error) {
	var fps []Failpoint
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, n, ok := strings.Cut(part, "@")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want NAME@N", part)
		}
		if !slices.Contains(failpointNames, name) {
			return nil, fmt.Errorf("failpoint %q: unknown name %q (valid: %s)", part, name, strings.Join(failpointNames, ", "))
		}
		num, err := strconv.Atoi(n)
		if err != nil || num < 1 {
			return nil, fmt.Errorf("failpoint %q: N must be an integer >= 1", part)
		}
		fps = append(fps, Failpoint{Name: name, N: num})
	}
	return fps, nil
}

// Failpoints are the armed failpoints of a stage or a sink, and what firing
// one does.
type Failpoints struct {
	List  []Failpoint
	Crash func() // nil: KillSelf
	Stop  func() // nil: StopSelf
}

// Armed reports whether failpoint name is armed for the nth transaction.
func (f *Failpoints) Armed(name string, n int) bool {
	for _, fp := range f.List {
		if fp.Name == name && fp.N == n {
			return true
		}
	}
	return false
}

// Fire logs the failpoint, runs the crash action and, if it returns,
// returns ErrCrashed.
func (f *Failpoints) Fire(log *slog.Logger, name string, n int) error {
	log.Warn("failpoint firing", "failpoint", Failpoint{Name: name, N: n}.String())
	if f.Crash == nil {
		KillSelf()
	}
	f.Crash()
	return ErrCrashed
}

// Pause logs the failpoint and runs the stop action, which returns once
// the process is resumed.
func (f *Failpoints) Pause(log *slog.Logger, name string, n int) {
	log.Warn("failpoint firing", "failpoint", Failpoint{Name: name, N: n}.String())
	if f.Stop == nil {
		StopSelf()
		return
	}
	f.Stop()
}
