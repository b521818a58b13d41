package transform

import (
	"context"
	"fmt"
)

func init() { registerStep("headers", compileHeaders) }

// compileHeaders: each header is set to its expression's text.
func compileHeaders(b *builder) runFunc {
	headers := b.st.Headers
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
