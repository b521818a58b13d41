package transform

import (
	"math"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/overloads"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
	"cel.dev/cel-go/interpreter"
)

// Comparisons between an int (or uint) and a double are exact here: the
// two numbers compare as on the real number line, as the CEL language
// definition asks of its heterogeneous numeric comparisons ("Numbers" in
// cel-spec's langdef.md). cel-go converts the integer to a double first,
// which rounds every integer beyond 2^53: there `9007199254740993 ==
// 9007199254740992.0` is true and `9223372036854775807 <
// 9223372036854775808.0` false, so a filter would drop or keep a record
// on a value it never had. exactComparisons is a cel-go decorator that
// replaces ==, !=, <, <=, >, >= and `in` (over a list computed at run
// time) where such a pair can meet, at any depth of == and != on lists
// and maps; every other pair of operands gets the result cel-go gives.

// ExactComparisons is the cel-go program option of the comparisons above,
// for every CEL expression of exactly (steps, and redrive's --where).
func ExactComparisons() cel.ProgramOption { return cel.CustomDecoratorV2(exactComparisons) }

// cmpOp is a comparison operator.
type cmpOp int

const (
	opNone cmpOp = iota
	opEq
	opNe
	opLt
	opLe
	opGt
	opGe
	opIn
)

var cmpOps = map[string]cmpOp{
	operators.Equals: opEq, operators.NotEquals: opNe,
	operators.Less: opLt, operators.LessEquals: opLe,
	operators.Greater: opGt, operators.GreaterEquals: opGe,
	operators.In: opIn,
}

// maxExact is 2^53: every integer of at most this magnitude is a double
// exactly, so comparing it with a double by conversion is exact.
const maxExact = 1 << 53

// exactComparisons decorates i when it is a comparison whose operands may
// be an int beyond 2^53 and a double; see above.
func exactComparisons(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	call, ok := i.(interpreter.InterpretableCall)
	if !ok {
		return i, nil
	}
	if extComparing[call.Function()] {
		return &exactExt{InterpretableCall: call, orig: i}, nil
	}
	if call.Function() == overloads.Size && len(call.Args()) == 1 {
		return &checkedCall{InterpretableCall: call, orig: i, exec: execSize}, nil
	}
	if call.Function() == overloads.TypeConvertDouble && len(call.Args()) == 1 {
		return &checkedCall{InterpretableCall: call, orig: i, exec: execDouble}, nil
	}
	op := cmpOps[call.Function()]
	args := call.Args()
	if op == opNone || len(args) != 2 {
		return i, nil
	}
	if op == opIn {
		// A list of constant strings, bools and the like is left to
		// cel-go (and its set lookup, the Optimize decorator): no
		// number can meet one exactly or not.
		if scalarConsts(args[1]) {
			return i, nil
		}
		return &exactCmp{InterpretableCall: call, op: op, a: args[0], b: args[1]}, nil
	}
	if exactOperand(args[0]) || exactOperand(args[1]) {
		return i, nil
	}
	return &exactCmp{InterpretableCall: call, op: op, a: args[0], b: args[1]}, nil
}

// exactOperand reports whether a is a constant that cel-go already
// compares exactly with any value: an int or uint within 2^53, or a
// scalar that is no number.
func exactOperand(a interpreter.InterpretableV2) bool {
	c, ok := a.(interpreter.InterpretableConst)
	if !ok {
		return false
	}
	switch v := c.Value().(type) {
	case types.Int:
		return v >= -maxExact && v <= maxExact
	case types.Uint:
		return v <= maxExact
	case types.Double, traits.Lister, traits.Mapper:
		return false // a list or map may hold a double or a large int
	}
	return true
}

// scalarConsts reports whether a is a constant list, or a list of
// constants, whose elements are all exactOperand.
func scalarConsts(a interpreter.InterpretableV2) bool {
	switch c := a.(type) {
	case interpreter.InterpretableConst:
		l, ok := c.Value().(traits.Lister)
		if !ok {
			return false
		}
		for it := l.Iterator(); it.HasNext() == types.True; {
			v := it.Next()
			if isNumber(v) || v.Type().HasTrait(traits.IterableType) {
				return false
			}
		}
		return true
	case interpreter.InterpretableConstructor:
		if c.Type() != types.ListType {
			return false
		}
		for _, e := range c.InitVals() {
			if !exactOperand(e) {
				return false
			}
			if k, ok := e.(interpreter.InterpretableConst); !ok || isNumber(k.Value()) {
				return false
			}
		}
		return true
	}
	return false
}

