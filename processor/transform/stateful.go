package transform

import (
	"context"
	"fmt"
	"sync"

	"github.com/exactly-io/exactly/topology"
)

// Store is the state of a stateful Go transform (see StatefulFunc): a
// key-value store of bytes, the one of the input partition of the record
// being processed, as the stage's open Kafka transaction sees it.
//
// Reads see every change made earlier in the transaction, the record's own
// included (read-your-writes). Changes are buffered: those of a record are
// kept only if the record is written or filtered out, not if it becomes a
// dead letter (its function failed, or a later step did); the kept ones go
// to the store's changelog topic in the transaction that commits the
// outputs and the input offsets, and reach the local store only once it
// has committed. An aborted transaction leaves nothing of its changes, and
// its records are processed again against the same state.
//
// Get returns a copy of the value; Put and Delete copy what they are
// given. A nil value is stored as empty, not deleted. Keys must not be
// empty (ErrEmptyKey). A value must fit in one changelog record (the
// changelog topic's max.message.bytes, 1 MiB by default): a larger one
// makes the record a dead letter.
//
// Any other error than ErrEmptyKey means the state cannot be used (the
// partition was revoked meanwhile, the local store failed): the
// transaction aborts, and the record is processed again, whatever the
// function returns. A Store is valid only during the call it was passed
// to, and safe for use by several goroutines during it.
type Store interface {
	// Get returns the value of key, and whether it exists.
	Get(key []byte) (value []byte, ok bool, err error)
	// Put sets key to value.
	Put(key, value []byte) error
	// Delete deletes key; a missing key is no error.
	Delete(key []byte) error
}

// StatefulFunc is a Go transform with state: like a Func, it returns the
// records to write in place of r (none filters r out, several fan it out),
// and its error makes r a dead letter, except an error wrapping
// serde.ErrTransient, which aborts the transaction to retry it. It also
// reads and writes st, the store of r's input partition (see Store).
//
// State is partitioned by input partition: records that share state must
// share an input partition, so key the store by the record key (r.Key, the
// input record's key), or by something the record key decides. A
// StatefulFunc must be deterministic, given the record and the store (see
// the package documentation): a replayed record must make the same
// changes. It is called for one record at a time per stage.
type StatefulFunc func(ctx context.Context, r Record, st Store) ([]Record, error)

// Stateful is the compiled stateful step of a stage (topology.Stateful).
// It runs among the Pipeline's steps; the engine passes each record's
// store in the context (WithStore), and needs to know the step to set up
// its state.
type Stateful struct {
	// Step names the step in dead letters, e.g. "transform[1] stateful".
	Step string
	// Index is the step's index in the stage's transform list.
	Index int
	// Store is the store's name (topology.Stateful.StoreName).
	Store string
}

// Stateful returns the stage's stateful step, nil if it has none.
func (p *Pipeline) Stateful() *Stateful {
	if p == nil {
		return nil
	}
	return p.stateful
}

type storeKey struct{}

// WithStore returns ctx carrying st, the store that a stateful step of a
// Pipeline applied with the returned context passes to its function.
func WithStore(ctx context.Context, st Store) context.Context {
	return context.WithValue(ctx, storeKey{}, st)
}

func init() { registerStep("stateful", compileStateful) }

// compileStateful calls the stateful Go transform registered under the
// step's func in the compile's Registry, and records the step in the
// Pipeline: the engine sets up its store.
func compileStateful(b *builder) runFunc {
	fn, found := b.c.lookupStateful(b.path, b.st.Stateful.Func, b.reg)
	if !found {
		b.ok = false
		return nil
	}
	b.p.hasFuncs = true
	b.p.stateful = &Stateful{Step: b.name(), Index: b.idx, Store: b.st.Stateful.StoreName()}
	return statefulStep(fn)
}

// lookupStateful returns the stateful Go transform registered as name,
// or reports at path that there is none.
func (c *compiler) lookupStateful(path, name string, reg *Registry) (StatefulFunc, bool) {
	fn, found := reg.LookupStateful(name)
	if found {
		return fn, true
	}
	hint := ""
	if _, stateless := reg.Lookup(name); stateless {
		hint = fmt.Sprintf(" (%q is a stateless transform: call it with func: %s)", name, name)
	}
	fp := path + ".stateful.func"
	if c.f.Position(fp) == (topology.Position{}) {
		fp = path + ".stateful" // the scalar form
	}
	c.fail(fp, "no stateful Go transform is registered as %q%s (registered with transform.RegisterStateful: %s)", name, hint, namesOrNone(reg.StatefulNames()))
	return nil, false
}

// statefulStep calls a stateful Go transform as the func step calls a Func,
// with the store from the context behind a guard that closes when the
// step returns: a call abandoned at its deadline must not change the
// state of the records processed after it.
func statefulStep(fn StatefulFunc) runFunc {
	return func(ctx context.Context, r *Record) ([]Record, error) {
		st, _ := ctx.Value(storeKey{}).(Store)
		if st == nil {
			return nil, ErrNoStore
		}
		g := &guardedStore{st: st}
		defer g.close()
		return goStep(func(ctx context.Context, r Record) ([]Record, error) { return fn(ctx, r, g) })(ctx, r)
	}
}

// guardedStore is a Store that checks keys, serializes calls, and fails
// once closed.
type guardedStore struct {
	mu     sync.Mutex
	st     Store
	closed bool
}

func (g *guardedStore) use(key []byte, fn func()) error {
	if len(key) == 0 {
		return ErrEmptyKey
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrStoreClosed
	}
	fn()
	return nil
}

func (g *guardedStore) Get(key []byte) (v []byte, ok bool, err error) {
	if uerr := g.use(key, func() { v, ok, err = g.st.Get(key) }); uerr != nil {
		return nil, false, uerr
	}
	return v, ok, err
}

func (g *guardedStore) Put(key, value []byte) (err error) {
	if uerr := g.use(key, func() { err = g.st.Put(key, value) }); uerr != nil {
		return uerr
	}
	return err
}

func (g *guardedStore) Delete(key []byte) (err error) {
	if uerr := g.use(key, func() { err = g.st.Delete(key) }); uerr != nil {
		return uerr
	}
	return err
}

// close waits for a call under way, and fails every later one.
func (g *guardedStore) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// MemStore is a Store in a map, with no transaction around it, for tests
// of a StatefulFunc on its own: it keeps what it is given (copied), and
// nothing else of a stage's store (see Store).
type MemStore map[string][]byte

// Get returns a copy of the value of key.
func (m MemStore) Get(key []byte) ([]byte, bool, error) {
	v, ok := m[string(key)]
	if !ok {
		return nil, false, nil
	}
	return append([]byte{}, v...), true, nil
}

// Put sets key to a copy of value.
func (m MemStore) Put(key, value []byte) error {
	m[string(key)] = append([]byte{}, value...) // nil is empty, as in a stage
	return nil
}

// Delete deletes key.
func (m MemStore) Delete(key []byte) error {
	delete(m, string(key))
	return nil
}
