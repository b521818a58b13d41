package transform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"cel.dev/cel-go/common/types/ref"

	"github.com/exactly-io/exactly/topology"
)

// Pipeline is the compiled transform steps of one stage. It is safe for
// concurrent use.
type Pipeline struct {
	steps    []step
	hasFuncs bool
}

// HasFuncs reports whether a step calls a Go transform, which may block:
// the engine then gives each record a deadline (see the func step).
func (p *Pipeline) HasFuncs() bool { return p.hasFuncs }

// Len returns the number of steps.
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
// that is not registered, a call to a non-deterministic function.
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
		st := &f.Stages[i]
		p := &Pipeline{}
		for j := range st.Transform {
			if s, ok := c.step(fmt.Sprintf("stages[%d].transform[%d]", i, j), j, &st.Transform[j], reg); ok {
				p.steps = append(p.steps, s)
				p.hasFuncs = p.hasFuncs || st.Transform[j].Func != ""
			}
		}
		out[st.Name] = p
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

// Apply runs the steps on in and returns the records to write: none if a
// step filtered it out. A step's failure is returned as *StepError.
func (p *Pipeline) Apply(ctx context.Context, in Record) ([]Record, error) {
	recs := []Record{in}
	for _, s := range p.steps {
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

func (c *compiler) step(path string, idx int, st *topology.Step, reg *Registry) (step, bool) {
	op := st.Op()
	name := st.Name
	if name == "" {
		name = fmt.Sprintf("transform[%d] %s", idx, op)
	}
	s := step{name: name}
	ok := true
	expr := func(p, src string, want ...*celType) *program {
		prg, good := c.compile(path+"."+p, src, want...)
		ok = ok && good
		return prg
	}
	switch op {
	case "filter":
		prg := expr("filter", st.Filter, boolType)
		s.run = func(ctx context.Context, r *Record) ([]Record, error) {
			keep, err := prg.bool(ctx, r)
			if err != nil {
				return nil, err
			}
			if !keep {
				return nil, errDrop
			}
			return nil, nil
		}
	case "set":
		type assign struct {
			field []string
			prg   *program
		}
		var as []assign
		for _, k := range sortedKeys(st.Set) {
			as = append(as, assign{strings.Split(k, "."), expr("set."+k, st.Set[k])})
		}
		s.run = func(ctx context.Context, r *Record) ([]Record, error) {
			vals := make([]any, len(as))
			for i, a := range as { // every expression sees the value before the step
				v, err := a.prg.eval(ctx, r)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", strings.Join(a.field, "."), err)
				}
				vals[i] = native(v)
			}
			for i, a := range as {
				if err := setPath(r.Value, a.field, vals[i]); err != nil {
					return nil, err
				}
			}
			r.Raw = nil
			return nil, nil
		}
	case "drop":
		var fields [][]string
		for _, f := range st.Drop {
			fields = append(fields, strings.Split(f, "."))
		}
		s.run = func(_ context.Context, r *Record) ([]Record, error) {
			for _, f := range fields {
				if deletePath(r.Value, f) {
					r.Raw = nil
				}
			}
			return nil, nil
		}
	case "rename":
		olds := sortedKeys(st.Rename)
		s.run = func(_ context.Context, r *Record) ([]Record, error) {
			for _, old := range olds {
				from := strings.Split(old, ".")
				v, found := getPath(r.Value, from)
				if !found {
					continue
				}
				deletePath(r.Value, from)
				if err := setPath(r.Value, strings.Split(st.Rename[old], "."), v); err != nil {
					return nil, err
				}
				r.Raw = nil
			}
			return nil, nil
		}
	case "key":
		prg := expr("key", st.Key)
		s.run = func(ctx context.Context, r *Record) ([]Record, error) {
			v, err := prg.eval(ctx, r)
			if err != nil {
				return nil, err
			}
			if r.Key, err = bytesOf(v); err != nil {
				return nil, err
			}
			return nil, nil
		}
	case "headers":
		type hdr struct {
			name string
			prg  *program
		}
		var hs []hdr
		for _, k := range sortedKeys(st.Headers) {
			hs = append(hs, hdr{k, expr("headers."+k, st.Headers[k])})
		}
		s.run = func(ctx context.Context, r *Record) ([]Record, error) {
			for _, h := range hs {
				v, err := h.prg.eval(ctx, r)
				if err != nil {
					return nil, fmt.Errorf("header %s: %w", h.name, err)
				}
				b, err := bytesOf(v)
				if err != nil {
					return nil, fmt.Errorf("header %s: %w", h.name, err)
				}
				r.Headers = setHeader(r.Headers, h.name, b)
			}
			return nil, nil
		}
	case "route":
		type rule struct {
			when  *program // nil: matches every record
			topic string
		}
		var rules []rule
		for j, rt := range st.Route {
			ru := rule{topic: rt.Topic}
			if strings.TrimSpace(rt.When) != "" {
				ru.when = expr(fmt.Sprintf("route[%d].when", j), rt.When, boolType)
			}
			rules = append(rules, ru)
		}
		s.run = func(ctx context.Context, r *Record) ([]Record, error) {
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
	case "explode":
		prg := expr("explode", st.Explode, listType)
		s.run = func(ctx context.Context, r *Record) ([]Record, error) {
			v, err := prg.eval(ctx, r)
			if err != nil {
				return nil, err
			}
			list, ok := native(v).([]any)
			if !ok {
				return nil, fmt.Errorf("explode needs a list, got %s", v.Type().TypeName())
			}
			if len(list) == 0 {
				return nil, errDrop
			}
			out := make([]Record, len(list))
			for i, e := range list {
				out[i] = *r
				out[i].Value, out[i].Raw = e, nil
				out[i].Headers = append([]Header(nil), r.Headers...)
			}
			return out, nil
		}
	case "func":
		fn, found := reg.Lookup(st.Func)
		if !found {
			c.fail(path+".func", "no Go transform is registered as %q (registered: %s)", st.Func, namesOrNone(reg.Names()))
			return s, false
		}
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
		s.run = func(ctx context.Context, r *Record) (out []Record, err error) {
			out, err = callBounded(ctx, call, *r)
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
	default:
		return s, false // topology validation reported it
	}
	return s, ok
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

// bytesOf renders a CEL result as key or header bytes: strings and bytes as
// they are, null as nil, anything else as its JSON text.
func bytesOf(v ref.Val) ([]byte, error) {
	switch n := native(v).(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(n), nil
	case []byte:
		return n, nil
	case int64:
		return strconv.AppendInt(nil, n, 10), nil
	case uint64:
		return strconv.AppendUint(nil, n, 10), nil
	default:
		b, err := json.Marshal(n)
		if err != nil {
			return nil, fmt.Errorf("cannot render %s as text: %w", v.Type().TypeName(), err)
		}
		return b, nil
	}
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

// getPath returns the value at path in nested objects.
func getPath(v any, path []string) (any, bool) {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[p]; !ok {
			return nil, false
		}
	}
	return v, true
}

// setPath sets the value at path, creating missing objects on the way.
func setPath(v any, path []string, val any) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("cannot set %s: the value is not an object", strings.Join(path, "."))
	}
	for i, p := range path[:len(path)-1] {
		next, found := m[p]
		if !found || next == nil {
			child := map[string]any{}
			m[p] = child
			m = child
			continue
		}
		if m, ok = next.(map[string]any); !ok {
			return fmt.Errorf("cannot set %s: %s is not an object", strings.Join(path, "."), strings.Join(path[:i+1], "."))
		}
	}
	m[path[len(path)-1]] = val
	return nil
}

// deletePath removes the value at path and reports whether there was one.
func deletePath(v any, path []string) bool {
	parent, ok := getPath(v, path[:len(path)-1])
	if !ok {
		return false
	}
	m, ok := parent.(map[string]any)
	if !ok {
		return false
	}
	if _, ok := m[path[len(path)-1]]; !ok {
		return false
	}
	delete(m, path[len(path)-1])
	return true
}
