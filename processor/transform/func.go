package transform

import (
	"context"
	"fmt"

	"github.com/exactly-io/exactly/serde"
)

func init() { registerStep("func", compileFunc) }

// compileFunc calls the Go transform registered under the step's name in
// the compile's Registry (see goStep).
func compileFunc(b *builder) runFunc {
	fn, found := b.c.lookupFunc(b.path, b.st.Func, b.reg)
	if !found {
		b.ok = false
		return nil
	}
	b.p.hasFuncs = true
	return goStep(fn)
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