// exactCmp is a comparison evaluated exactly when its operands are an
// integer and a double, and as cel-go evaluates it otherwise. It stays an
// InterpretableCall (Function, OverloadID and Args are the original's)
// for the decorators that follow.
type exactCmp struct {
	interpreter.InterpretableCall
	op   cmpOp
	a, b interpreter.InterpretableV2
}

// Eval implements interpreter.Interpretable.
func (e *exactCmp) Eval(act interpreter.Activation) ref.Val {
	return interpreter.EvalActivation(act, e.Exec)
}

// Exec implements interpreter.InterpretableV2: operands strictly left to
// right, an error or unknown operand is the result, as cel-go does.
func (e *exactCmp) Exec(f *interpreter.ExecutionFrame) ref.Val {
	l := e.a.Exec(f)
	if types.IsUnknownOrError(l) {
		return l
	}
	r := e.b.Exec(f)
	if types.IsUnknownOrError(r) {
		return r
	}
	if e.op == opIn {
		return e.in(l, r)
	}
	if c, ok := compareMixed(l, r); ok {
		return types.Bool(holds(e.op, c))
	}
	switch e.op {
	case opEq:
		return exactEqual(l, r)
	case opNe:
		eq := exactEqual(l, r)
		if b, ok := eq.(types.Bool); ok {
			return !b
		}
		return eq
	}
	// The ordering of cel-go's standard library (stdlib's relational
	// operators): NaN orders with nothing.
	if isNaN(l) || isNaN(r) {
		return types.False
	}
	cmp, ok := l.(traits.Comparer)
	if !ok {
		return types.NewErrWithNodeID(e.ID(), "no such overload: %s", e.Function())
	}
	c := cmp.Compare(r)
	n, ok := c.(types.Int)
	if !ok {
		if err, isErr := c.(*types.Err); isErr && err.NodeID() == 0 {
			return types.LabelErrNode(e.ID(), err)
		}
		return c
	}
	return types.Bool(holds(e.op, int(n)))
}

// in is `l in r` with the elements of a list compared by exact equality;
// any other container answers as cel-go's `in` does.
func (e *exactCmp) in(l, r ref.Val) ref.Val {
	list, isList := r.(traits.Lister)
	if !isList {
		c, ok := r.(traits.Container)
		if !ok {
			return types.NewErrWithNodeID(e.ID(), "no such overload: %s", e.Function())
		}
		return c.Contains(l)
	}
	for it := list.Iterator(); it.HasNext() == types.True; {
		x := it.Next()
		if types.IsError(x) {
			return x // an element with no exact value might be l
		}
		if exactEqual(l, x) == types.True {
			return types.True
		}
	}
	return types.False
}

// exactEqual is cel-go's equality (types.Equal) with numbers compared
// exactly at any depth: lists element by element, maps key by key, as
// cel-go's own list and map equality do, but through exactEqual. An
// element that is not equal (false, or an error such as a field with no
// exact value) is the result.
func exactEqual(l, r ref.Val) ref.Val {
	if c, ok := compareMixed(l, r); ok {
		return types.Bool(c == 0)
	}
	switch a := l.(type) {
	case traits.Lister:
		b, ok := r.(traits.Lister)
		if !ok {
			break
		}
		if ne := sizeDiffers(a, b); ne != nil {
			return ne
		}
		size, _ := a.Size().(types.Int)
		for i := types.Int(0); i < size; i++ {
			if eq := exactEqual(a.Get(i), b.Get(i)); eq != types.True {
				return eq
			}
		}
		return types.True
	case traits.Mapper:
		b, ok := r.(traits.Mapper)
		if !ok {
			break
		}
		if ne := sizeDiffers(a, b); ne != nil {
			return ne
		}
		for it := a.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			if types.IsUnknownOrError(k) {
				return k
			}
			bv, found := b.Find(k)
			if !found {
				return types.False
			}
			if eq := exactEqual(a.Get(k), bv); eq != types.True {
				return eq
			}
		}
		return types.True
	}
	return types.Equal(l, r)
}

// sizeDiffers is nil when the lists or maps a and b have one size, else
// their equality: false, or the error of a size that cannot be known.
func sizeDiffers(a, b traits.Sizer) ref.Val {
	for _, v := range []traits.Sizer{a, b} {
		if rv, ok := v.(ref.Val); ok {
			if err := sizeErr(rv); err != nil {
				return err
			}
		}
	}
	n, m := a.Size(), b.Size()
	switch {
	case types.IsUnknownOrError(n):
		return n
	case types.IsUnknownOrError(m):
		return m
	case n != m:
		return types.False
	}
	return nil
}

func holds(op cmpOp, c int) bool {
	switch op {
	case opEq:
		return c == 0
	case opNe:
		return c != 0
	case opLt:
		return c < 0
	case opLe:
		return c <= 0
	case opGt:
		return c > 0
	default:
		return c >= 0
	}
}

func isNaN(v ref.Val) bool {
	d, ok := v.(types.Double)
	return ok && math.IsNaN(float64(d))
}

func isNumber(v ref.Val) bool {
	switch v.(type) {
	case types.Int, types.Uint, types.Double:
		return true
	}
	return false
}

// compareMixed compares an integer and a double exactly (-1, 0, +1), and
// reports false for any other pair, or a NaN.
func compareMixed(l, r ref.Val) (int, bool) {
	switch a := l.(type) {
	case types.Int:
		if d, ok := r.(types.Double); ok && !math.IsNaN(float64(d)) {
			return compareIntDouble(int64(a), float64(d)), true
		}
	case types.Uint:
		if d, ok := r.(types.Double); ok && !math.IsNaN(float64(d)) {
			return compareUintDouble(uint64(a), float64(d)), true
		}
	case types.Double:
		if math.IsNaN(float64(a)) {
			return 0, false
		}
		switch b := r.(type) {
		case types.Int:
			return -compareIntDouble(int64(b), float64(a)), true
		case types.Uint:
			return -compareUintDouble(uint64(b), float64(a)), true
		}
	}
	return 0, false
}

// compareIntDouble compares i with d (not NaN) exactly: by d's integer
// part, which an int64 holds exactly within its range, then by d's
// fraction.
func compareIntDouble(i int64, d float64) int {
	switch {
	case d < -(1 << 63):
		return 1
	case d >= 1<<63:
		return -1
	}
	t := math.Trunc(d)
	switch ti := int64(t); {
	case i < ti:
		return -1
	case i > ti:
		return 1
	case d > t:
		return -1
	case d < t:
		return 1
	}
	return 0
}

// compareUintDouble is compareIntDouble for a uint64.
func compareUintDouble(u uint64, d float64) int {
	switch {
	case d < 0:
		return 1
	case d >= 1<<64:
		return -1
	}
	t := math.Trunc(d)
	switch tu := uint64(t); {
	case u < tu:
		return -1
	case u > tu:
		return 1
	case d > t:
		return -1
	}
	return 0
}

// The extension functions that compare values inside: cel-go's ext
// library compares with the same rounding equality and ordering, so
// sets.contains([9007199254740993], [9007199254740992.0]) was true and
// math.least(9007199254740993, 9007199254740992.0) the int. Each is
// decorated as exactExt: when its arguments hold an integer beyond 2^53
// and a double (at any depth), it is computed here with exactEqual and
// compareMixed; otherwise it is cel-go's own call, result and errors alike.
const (
	extMin          = "math.@min" // math.least, after cel-go's macro
	extMax          = "math.@max" // math.greatest
	extDistinct     = "distinct"
	extSetsContains = "sets.contains"
	extSetsEquiv    = "sets.equivalent"
	extSetsInter    = "sets.intersects"
)

var extComparing = map[string]bool{extMin: true, extMax: true, extDistinct: true,
	extSetsContains: true, extSetsEquiv: true, extSetsInter: true}

