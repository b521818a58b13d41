package transform

import "context"

func init() { registerStep("key", compileKey) }

// compileKey: the expression's text becomes the output key.
func compileKey(b *builder) runFunc {
	prg := b.expr("key", b.st.Key)
	return func(ctx context.Context, r *Record) ([]Record, error) {
		key, _, err := prg.text(ctx, r, "key")
		if err != nil {
			return nil, err
		}
		r.Key = key
		return nil, nil
	}
}
