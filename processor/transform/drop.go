package transform

import (
	"context"
	"strings"
)

func init() { registerStep("drop", compileDrop) }

// compileDrop: the fields are removed; a missing one is no error.
func compileDrop(b *builder) runFunc { return dropStep(b.st.Drop) }

// dropStep removes the fields at the paths drop.
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
