// Package transform runs a stage's transform steps: declarative steps with
// CEL expressions (https://cel.dev) from the topology file, and Go functions
// registered by name, stateless (Register, for `func:` steps) or with a
// key-value store of the stage (RegisterStateful, for `stateful:` steps).
//
// # Determinism
//
// Exactly-once holds only for pure transforms. After a crash, the records
// of the aborted transaction are processed again, and the committed output
// is whatever the replay produces. A transform that reads the clock, a
// random source or an external service can emit something different on the
// replay. CEL expressions therefore get no now() or other non-deterministic
// functions; use the record's timestamp instead. Go functions must keep the
// same rule.
package transform

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record moving through the steps.
type Record struct {
	// Key is the output key; it starts as the input key.
	Key []byte
	// Value is the record's value. A Func sees it decoded: map[string]any,
	// []any, string, int64, uint64, float64, bool, []byte or nil, with
	// JSON numbers typed by their text (int64 for an integer, float64 for
	// a number with '.', 'e' or 'E'), and returns values of these shapes.
	// Between steps, a JSON object is kept as its bytes and the changes
	// made to it (see FromJSON); read it from outside with Field, and
	// write it with a serde codec.
	Value any
	// Raw holds the input bytes of Value while no step has changed Value,
	// so the engine can write them unchanged. Steps that change Value
	// clear it; records returned by a Func always have it cleared.
	Raw []byte
	// Headers are the output headers; they start as the input headers.
	Headers []Header
	// Topic is the output topic; "" means the stage's output topic.
	Topic string

	// Provenance of the input record; read-only.
	SourceTopic string
	Partition   int32
	Offset      int64
	Timestamp   time.Time
}

// Func is a Go transform. It returns the records to write in place of r:
// none filters r out, several fan it out, all in the same transaction. An
// error makes the input record a dead letter, except an error wrapping
// serde.ErrTransient (a lookup service that is down, say): that aborts the
// transaction, and the records are retried with backoff. A Func must be
// deterministic (see the package documentation) and safe for concurrent
// use.
type Func func(ctx context.Context, r Record) ([]Record, error)

// Registry maps names to Go transforms, for `func:` steps, and to
// stateful Go transforms, for `stateful:` steps. The two share one
// namespace.
type Registry struct {
	mu       sync.RWMutex
	funcs    map[string]Func
	stateful map[string]StatefulFunc
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{funcs: map[string]Func{}, stateful: map[string]StatefulFunc{}}
}

// Register adds fn under name. It returns an error if name is empty or
// taken, or fn is nil.
func (r *Registry) Register(name string, fn Func) error {
	return r.add(name, fn == nil, func() { r.funcs[name] = fn })
}

// RegisterStateful adds the stateful transform fn under name. It returns
// an error if name is empty or taken (by either kind), or fn is nil.
func (r *Registry) RegisterStateful(name string, fn StatefulFunc) error {
	return r.add(name, fn == nil, func() { r.stateful[name] = fn })
}

func (r *Registry) add(name string, nilFn bool, set func()) error {
	if name == "" || nilFn {
		return errors.New("register transform: empty name or nil func")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, dup := r.funcs[name]
	if _, dupStateful := r.stateful[name]; dup || dupStateful {
		return fmt.Errorf("register transform %q: already registered", name)
	}
	set()
	return nil
}

// Lookup returns the transform registered under name.
func (r *Registry) Lookup(name string) (Func, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn, ok := r.funcs[name]
	return fn, ok
}

// LookupStateful returns the stateful transform registered under name.
func (r *Registry) LookupStateful(name string) (StatefulFunc, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	fn, ok := r.stateful[name]
	return fn, ok
}

// Names returns the names of the registered transforms (not stateful),
// sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return sortedNames(r.funcs)
}

// StatefulNames returns the names of the registered stateful transforms,
// sorted.
func (r *Registry) StatefulNames() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return sortedNames(r.stateful)
}

func sortedNames[F any](m map[string]F) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Default is the registry that the exactly CLI compiles topologies with.
var Default = NewRegistry()

// Register adds fn to Default, for custom binaries that register their
// transforms in main or init before running the CLI. Like
// database/sql.Register, it panics if name is empty or taken, or fn is nil:
// that is a programming error found at start-up.
func Register(name string, fn Func) {
	if err := Default.Register(name, fn); err != nil {
		panic(err)
	}
}

// RegisterStateful adds the stateful transform fn to Default, for custom
// binaries, as Register does; a topology calls it with a `stateful: name`
// step. It panics if name is empty or taken, or fn is nil.
func RegisterStateful(name string, fn StatefulFunc) {
	if err := Default.RegisterStateful(name, fn); err != nil {
		panic(err)
	}
}

// StepError is the failure of one step on one record; the engine
// dead-letters the record with it.
type StepError struct {
	Step string // the step's name, e.g. "transform[2] set"
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }
