package transform

import (
	"context"
	"fmt"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/traits"

	"github.com/exactly-io/exactly/serde"
)

func init() { registerStep("explode", compileExplode) }

// compileExplode: one record per element of the list, the element as its
// value; an empty list drops the record.
func compileExplode(b *builder) runFunc {
	prg := b.expr("explode", b.st.Explode, listType)
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
