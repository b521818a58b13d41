package transform

import "context"

func init() { registerStep("filter", compileFilter) }

// compileFilter: the record is dropped when the expression is false.
func compileFilter(b *builder) runFunc {
	prg := b.expr("filter", b.st.Filter, boolType)
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
