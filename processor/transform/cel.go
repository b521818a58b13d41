package transform

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/cost"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/exactly-io/exactly/serde"
	"github.com/exactly-io/exactly/topology"
)

type celType = cel.Type

var (
	boolType = cel.BoolType
	listType = cel.ListType(cel.DynType)
)

// costLimit bounds the work of one evaluation, so that an expression such
// as a huge nested comprehension fails the record instead of wedging the
// stage (cel-go's runtime cost units).
const costLimit = 1_000_000

type compiler struct {
	f    *topology.File
	env  *cel.Env
	errs topology.Errors
}

// newCompiler builds the CEL environment every expression is checked in.
// It declares the record's fields and deterministic extension libraries
// only: no clock, no randomness.
func newCompiler(f *topology.File) (*compiler, error) {
	env, err := cel.NewEnv(
		cel.Variable("value", cel.DynType),
		cel.Variable("key", cel.DynType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("topic", cel.StringType),
		cel.Variable("partition", cel.IntType),
		cel.Variable("offset", cel.IntType),
		cel.Variable("timestamp", cel.TimestampType),
		ext.Strings(),
		ext.Encoders(),
		ext.Math(),
		ext.Lists(),
		ext.Sets(),
		cel.OptionalTypes(),
	)
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	return &compiler{f: f, env: env}, nil
}

func (c *compiler) fail(path, format string, args ...any) {
	if c.f.Problem(path) {
		return // a draft's problem there is reported already
	}
	c.errs = append(c.errs, &topology.Error{File: c.f.Path, Pos: c.f.Position(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// program is one compiled expression.
type program struct {
	prg cel.Program
	src string
	// field is the path of an expression that only selects a field of
	// the value (value.a.b; empty for value itself): text renders a
	// number there as the text it came with.
	field []string
	// sel is the path of an expression that only selects, through a list
	// index on the way (value.items[0].q), for selectedNumber.
	sel []selector
}

// selector is one step of a selection: a field name, or a list index
// (index >= 0).
type selector struct {
	name  string
	index int
}

// indexedSelection matches a selection through list indexes, such as
// value.items[0] or value.o.l[2].q.
var indexedSelection = regexp.MustCompile(`^\s*value((\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]{1,9}\])*)\s*$`)

// selectionStep matches one step of an indexedSelection.
var selectionStep = regexp.MustCompile(`\.([A-Za-z_][A-Za-z0-9_]*)|\[([0-9]{1,9})\]`)

// selection returns the path src only selects: as field names
// (fieldSelection), or as selectors through a list index
// (indexedSelection); both nil when src computes its value.
func selection(src string) ([]string, []selector) {
	if m := fieldSelection.FindStringSubmatch(src); m != nil {
		if m[1] == "" {
			return []string{}, nil
		}
		return strings.Split(m[1][1:], "."), nil
	}
	if m := indexedSelection.FindStringSubmatch(src); m != nil {
		return nil, parseSelection(m[1])
	}
	return nil, nil
}

// parseSelection returns the steps of the indexedSelection path.
func parseSelection(path string) []selector {
	sel := []selector{}
	for _, m := range selectionStep.FindAllStringSubmatch(path, -1) {
		if m[1] != "" {
			sel = append(sel, selector{name: m[1], index: -1})
			continue
		}
		i, _ := strconv.Atoi(m[2])
		sel = append(sel, selector{index: i})
	}
	return sel
}

// pathOr is the path of the field the expression only selects ("v",
// "order.id"), for an error in its value, or def when it computes one.
func (p *program) pathOr(def string) string {
	if len(p.field) == 0 {
		return def
	}
	path := ""
	for _, f := range p.field {
		path = serde.JoinPath(path, f)
	}
	return path
}

// fieldSelection matches an expression that only selects a field of the
// value, such as value.event_id or value.order.id, or the value itself
// (an element that explode made the value).
var fieldSelection = regexp.MustCompile(`^\s*value((\.[A-Za-z_][A-Za-z0-9_]*)*)\s*$`)

// compile parses and type-checks src; want, if given, are the result types
// accepted (dyn is accepted too, and checked at run time).
func (c *compiler) compile(path, src string, want ...*celType) (*program, bool) {
	ast, iss := c.env.Compile(src)
	if iss.Err() != nil {
		msg := oneLine(strings.TrimPrefix(iss.Err().Error(), "ERROR: <input>:"))
		if strings.Contains(msg, "undeclared reference to 'now'") || strings.Contains(msg, "undeclared reference to 'random'") {
			msg += " (non-deterministic functions are not allowed: a replay after a crash must produce the same output; use timestamp, the record's time)"
		}
		c.fail(path, "invalid expression: %s", msg)
		return nil, false
	}
	if len(want) > 0 {
		got := ast.OutputType()
		ok := got.IsExactType(cel.DynType)
		for _, w := range want {
			ok = ok || got.IsAssignableType(w) || w.Kind() == types.ListKind && got.Kind() == types.ListKind
		}
		if !ok {
			c.fail(path, "expression has type %s, want %s", got, want[0])
			return nil, false
		}
	}
	opts := []cel.ProgramOption{cel.EvalOptions(cel.OptOptimize), ExactComparisons()}
	if est, err := c.env.EstimateCost(ast, noEstimates{}); err != nil || est.Max > costLimit {
		// Only an expression whose worst case the checker cannot bound
		// (a comprehension or a string function over input of unknown
		// size) pays for tracking its cost as it runs.
		opts = append(opts, cel.CostLimit(costLimit))
	}
	prg, err := c.env.Program(ast, opts...)
	if err != nil {
		c.fail(path, "invalid expression: %s", oneLine(err.Error()))
		return nil, false
	}
	p := &program{prg: prg, src: src}
	p.field, p.sel = selection(src)
	return p, true
}

// noEstimates lets the checker's own rules estimate every size and call:
// an input's size is unknown, so anything that depends on it is unbounded.
type noEstimates struct{}

func (noEstimates) EstimateSize(cost.AstNode) *cost.SizeEstimate { return nil }
func (noEstimates) EstimateCallCost(string, string, *cost.AstNode, []cost.AstNode) *cost.CallEstimate {
	return nil
}

func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[0])
}

// eval runs p on r. It does not watch ctx: the cost limit bounds every
// evaluation, and a context per evaluation costs more than the
// expressions of a typical step.
func (p *program) eval(_ context.Context, r *Record) (ref.Val, error) {
	v, _, err := p.prg.Eval(activation{r})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// text runs p on r and renders its value as text, as bytesOf does (path
// names the value in errors). It returns the value too.
func (p *program) text(ctx context.Context, r *Record, path string) ([]byte, ref.Val, error) {
	v, err := p.eval(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	b, err := bytesOf(v, path)
	if err != nil {
		return nil, nil, err
	}
	if t, ok := p.selectedNumber(r, v); ok {
		b = append(b[:0], t...)
	}
	return b, v, nil
}

// selectedNumber is the JSON text of the number v that p only selects
// (value.a.b, value.items[2].q) from r's value: a number keeps its text
// (values.md, rule 2), 1E2 stays 1E2, not the 100.0 of its double, in a
// key, a header, a set or an aggregation. ok is false when p computes its
// value, v is no number, or the field is no longer the input's text (a
// step before wrote it).
func (p *program) selectedNumber(r *Record, v ref.Val) (rawJSON, bool) {
	if p.field == nil && p.sel == nil {
		return nil, false
	}
	switch v.(type) {
	case types.Int, types.Uint, types.Double:
		// It was read, so CEL holds it.
		if p.sel != nil {
			return selectText(r.Value, p.sel)
		}
		if raw, ok, err := getPath(r.Value, p.field); err == nil && ok {
			t, isRaw := raw.(rawJSON)
			return t, isRaw
		}
	}
	return nil, false
}

// selectText follows sel, fields and list indexes, from v and returns
// the input's text there; false where a step wrote a value on the way.
func selectText(v any, sel []selector) (rawJSON, bool) {
	for _, s := range sel {
		if s.index < 0 {
			got, ok, err := getPath(v, []string{s.name})
			if err != nil || !ok {
				return nil, false
			}
			v = got
			continue
		}
		switch x := v.(type) {
		case rawJSON:
			if x[0] != '[' {
				return nil, false
			}
			spans := serde.AppendElements(nil, x)
			if 2*s.index+1 >= len(spans) {
				return nil, false
			}
			v = rawJSON(x[spans[2*s.index]:spans[2*s.index+1]])
		case []any:
			if s.index >= len(x) {
				return nil, false
			}
			v = x[s.index]
		default:
			return nil, false
		}
	}
	t, ok := v.(rawJSON)
	return t, ok
}

func (p *program) bool(ctx context.Context, r *Record) (bool, error) {
	v, err := p.eval(ctx, r)
	if err != nil {
		return false, err
	}
	b, ok := v.(types.Bool)
	if !ok {
		return false, fmt.Errorf("want a bool, got %s", v.Type().TypeName())
	}
	return bool(b), nil
}

// activation resolves the expression variables from a record, without
// building a map per evaluation.
type activation struct{ r *Record }

func (a activation) ResolveName(name string) (any, bool) {
	r := a.r
	switch name {
	case "value":
		return celValue(r), true
	case "key":
		if r.Key == nil {
			return types.NullValue, true
		}
		if utf8.Valid(r.Key) {
			return string(r.Key), true
		}
		return r.Key, true
	case "headers":
		m := make(map[string]string, len(r.Headers))
		for _, h := range r.Headers {
			m[h.Key] = string(h.Value)
		}
		return m, true
	case "topic":
		return r.SourceTopic, true
	case "partition":
		return int64(r.Partition), true
	case "offset":
		return r.Offset, true
	case "timestamp":
		if r.Timestamp.Equal(noTimestamp) {
			// Kafka's NO_TIMESTAMP (-1, a record of message format v0):
			// no instant, not 1969-12-31T23:59:59.999Z; the sink stores
			// NULL for it. An expression that reads it fails its record.
			return types.NewErr("the record has no timestamp (-1, Kafka's NO_TIMESTAMP)"), true
		}
		return r.Timestamp, true
	}
	return nil, false
}

// noTimestamp is how a record without a timestamp (-1 milliseconds)
// reads as a time.Time.
var noTimestamp = time.UnixMilli(-1)

func (activation) Parent() interpreter.Activation { return nil }

// celValue is what the variable value is for r's value. A native object
// (from Avro, say) becomes an *object in place: the same value, with a
// fixed iteration order.
func celValue(r *Record) any {
	switch x := r.Value.(type) {
	case *object:
		return x
	case rawJSON:
		return celJSON(x, "", "")
	case map[string]any:
		o := fromNative(x, "")
		r.Value = o
		return o
	case []any:
		return celNative(x, "")
	}
	return r.Value
}
