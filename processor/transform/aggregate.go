package transform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"cel.dev/cel-go/common/types"

	"github.com/exactly-io/exactly/serde"
)

// Aggregate is the compiled aggregate step of a stage (topology.Aggregate).
// Like Dedupe it is not one of the Pipeline's steps: it needs the stage's
// state store, so the engine runs it after them (see processor's
// aggregate).
type Aggregate struct {
	// Step names the step in dead letters, e.g. "transform[1] aggregate".
	Step string
	// Index is the step's index in the stage's transform list.
	Index                int
	Size, Advance, Grace time.Duration
	// Gap, when positive, makes the windows sessions (Size and Advance
	// are then 0): records of a key no more than Gap apart in event time.
	Gap time.Duration
	// Names and Kinds are the aggregations, sorted by name.
	Names, Kinds []string
	// Update is emit: update.
	Update bool
	time   *program   // nil: the record timestamp
	group  *program   // nil: the record key
	exprs  []*program // by aggregation; nil for count
}

// ErrNoTime is the error of a time expression that gives null.
var ErrNoTime = errors.New("event time is null")

// ErrKeyNotGroup is the error of a record whose key is not its group_by
// value: its input is not keyed by the group (see the keying rule).
var ErrKeyNotGroup = errors.New("record key is not the group_by value (re-key in an earlier stage with a key step)")

// MinEventTime and MaxEventTime bound an event time, in Unix
// milliseconds: a window's result is a Kafka record whose timestamp is its
// largest event time, and a record timestamp is not negative (Kafka's
// ProducerRecord refuses one; Kafka Streams' FailOnInvalidTimestamp calls
// it invalid), nor later than the Go client can carry: franz-go writes a
// timestamp as time.Time.UnixNano() / 1e6, an int64 of nanoseconds, whose
// last instant is 2262-04-11T23:47:16.854Z.
const (
	MinEventTime = 0
	MaxEventTime = math.MaxInt64 / int64(time.Millisecond)
)

// ErrEventTimeRange is the error of an event time outside [MinEventTime,
// MaxEventTime]: its window's result could not be written, or would be
// written with another timestamp.
var ErrEventTimeRange = errors.New("event time is outside what a Kafka record timestamp can hold (1970-01-01T00:00:00Z to 2262-04-11T23:47:16.854Z)")

// Time returns the event time of r in Unix milliseconds, within
// [MinEventTime, MaxEventTime]: the record timestamp, or the time
// expression's value, an int of Unix milliseconds or an RFC 3339 string
// (or a CEL timestamp). An event time outside the range is
// ErrEventTimeRange.
func (a *Aggregate) Time(ctx context.Context, r *Record) (int64, error) {
	ts, err := a.eventTime(ctx, r)
	if err == nil && (ts < MinEventTime || ts > MaxEventTime) {
		return 0, fmt.Errorf("time: %d ms: %w", ts, ErrEventTimeRange)
	}
	return ts, err
}

func (a *Aggregate) eventTime(ctx context.Context, r *Record) (int64, error) {
	if a.time == nil {
		return r.Timestamp.UnixMilli(), nil
	}
	v, err := a.time.eval(ctx, r)
	if err != nil {
		return 0, fmt.Errorf("time: %w", err)
	}
	switch v := v.(type) {
	case types.Int:
		return int64(v), nil
	case types.Timestamp:
		return v.Time.UnixMilli(), nil
	case types.String:
		t, err := serde.ParseTime(string(v), false)
		if err != nil {
			return 0, fmt.Errorf("time: %q is not an RFC 3339 time", string(v))
		}
		return t.UnixMilli(), nil
	case types.Null:
		return 0, fmt.Errorf("time: %w", ErrNoTime)
	}
	return 0, fmt.Errorf("time: want Unix milliseconds (int) or an RFC 3339 string, got %s", v.Type().TypeName())
}

// Group returns the record's group, its key. With a group_by expression,
// a key that is not the expression's value (as text, as a key step
// writes it) is ErrKeyNotGroup.
func (a *Aggregate) Group(ctx context.Context, r *Record) ([]byte, error) {
	if a.group == nil {
		return r.Key, nil
	}
	b, _, err := a.group.text(ctx, r, "group_by")
	if err != nil {
		return nil, fmt.Errorf("group_by: %w", err)
	}
	if string(b) != string(r.Key) {
		return nil, fmt.Errorf("group_by %q, key %q: %w", b, r.Key, ErrKeyNotGroup)
	}
	return r.Key, nil
}

// Values evaluates the aggregations' expressions on r: one native value
// (nil, int64, uint64, float64, string, ...) per aggregation, nil for
// count; a number the expression only selects from the input is its text,
// a json.Number.
func (a *Aggregate) Values(ctx context.Context, r *Record) ([]any, error) {
	out := make([]any, len(a.exprs))
	for i, prg := range a.exprs {
		if prg == nil {
			continue
		}
		v, err := prg.eval(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Names[i], err)
		}
		if t, ok := prg.selectedNumber(r, v); ok {
			// A number of the input as it came: min, max, first and
			// last write 12.50 and 1E1 as they are, and a sum reads
			// 12345678901234567890.12 exactly, not as its double.
			out[i] = json.Number(t)
			continue
		}
		if out[i], err = native(v, a.Names[i], true); err != nil {
			return nil, fmt.Errorf("%s: %w", a.Names[i], err)
		}
	}
	return out, nil
}

func init() { registerStep("aggregate", compileAggregate) }

// compileAggregate records the aggregate step in the Pipeline: the engine
// runs it after the steps, with the stage's state store.
func compileAggregate(b *builder) runFunc {
	ta := &b.st.Aggregate
	a := &Aggregate{Step: b.name(), Index: b.idx, Grace: ta.Grace.Duration, Update: ta.Emit == "update"}
	a.Size, a.Advance = ta.Window.Size()
	a.Gap = ta.Window.Session.Gap.Duration
	if t := ta.Time; t != "" && t != "$timestamp" { // the record timestamp
		a.time = b.expr("aggregate.time", t)
	}
	if g := ta.GroupBy; g != "" && g != "key" {
		a.group = b.expr("aggregate.group_by", g)
	}
	for name := range ta.Aggregations {
		a.Names = append(a.Names, name)
	}
	slices.Sort(a.Names)
	for _, name := range a.Names {
		kind, expr := ta.Aggregations[name].Kind()
		a.Kinds = append(a.Kinds, kind)
		var prg *program
		if kind != "count" {
			prg = b.expr("aggregate.aggregations."+name+"."+kind, expr)
		}
		a.exprs = append(a.exprs, prg)
	}
	if b.ok {
		b.p.aggregate = a
	}
	return nil
}

// Aggregate returns the stage's aggregate step, nil if it has none.
func (p *Pipeline) Aggregate() *Aggregate {
	if p == nil {
		return nil
	}
	return p.aggregate
}
