package transform

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cel.dev/cel-go/common/types"

	"github.com/exactly-io/exactly/serde"
)

// Dedupe is the compiled dedupe step of a stage (topology.Dedupe). It is
// not one of the Pipeline's steps: it needs the stage's state store, so
// the engine runs it before them (see processor's dedupe).
type Dedupe struct {
	// Step names the step in dead letters, e.g. "transform[0] dedupe".
	Step string
	// Retention is how far apart in event time a record and the first
	// sighting of its ID may be for the record to be a duplicate; the ID
	// is kept until stream time passes it by as much.
	Retention time.Duration
	id        *program
}

// ErrNoID is the error of a dedupe ID expression that gives null or an
// empty string: the record has no ID to dedupe on.
var ErrNoID = errors.New("dedupe id is null or empty")

// ID evaluates the ID expression on r: a string as its text, any other
// value but null as its JSON text (an object's keys sorted, without
// spaces, so that key order does not make two IDs of one value). A number
// keeps its text, as in an object: when the expression selects a field,
// 2.0, 2.00 and 2E0 are three IDs, and 2 a fourth; a number the
// expression computes is its shortest text. A failed evaluation, null or
// "" is an error (ErrNoID for the last two), and the record a dead letter.
func (d *Dedupe) ID(ctx context.Context, r *Record) ([]byte, error) {
	b, err := keyText(ctx, d.id, r, "id")
	if err == nil && len(b) == 0 {
		return nil, ErrNoID
	}
	return b, err
}

// keyText evaluates prg on r as a key (a dedupe ID, a join's lookup key):
// a string as its text, any other value but null as its JSON text, an
// object's keys sorted. field names the setting in errors.
func keyText(ctx context.Context, prg *program, r *Record, field string) ([]byte, error) {
	b, v, err := prg.text(ctx, r, field)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	if _, text := v.(types.String); !text && (b[0] == '{' || b[0] == '[') {
		// An object's text follows the input's key order and spacing;
		// CEL holds {"a":1,"b":2} and {"b":2,"a":1} equal, and so does
		// the key: keys sorted, numbers by their text.
		// An error inside names the field the expression selects
		// (`field "v.a"`), as every other path names it.
		path := prg.pathOr(field)
		doc, err := serde.DecodeValue(b, path, serde.AsText)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		if b, err = serde.AppendJSON(nil, doc, path); err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	return b, nil
}

// Dedupe returns the stage's dedupe step, nil if it has none.
func (p *Pipeline) Dedupe() *Dedupe {
	if p == nil {
		return nil
	}
	return p.dedupe
}

func init() { registerStep("dedupe", compileDedupe) }

// compileDedupe records the dedupe step in the Pipeline: the engine runs it
// before the steps, with the stage's state store.
func compileDedupe(b *builder) runFunc {
	d := &Dedupe{Step: b.name(), Retention: b.st.Dedupe.Retention.Duration}
	d.id = b.expr("dedupe.id", b.st.Dedupe.ID)
	if b.ok {
		b.p.dedupe = d
	}
	return nil
}