// exactExt is one call of an extension function of extComparing.
type exactExt struct {
	interpreter.InterpretableCall
	orig interpreter.InterpretableV2
}

// Eval implements interpreter.Interpretable.
func (e *exactExt) Eval(act interpreter.Activation) ref.Val {
	return interpreter.EvalActivation(act, e.Exec)
}

// Exec implements interpreter.InterpretableV2.
func (e *exactExt) Exec(f *interpreter.ExecutionFrame) ref.Val {
	args := e.Args()
	vals := make([]ref.Val, len(args))
	var m mixed
	for i, a := range args {
		v := a.Exec(f)
		if types.IsUnknownOrError(v) {
			return e.orig.Exec(f)
		}
		vals[i] = v
		m.scan(v)
	}
	if m.err != nil {
		// cel-go's call would convert the list, and report the failed
		// conversion as "no such overload".
		return m.err
	}
	if !m.bigInt || !m.double {
		return e.orig.Exec(f)
	}
	if v, ok := e.exact(vals); ok {
		return v
	}
	return e.orig.Exec(f)
}

// exact computes the call on vals exactly, or reports false for
// arguments of shapes it leaves to cel-go (and its errors).
func (e *exactExt) exact(vals []ref.Val) (ref.Val, bool) {
	switch fn := e.Function(); fn {
	case extMin, extMax:
		return exactMinMax(fn, vals)
	case extDistinct:
		return exactDistinct(vals)
	}
	return e.exactSets(vals)
}

// exactMinMax is min or max (fn) of vals, or of the list that is vals'
// one element.
func exactMinMax(fn string, vals []ref.Val) (ref.Val, bool) {
	nums := vals
	if len(vals) == 1 {
		l, ok := vals[0].(traits.Lister)
		if !ok {
			return nil, false
		}
		var bad ref.Val
		if nums, bad = elems(l); bad != nil {
			return bad, true
		}
		if len(nums) == 0 {
			return nil, false
		}
	}
	best := nums[0]
	for _, v := range nums {
		c, ok := compareNumber(v, best)
		if !ok {
			return nil, false
		}
		// The first of equal values stays, as cel-go's minPair
		// and maxPair keep it.
		if (fn == extMin && c < 0) || (fn == extMax && c > 0) {
			best = v
		}
	}
	return best, true
}

// compareNumber compares number v with best: exactly across types, else
// as cel-go compares them; false when v is no number or the comparison
// gives no integer.
func compareNumber(v, best ref.Val) (int, bool) {
	if !isNumber(v) {
		return 0, false
	}
	if c, ok := compareMixed(v, best); ok {
		return c, true
	}
	cmp, isCmp := v.(traits.Comparer)
	if !isCmp {
		return 0, false
	}
	n, isInt := cmp.Compare(best).(types.Int)
	if !isInt {
		return 0, false
	}
	return int(n), true
}

// exactDistinct is the list of vals' one element without its repeats,
// first of each kept, compared exactly.
func exactDistinct(vals []ref.Val) (ref.Val, bool) {
	l, ok := vals[0].(traits.Lister)
	if !ok || len(vals) != 1 {
		return nil, false
	}
	all, bad := elems(l)
	if bad != nil {
		return bad, true
	}
	var out []ref.Val
	for _, v := range all {
		if !containsExact(out, v) {
			out = append(out, v)
		}
	}
	return types.DefaultTypeAdapter.NativeToValue(out), true
}

// exactSets is sets.contains, sets.equivalent or sets.intersects of the
// two lists vals, their elements compared exactly.
func (e *exactExt) exactSets(vals []ref.Val) (ref.Val, bool) {
	if len(vals) != 2 {
		return nil, false
	}
	a, okA := vals[0].(traits.Lister)
	b, okB := vals[1].(traits.Lister)
	if !okA || !okB {
		return nil, false
	}
	as, bad := elems(a)
	if bad != nil {
		return bad, true
	}
	bs, bad := elems(b)
	if bad != nil {
		return bad, true
	}
	switch e.Function() {
	case extSetsContains:
		return types.Bool(containsAll(as, bs)), true
	case extSetsEquiv:
		return types.Bool(containsAll(as, bs) && containsAll(bs, as)), true
	default: // extSetsInter
		for _, v := range bs {
			if containsExact(as, v) {
				return types.True, true
			}
		}
		return types.False, true
	}
}

