package transform

import (
	"context"
	"fmt"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
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
		texts := elementTexts(v)
		for i := range n {
			e, err := element(list.Get(types.Int(i)), texts, i, jsonOut)
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

// elementTexts returns the spans of the elements of v when v is a list of
// the input, still its bytes; nil for a list an expression built.
func elementTexts(v ref.Val) *listText {
	lv, ok := v.(listVal)
	if !ok {
		return nil
	}
	return &listText{raw: lv.raw, spans: serde.AppendElements(nil, lv.raw)}
}

// listText is a list of the input and the spans of its elements.
type listText struct {
	raw   []byte
	spans []int // start and end of each element
}

// element is the value of element i, e, of the exploded list. A number of
// the input keeps its text, as a set or key step keeps it (values.md,
// rule 2): 1E1 stays 1E1, not the 10.0 of its double, and 12.50 stays
// 12.50. Objects and lists keep their bytes through native; a string is
// its text (a string or bytes output writes it unquoted).
// An element of the input that has no exact value (1e400) fails the
// record, naming it.
func element(e ref.Val, texts *listText, i int, jsonOut bool) (any, error) {
	switch e.(type) {
	case *types.Err:
		return nil, errOf(e) // an element with no exact value, named

	case types.Int, types.Uint, types.Double:
		if texts != nil && 2*i+1 < len(texts.spans) {
			// copy: each output owns its value, as set's does.
			return rawJSON(append([]byte(nil), texts.raw[texts.spans[2*i]:texts.spans[2*i+1]]...)), nil
		}
	}
	return native(e, serde.IndexPath("", i), jsonOut)
}
