package transform

import (
	"context"
	"fmt"
	"strings"
)

func init() { registerStep("rename", compileRename) }

// compileRename: each field moves to its new path, all at once.
func compileRename(b *builder) runFunc {
	rename := b.st.Rename
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
