package transform

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

// Join is the compiled join step of a stage (topology.Join). It runs
// among the Pipeline's steps; the engine passes each record's table in
// the context (WithTable), and needs to know the step to set up its state.
type Join struct {
	// Step names the step in dead letters, e.g. "transform[1] join".
	Step string
	// Index is the step's index in the stage's transform list.
	Index int
	// Table is the table's topic.
	Table string
	// HistoryRetention is how far behind a table partition's newest
	// timestamp earlier versions are kept.
	HistoryRetention time.Duration
	// Global: every instance holds every table partition, and a lookup
	// reads them all (topology.JoinGlobal); else input partition p looks
	// up table partition p.
	Global bool
}

// Table is the table of a join step as the engine passes it with a
// record: the table partition of the record's input partition, or every
// table partition in global mode.
type Table interface {
	// Lookup returns the value key had at time at, and whether it had
	// one. An error means the table cannot be used: the engine aborts
	// the transaction, and the record is processed again.
	Lookup(key []byte, at time.Time) (value []byte, ok bool, err error)
}

// Join returns the stage's join step, nil if it has none.
func (p *Pipeline) Join() *Join {
	if p == nil {
		return nil
	}
	return p.join
}

type tableKey struct{}

// WithTable returns ctx carrying tb, the table that a join step of a
// Pipeline applied with the returned context looks keys up in.
func WithTable(ctx context.Context, tb Table) context.Context {
	return context.WithValue(ctx, tableKey{}, tb)
}

func init() { registerStep("join", compileJoin) }

// compileJoin: the lookup key is computed as a dedupe ID is; the table's
// value, JSON, goes into the field as its bytes.
func compileJoin(b *builder) runFunc {
	j := b.st.Join
	key := b.expr("join.key", j.Key)
	field := strings.Split(j.As, ".")
	missing := j.Missing
	if b.ok {
		b.p.join = &Join{Step: b.name(), Index: b.idx, Table: j.Table, HistoryRetention: j.HistoryRetention.Duration, Global: j.Mode == topology.JoinGlobal}
	}
	return func(ctx context.Context, r *Record) ([]Record, error) {
		tb, _ := ctx.Value(tableKey{}).(Table)
		if tb == nil {
			return nil, ErrNoTable
		}
		k, err := keyText(ctx, key, r, "key")
		if err != nil {
			return nil, err
		}
		var v []byte
		found := false
		if len(k) > 0 { // null or "": no table key is empty
			if v, found, err = tb.Lookup(k, r.Timestamp); err != nil {
				return nil, err
			}
		}
		var val any
		switch {
		case found:
			if err := serde.CheckJSON(v); err != nil {
				return nil, fmt.Errorf("table %s key %q: the table's value is not JSON: %w", j.Table, k, err)
			}
			val = rawJSON(v)
		case missing == topology.JoinNull:
			val = nil
		case missing == topology.JoinDeadLetter:
			return nil, fmt.Errorf("table %s key %q at %s: %w", j.Table, k, r.Timestamp.UTC().Format(time.RFC3339Nano), ErrNoMatch)
		default:
			return nil, errDrop
		}
		if err := setPath(&r.Value, field, val); err != nil {
			return nil, err
		}
		r.Raw = nil
		return nil, nil
	}
}
