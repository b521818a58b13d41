package transform

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

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
}

// Dedupe is the compiled dedupe step of a stage (topology.Dedupe). It is
// not one of the Pipeline's steps: it needs the stage's state store, so
// the engine runs it before them (see processor's dedupe).
type Dedupe struct {
	// Step names the step in dead letters, e.g. "transform[0] dedupe".
	Step string
	// Retention is how long an ID is remembered, in stream time.
	Retention time.Duration
	id        *program
}

// ErrNoID is the error of a dedupe ID expression that gives null or an
// empty string: the record has no ID to dedupe on.
var ErrNoID = errors.New("dedupe id is null or empty")

// ID evaluates the ID expression on r: a string as its text, any other
// value but null as its JSON text (an object's keys sorted, without
// spaces, so that key order does not make two IDs of one value). A number
// keeps its text, as in an object: when the expression selects a field,
// 2.0, 2.00 and 2E0 are three IDs, and 2 a fourth; a number the
// expression computes is its shortest text. A failed evaluation, null or
// "" is an error (ErrNoID for the last two), and the record a dead letter.
func (d *Dedupe) ID(ctx context.Context, r *Record) ([]byte, error) {
	b, v, err := d.id.text(ctx, r, "id")
	if err != nil {
		return nil, fmt.Errorf("id: %w", err)
	}
	if len(b) == 0 {
		return nil, ErrNoID
	}
	if _, text := v.(types.String); !text && (b[0] == '{' || b[0] == '[') {
		// An object's text follows the input's key order and spacing;
		// CEL holds {"a":1,"b":2} and {"b":2,"a":1} equal, and so does
		// the ID: keys sorted, numbers by their text.
		// An error inside names the field the expression selects
		// (`field "v.a"`), as every other path names it.
		path := d.id.pathOr("id")
		doc, err := serde.DecodeValue(b, path, serde.AsText)
		if err != nil {
			return nil, fmt.Errorf("id: %w", err)
		}
		if b, err = serde.AppendJSON(nil, doc, path); err != nil {
			return nil, fmt.Errorf("id: %w", err)
		}
	}
	return b, nil
}

// Dedupe returns the stage's dedupe step, nil if it has none.
func (p *Pipeline) Dedupe() *Dedupe {
	if p == nil {
		return nil
	}
	return p.dedupe
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
		switch ts.Op() {
		case "dedupe":
			if d, ok := c.dedupe(path, j, ts); ok {
				p.dedupe = d
			}
		case "aggregate":
			if a, ok := c.aggregate(path, j, ts); ok {
				p.aggregate = a
			}
		default:
			c.addStep(p, path, j, ts, reg, jsonOut)
		}
	}
	return p
}

// addStep compiles ts, step j at path, and adds it to p if it compiles.
func (c *compiler) addStep(p *Pipeline, path string, j int, ts *topology.Step, reg *Registry, jsonOut bool) {
	s, ok := c.step(path, j, ts, reg, jsonOut)
	if !ok {
		return
	}
	p.steps = append(p.steps, s)
	op := ts.Op()
	p.hasFuncs = p.hasFuncs || op == "func" || op == "stateful"
	if op == "stateful" {
		p.stateful = &Stateful{Step: s.name, Index: j, Store: ts.Stateful.StoreName()}
	}
}