// containsAll reports whether in holds every element of of, compared
// exactly.
func containsAll(in, of []ref.Val) bool {
	for _, v := range of {
		if !containsExact(in, v) {
			return false
		}
	}
	return true
}

// elems returns the elements of l, or the first that is an error (an
// element of the input with no exact value).
func elems(l traits.Lister) ([]ref.Val, ref.Val) {
	var out []ref.Val
	for it := l.Iterator(); it.HasNext() == types.True; {
		v := it.Next()
		if types.IsError(v) {
			return nil, v
		}
		out = append(out, v)
	}
	return out, nil
}

// containsExact reports whether some element of list equals v exactly.
func containsExact(list []ref.Val, v ref.Val) bool {
	for _, x := range list {
		if exactEqual(x, v) == types.True {
			return true
		}
	}
	return false
}

// mixed records what numbers a value holds at any depth: an integer
// beyond 2^53 (which cel-go rounds against a double), a double.
type mixed struct {
	bigInt, double bool
	err            ref.Val // the first error inside (an element of the input with no exact value)
}

func (m *mixed) scan(v ref.Val) {
	if m.err == nil && types.IsError(v) {
		m.err = v
	}
	switch x := v.(type) {
	case types.Int:
		m.bigInt = m.bigInt || x < -maxExact || x > maxExact
	case types.Uint:
		m.bigInt = m.bigInt || x > maxExact
	case types.Double:
		m.double = true
	case traits.Lister:
		for it := x.Iterator(); it.HasNext() == types.True; {
			m.scan(it.Next())
		}
	case traits.Mapper:
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			m.scan(k)
			m.scan(x.Get(k))
		}
	}
}

// checkedCall is a call of cel-go's own function (orig) with a check
// around it: exec runs orig and the check, in the order the check needs.
type checkedCall struct {
	interpreter.InterpretableCall
	orig interpreter.InterpretableV2
	exec func(c *checkedCall, f *interpreter.ExecutionFrame) ref.Val
}

// Eval implements interpreter.Interpretable.
func (c *checkedCall) Eval(act interpreter.Activation) ref.Val {
	return interpreter.EvalActivation(act, c.Exec)
}

// Exec implements interpreter.InterpretableV2.
func (c *checkedCall) Exec(f *interpreter.ExecutionFrame) ref.Val { return c.exec(c, f) }

// execSize is CEL's size() of one argument: an object with duplicate keys
// has none (its error names the key), where cel-go would take the
// member count that object.Size gives.
func execSize(c *checkedCall, f *interpreter.ExecutionFrame) ref.Val {
	v := c.Args()[0].Exec(f)
	if err := sizeErr(v); err != nil {
		return err
	}
	return c.orig.Exec(f)
}

// execDouble is double(x) refusing a string that underflows to zero, as
// reading a JSON number does (values.md, rule 4): cel-go's conversion
// (strconv.ParseFloat) refuses "1e400" but reads "1e-400" as 0.0.
func execDouble(c *checkedCall, f *interpreter.ExecutionFrame) ref.Val {
	v := c.orig.Exec(f)
	if d, ok := v.(types.Double); ok && d == 0 {
		if s, ok := c.Args()[0].Exec(f).(types.String); ok && nonzeroMantissa(string(s)) {
			return types.NewErr("string %q underflows to zero as a double", clipText(string(s)))
		}
	}
	return v
}

// nonzeroMantissa reports whether s, float text that strconv.ParseFloat
// read, has a nonzero digit before its exponent (decimal "e", or "p" for
// a hexadecimal float): a number that is not zero.
func nonzeroMantissa(s string) bool {
	s = strings.ToLower(strings.TrimLeft(s, "+-"))
	digits, exp := "123456789", "e"
	if strings.HasPrefix(s, "0x") {
		s, digits, exp = s[2:], "123456789abcdef", "p"
	}
	if i := strings.Index(s, exp); i >= 0 {
		s = s[:i]
	}
	return strings.ContainsAny(s, digits)
}

// clipText is s, cut to 100 bytes for an error.
func clipText(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}
