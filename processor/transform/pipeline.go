package transform

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"cel.dev/cel-go/common/types/ref"

	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// Pipeline is the compiled transform steps of one stage. It is safe for
// concurrent use.
type Pipeline struct {
	steps    []step
	hasFuncs bool
	dedupe   *Dedupe
	// aggregate is the aggregate step, run by the engine after steps.
	aggregate *Aggregate
	// stateful is the stateful step, one of steps, for the engine.
	stateful *Stateful
	// join is the join step, one of steps, for the engine.
	join *Join
}

// HasFuncs reports whether a step calls a Go transform, which may block:
// the engine then gives each record a deadline (see the func step).
func (p *Pipeline) HasFuncs() bool { return p.hasFuncs }

// Len returns the number of steps, the dedupe and aggregate steps not
// counted.
func (p *Pipeline) Len() int { return len(p.steps) }

type step struct {
	name string
	run  func(ctx context.Context, r *Record) ([]Record, error) // nil result slice with nil error: keep r
}

// errDrop is returned by a step's run to filter the record out.
var errDrop = errors.New("dropped")

// Compile compiles the transform steps of every stage of f, with Go
// transforms from reg (nil means Default). It returns the pipelines by stage
// name, or topology.Errors with the position of each bad step or
// expression: an expression that does not parse or type-check, a `func`
// that is not registered, a call to a non-deterministic function. f may
// be a draft (topology.ParseDraft), for checking: its steps with a problem
// are skipped, and no problem is reported twice.
func Compile(f *topology.File, reg *Registry) (map[string]*Pipeline, error) {
	if reg == nil {
		reg = Default
	}
	c, err := newCompiler(f)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*Pipeline, len(f.Stages))
	for i := range f.Stages {
		out[f.Stages[i].Name] = c.pipeline(i, &f.Stages[i], reg)
	}
	if len(c.errs) > 0 {
		sort.SliceStable(c.errs, func(a, b int) bool {
			pa, pb := c.errs[a].Pos, c.errs[b].Pos
			return pa.Line < pb.Line || pa.Line == pb.Line && pa.Col < pb.Col
		})
		return nil, c.errs
	}
	return out, nil
}

// pipeline compiles the steps of st, stage i of the file; the steps that
// do not compile are left out, their problems in c.errs.
func (c *compiler) pipeline(i int, st *topology.Stage, reg *Registry) *Pipeline {
	p := &Pipeline{}
	jsonOut := st.Output.Format != serde.Avro
	for j := range st.Transform {
		path := fmt.Sprintf("stages[%d].transform[%d]", i, j)
		if c.f.Problem(path) {
			// A draft's step with a problem of its own (ParseDraft):
			// reported already, nothing to compile.
			continue
		}
		ts := &st.Transform[j]
		compile, known := stepKinds[ts.Op()]
		if !known {
			continue // topology validation reported it
		}
		b := &builder{c: c, p: p, reg: reg, st: ts, idx: j, path: path, jsonOut: jsonOut, ok: true}
		if run := compile(b); run != nil && b.ok {
			p.steps = append(p.steps, step{name: b.name(), run: run})
		}
	}
	return p
}

// Apply runs the steps on in and returns the records to write: none if a
// step filtered it out. A step's failure is returned as *StepError.
func (p *Pipeline) Apply(ctx context.Context, in Record) ([]Record, error) {
	// One record in, one out is the common case: no slice per step.
	one := []Record{in}
	for i, s := range p.steps {
		out, err := s.run(ctx, &one[0])
		switch {
		case errors.Is(err, errDrop):
			return nil, nil
		case err != nil:
			return nil, &StepError{Step: s.name, Err: err}
		case out != nil:
			return p.applyMany(ctx, out, p.steps[i+1:])
		}
	}
	return one, nil
}