func (c *compiler) dedupe(path string, idx int, st *topology.Step) (*Dedupe, bool) {
	d := &Dedupe{Step: st.Name, Retention: st.Dedupe.Retention.Duration}
	if d.Step == "" {
		d.Step = fmt.Sprintf("transform[%d] dedupe", idx)
	}
	var ok bool
	d.id, ok = c.compile(path+".dedupe.id", st.Dedupe.ID)
	return d, ok
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

// builder compiles the expressions of one step, remembering whether all
// of them compiled.
type builder struct {
	c       *compiler
	path    string // of the step in the topology file
	jsonOut bool   // the stage writes JSON (or string, bytes), not Avro
	ok      bool
}

func (b *builder) expr(field, src string, want ...*celType) *program {
	prg, good := b.c.compile(b.path+"."+field, src, want...)
	b.ok = b.ok && good
	return prg
}

func (c *compiler) step(path string, idx int, st *topology.Step, reg *Registry, jsonOut bool) (step, bool) {
	op := st.Op()
	s := step{name: st.Name}
	if s.name == "" {
		s.name = fmt.Sprintf("transform[%d] %s", idx, op)
	}
	b := &builder{c: c, path: path, jsonOut: jsonOut, ok: true}
	switch op {
	case "filter":
		s.run = b.filter(st.Filter)
	case "set":
		s.run = b.set(st.Set)
	case "drop":
		s.run = dropStep(st.Drop)
	case "rename":
		s.run = renameStep(st.Rename)
	case "key":
		s.run = b.key(st.Key)
	case "headers":
		s.run = b.headers(st.Headers)
	case "route":
		s.run = b.route(st.Route)
	case "explode":
		s.run = b.explode(st.Explode)
	case "func":
		fn, found := c.lookupFunc(path, st.Func, reg)
		if !found {
			return s, false
		}
		s.run = funcStep(fn)
	case "stateful":
		fn, found := c.lookupStateful(path, st.Stateful.Func, reg)
		if !found {
			return s, false
		}
		s.run = statefulStep(fn)
	default:
		return s, false // topology validation reported it
	}
	return s, b.ok
}

// lookupFunc returns the Go transform registered as name, or reports at
// path that there is none.
func (c *compiler) lookupFunc(path, name string, reg *Registry) (Func, bool) {
	fn, found := reg.Lookup(name)
	if found {
		return fn, true
	}
	hint := ""
	if _, stateful := reg.LookupStateful(name); stateful {
		hint = fmt.Sprintf(" (%q is a stateful transform: call it with stateful: %s)", name, name)
	}
	c.fail(path+".func", "no Go transform is registered as %q%s (registered: %s)", name, hint, namesOrNone(reg.Names()))
	return nil, false
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

type runFunc = func(ctx context.Context, r *Record) ([]Record, error)

func (b *builder) filter(src string) runFunc {
	prg := b.expr("filter", src, boolType)
	return func(ctx context.Context, r *Record) ([]Record, error) {
		keep, err := prg.bool(ctx, r)
		if err != nil {
			return nil, err
		}
		if !keep {
			return nil, errDrop
		}
		return nil, nil
	}
}

// maxStackSets is how many fields a set step assigns without allocating.
const maxStackSets = 8

func (b *builder) set(fields map[string]string) runFunc {
	type assign struct {
		name  string
		field []string
		prg   *program
	}
	var as []assign
	for _, k := range sortedKeys(fields) {
		as = append(as, assign{k, strings.Split(k, "."), b.expr("set."+k, fields[k])})
	}
	jsonOut := b.jsonOut
	return func(ctx context.Context, r *Record) ([]Record, error) {
		var stack [maxStackSets]any
		vals := stack[:0]
		for _, a := range as { // every expression sees the value before the step
			v, err := a.prg.eval(ctx, r)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.name, err)
			}
			nv, err := storable(v, a.name, jsonOut)
			if err != nil {
				return nil, err
			}
			if t, ok := a.prg.selectedNumber(r, v); ok {
				// copy: value.amount keeps 12345678901234567890.12, not
				// the 12345678901234567000.0 of its double.
				nv = rawJSON(append([]byte(nil), t...))
			}
			vals = append(vals, nv)
		}
		for i, a := range as {
			if err := setPath(&r.Value, a.field, vals[i]); err != nil {
				return nil, err
			}
		}
		r.Raw = nil
		return nil, nil
	}
}

func dropStep(drop []string) runFunc {
	var fields [][]string
	for _, f := range drop {
		fields = append(fields, strings.Split(f, "."))
	}
	return func(_ context.Context, r *Record) ([]Record, error) {
		for _, f := range fields {
			deleted, err := deletePath(&r.Value, f)
			if err != nil {
				return nil, err
			}
			if deleted {
				r.Raw = nil
			}
		}
		return nil, nil
	}
}

