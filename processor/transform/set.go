package transform

import (
	"context"
	"fmt"
	"strings"
)

// maxStackSets is how many fields a set step assigns without allocating.
const maxStackSets = 8

func init() { registerStep("set", compileSet) }

// compileSet: every expression sees the value as it was before the step.
func compileSet(b *builder) runFunc {
	fields := b.st.Set
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