// applyMany runs steps on recs, the outputs of a step that fanned out.
func (p *Pipeline) applyMany(ctx context.Context, recs []Record, steps []step) ([]Record, error) {
	for _, s := range steps {
		next := recs[:0:0]
		for i := range recs {
			out, err := s.run(ctx, &recs[i])
			switch {
			case errors.Is(err, errDrop):
			case err != nil:
				return nil, &StepError{Step: s.name, Err: err}
			case out == nil:
				next = append(next, recs[i])
			default:
				next = append(next, out...)
			}
		}
		recs = next
		if len(recs) == 0 {
			return nil, nil
		}
	}
	return recs, nil
}

// compileStep compiles the step b holds: it returns the step's run, or
// nil for a step the engine runs apart (dedupe, aggregate), which it
// records in b.p. A step whose b.ok is false on return is left out.
type compileStep func(b *builder) runFunc

// stepKinds are the compilers of topology's step kinds, by Op.
var stepKinds = map[string]compileStep{}

// registerStep adds the compiler of the step kind op. Each built-in kind
// registers itself in its file's init, as a binary registers its Go
// transforms (Register); like Register, it panics if op is empty or
// taken, or compile is nil.
func registerStep(op string, compile compileStep) {
	if _, dup := stepKinds[op]; dup || op == "" || compile == nil {
		panic(fmt.Sprintf("register step kind %q: empty, taken, or nil compiler", op))
	}
	stepKinds[op] = compile
}

// builder compiles one step, remembering whether all of it compiled.
type builder struct {
	c       *compiler
	p       *Pipeline // the stage's, for the steps the engine runs apart
	reg     *Registry // the Go transforms
	st      *topology.Step
	idx     int    // of the step in its stage
	path    string // of the step in the topology file
	jsonOut bool   // the stage writes JSON (or string, bytes), not Avro
	ok      bool
}

// name labels the step in dead letters: its name, or "transform[i] <op>".
func (b *builder) name() string {
	if b.st.Name != "" {
		return b.st.Name
	}
	return fmt.Sprintf("transform[%d] %s", b.idx, b.st.Op())
}

func (b *builder) expr(field, src string, want ...*celType) *program {
	prg, good := b.c.compile(b.path+"."+field, src, want...)
	b.ok = b.ok && good
	return prg
}

type runFunc = func(ctx context.Context, r *Record) ([]Record, error)

// ErrTimedOut is the error of a Go transform that did not return before
// its record's deadline.
var ErrTimedOut = errors.New("timed out")

// callBounded calls fn, but returns when ctx's deadline passes even if fn
// does not: a transform that outlives the transaction timeout would make
// the transaction abort and the record be retried forever. The record then
// fails with ErrTimedOut (a dead letter); the call is abandoned and its
// result, if it ever comes, dropped.
func callBounded(ctx context.Context, fn func(context.Context, Record) ([]Record, error), r Record) ([]Record, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return fn(ctx, r)
	}
	type result struct {
		out []Record
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := fn(ctx, r)
		done <- result{out, err}
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case res := <-done:
		return res.out, res.err
	case <-timer.C:
		return nil, fmt.Errorf("%w: the Go transform did not return before the record's deadline (half the transaction timeout)", ErrTimedOut)
	}
}

func namesOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// bytesOf renders a CEL result as key or header bytes: strings and bytes
// as they are, null as nil, anything else as its JSON text.
func bytesOf(v ref.Val, path string) ([]byte, error) {
	n, err := native(v, path, true)
	if err != nil {
		return nil, err
	}
	switch n := n.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(n), nil
	case []byte:
		return n, nil
	}
	b, err := serde.AppendJSON(nil, n, path)
	if err != nil {
		return nil, fmt.Errorf("cannot render %s as text: %w", v.Type().TypeName(), err)
	}
	return b, nil
}

func setHeader(hs []Header, name string, v []byte) []Header {
	out := make([]Header, 0, len(hs)+1)
	for _, h := range hs {
		if h.Key != name {
			out = append(out, h)
		}
	}
	return append(out, Header{Key: name, Value: v})
}