func renameStep(rename map[string]string) runFunc {
	type move struct {
		from, to []string
		v        any
	}
	var moves []move
	for _, old := range sortedKeys(rename) {
		moves = append(moves, move{from: strings.Split(old, "."), to: strings.Split(rename[old], ".")})
	}
	// The moves of one step happen together: every source is read and
	// removed before any target is written, so {a: b, b: a} swaps. A
	// target that holds a field then is never overwritten: that field's
	// value would be lost without a word, so the record is an error.
	return func(_ context.Context, r *Record) ([]Record, error) {
		found := make([]move, 0, len(moves))
		for _, m := range moves {
			v, ok, err := getPath(r.Value, m.from)
			if err != nil {
				return nil, err
			}
			if !ok {
				continue
			}
			if o, isObj := v.(*object); isObj {
				v = o.snapshot()
			}
			m.v = v
			found = append(found, m)
		}
		if len(found) == 0 {
			return nil, nil
		}
		for _, m := range found {
			if _, err := deletePath(&r.Value, m.from); err != nil {
				return nil, err
			}
		}
		r.Raw = nil
		for _, m := range found {
			_, taken, err := getPath(r.Value, m.to)
			if err != nil {
				return nil, err
			}
			if taken {
				to := strings.Join(m.to, ".")
				return nil, fmt.Errorf("field %q: cannot rename %s to %s: %s already holds a value, which a rename never overwrites (drop it first)",
					to, strings.Join(m.from, "."), to, to)
			}
			if err := setPath(&r.Value, m.to, m.v); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
}

func (b *builder) key(src string) runFunc {
	prg := b.expr("key", src)
	return func(ctx context.Context, r *Record) ([]Record, error) {
		key, _, err := prg.text(ctx, r, "key")
		if err != nil {
			return nil, err
		}
		r.Key = key
		return nil, nil
	}
}

func (b *builder) headers(headers map[string]string) runFunc {
	type hdr struct {
		name string
		prg  *program
	}
	var hs []hdr
	for _, k := range sortedKeys(headers) {
		hs = append(hs, hdr{k, b.expr("headers."+k, headers[k])})
	}
	return func(ctx context.Context, r *Record) ([]Record, error) {
		for _, h := range hs {
			val, _, err := h.prg.text(ctx, r, "header "+h.name)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", h.name, err)
			}
			r.Headers = setHeader(r.Headers, h.name, val)
		}
		return nil, nil
	}
}

func (b *builder) route(routes []topology.Route) runFunc {
	type rule struct {
		when  *program // nil: matches every record
		topic string
	}
	var rules []rule
	for j, rt := range routes {
		ru := rule{topic: rt.Topic}
		if strings.TrimSpace(rt.When) != "" {
			ru.when = b.expr(fmt.Sprintf("route[%d].when", j), rt.When, boolType)
		}
		rules = append(rules, ru)
	}
	return func(ctx context.Context, r *Record) ([]Record, error) {
		for _, ru := range rules {
			match := ru.when == nil
			if !match {
				var err error
				if match, err = ru.when.bool(ctx, r); err != nil {
					return nil, fmt.Errorf("route to %s: %w", ru.topic, err)
				}
			}
			if match {
				r.Topic = ru.topic
				break
			}
		}
		return nil, nil
	}
}

func (b *builder) explode(src string) runFunc {
	prg := b.expr("explode", src, listType)
	jsonOut := b.jsonOut
	return func(ctx context.Context, r *Record) ([]Record, error) {
		v, err := prg.eval(ctx, r)
		if err != nil {
			return nil, err
		}
		list, ok := v.(traits.Lister)
		if !ok {
			return nil, fmt.Errorf("explode needs a list, got %s", v.Type().TypeName())
		}
		n := int(list.Size().(types.Int))
		if n == 0 {
			return nil, errDrop
		}
		out := make([]Record, n)
		for i := range n {
			e, err := native(list.Get(types.Int(i)), serde.IndexPath("", i), jsonOut)
			if err != nil {
				return nil, err
			}
			out[i] = *r
			out[i].Value, out[i].Raw = e, nil
			out[i].Headers = append([]Header(nil), r.Headers...)
		}
		return out, nil
	}
}

// funcStep calls a Go transform (see goStep).
func funcStep(fn Func) runFunc { return goStep(fn) }

// goStep calls a Go function with the record's value decoded whole: a Go
// function reads every field, so a value without an exact Go form fails
// the record here (see Materialize).
func goStep(fn func(ctx context.Context, r Record) ([]Record, error)) runFunc {
	call := func(ctx context.Context, r Record) (out []Record, err error) {
		defer func() {
			// A panic is a bug in that function, triggered by this
			// record: dead-letter the record, keep the stream going.
			if p := recover(); p != nil {
				out, err = nil, fmt.Errorf("panic: %v", p)
			}
		}()
		return fn(ctx, r)
	}
	return func(ctx context.Context, r *Record) (out []Record, err error) {
		in := *r
		if in.Value, err = materialize(r.Value, "", serde.Typed); err != nil {
			return nil, err
		}
		out, err = callBounded(ctx, call, in)
		if err != nil {
			return nil, err
		}
		if len(out) == 0 {
			return nil, errDrop
		}
		for i := range out {
			out[i].Raw = nil
		}
		return out, nil
	}
}

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
