package transform

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/exactly-io/exactly/serde"
)

// CEL sees an *object as a map from string to dyn. Field selection
// (value.amount, has(value.amount)) goes through FindStringKey, which
// cel-go's interpreter tries first: it reads that one member from the
// input bytes, and nothing else. Whole-map operations (size, ==,
// iteration, conversion) build the full map first.
//
// A member is read by the text rule (serde.ParseNumber): a number with a
// '.', 'e' or 'E' is a double, any other an int. A value that has no exact
// CEL form (an integer beyond int64, a double that overflows or underflows,
// a lone surrogate) reads as an error naming the field, which fails the
// expression that needs it.

var (
	_ traits.Mapper = (*object)(nil)
	_ traits.Lister = listVal{}
)

// FindStringKey is cel-go's fast path for field selection. An object that
// cannot be read (duplicate keys) is "not found" here, so that cel-go
// asks Find, whose error fails the selection and has() alike.
func (o *object) FindStringKey(name string) (any, bool) {
	raw, v, found, err := o.find(name)
	if !found || err != nil {
		return nil, false
	}
	if raw != nil {
		return o.celRaw(raw, name), true
	}
	return celOf(v, o.path, name), true
}

// celRaw converts the raw member name of o into a CEL value.
func (o *object) celRaw(raw []byte, name string) ref.Val {
	return celJSON(raw, o.path, name)
}

// celJSON converts raw, the JSON value of field name under path (or of
// path itself when name is ""), into a CEL value. Objects and lists stay
// backed by their bytes.
func celJSON(raw []byte, path, name string) ref.Val {
	switch c := raw[0]; {
	case c == '"':
		if bytes.IndexByte(raw, '\\') < 0 {
			return types.String(raw[1 : len(raw)-1])
		}
		s, err := serde.Unquote(raw, join(path, name))
		if err != nil {
			return types.WrapErr(err)
		}
		return types.String(s)
	case c == 't':
		return types.True
	case c == 'f':
		return types.False
	case c == 'n':
		return types.NullValue
	case c == '{':
		return newObject(raw, join(path, name))
	case c == '[':
		return newList(raw, join(path, name))
	}
	if i, ok := smallInt(raw); ok {
		return types.Int(i)
	}
	v, err := serde.ParseNumber(string(raw), "")
	switch n := v.(type) {
	case int64:
		return types.Int(n)
	case float64:
		return types.Double(n)
	}
	var ve *serde.ValueError
	if errors.As(err, &ve) {
		ve.Path = join(path, name)
	}
	return types.WrapErr(err)
}

func join(path, name string) string {
	if name == "" {
		return path
	}
	return serde.JoinPath(path, name)
}

// smallInt parses JSON integer text of up to 18 digits without
// allocating, the common case.
func smallInt(b []byte) (int64, bool) {
	neg := b[0] == '-'
	digits := b
	if neg {
		digits = b[1:]
	}
	if len(digits) == 0 || len(digits) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// celOf converts a value held in an object's edit into a CEL value.
func celOf(v any, path, name string) ref.Val {
	switch x := v.(type) {
	case rawJSON:
		return celJSON(x, path, name)
	case *object:
		return x
	case ref.Val:
		return x
	case nil:
		return types.NullValue
	}
	return celNative(v, join(path, name))
}

// celNative converts a native value (from a codec other than JSON, a Go
// transform or a step) into a CEL value, with objects as *object so that
// they iterate in a fixed order (by key) and not in Go's map order.
func celNative(v any, path string) ref.Val {
	switch x := v.(type) {
	case map[string]any:
		return fromNative(x, path)
	case []any:
		elems := make([]ref.Val, len(x))
		for i, e := range x {
			elems[i] = celOf(e, serde.IndexPath(path, i), "")
		}
		return types.NewRefValList(types.DefaultTypeAdapter, elems)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// keys returns o's field names in document order: the members as they
// come, each name once, then the fields that steps added, in the order
// they were set. Iteration must not depend on Go's map order: a replay
// after a crash must compute the same output. A key that is not text (a
// lone surrogate) is an error value in its place, which fails whatever
// reads it.
func (o *object) keys() []ref.Val {
	if err := o.index(); err != nil {
		return []ref.Val{types.WrapErr(err)}
	}
	var keys []ref.Val
	seen := make(map[string]bool, len(o.members)+len(o.edits))
	if o.raw != nil {
		for _, mb := range o.members {
			k, err := serde.Unquote(mb.Key(o.raw), o.path)
			if err != nil {
				keys = append(keys, types.WrapErr(err))
				continue
			}
			if seen[k] {
				continue
			}
			seen[k] = true
			if e := o.editOf(k); e != nil && e.deleted {
				continue
			}
			keys = append(keys, types.String(k))
		}
	}
	for _, e := range o.edits {
		if !e.deleted && !seen[e.key] {
			seen[e.key] = true
			keys = append(keys, types.String(e.key))
		}
	}
	return keys
}

// full returns o as a CEL map, or the error of a key or value that cannot
// be read: a conversion reads every field.
func (o *object) full() (traits.Mapper, ref.Val) {
	keys := o.keys()
	m := make(map[string]any, len(keys))
	for _, k := range keys {
		if types.IsError(k) {
			return nil, k
		}
		v := o.Get(k)
		if types.IsError(v) {
			return nil, v
		}
		m[string(k.(types.String))] = v
	}
	return types.NewStringInterfaceMap(types.DefaultTypeAdapter, m), nil

}

// Find implements traits.Mapper.
func (o *object) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return types.ValOrErr(key, "unsupported key type: %v", key.Type()), false
	}
	if _, _, _, err := o.find(string(k)); err != nil {
		return types.WrapErr(err), false
	}
	v, found := o.FindStringKey(string(k))
	if !found {
		return nil, false
	}
	return v.(ref.Val), true
}

// Get implements traits.Indexer.
func (o *object) Get(key ref.Val) ref.Val {
	v, found := o.Find(key)
	if !found {
		return types.ValOrErr(v, "no such key: %v", key)
	}
	return v
}

// Contains implements traits.Container.
func (o *object) Contains(key ref.Val) ref.Val {
	_, found := o.Find(key)
	return types.Bool(found)
}

// Iterator implements traits.Iterable, in document order (see keys).
func (o *object) Iterator() traits.Iterator {
	return types.NewRefValList(types.DefaultTypeAdapter, o.keys()).Iterator()
}

// Size implements traits.Sizer. An object with duplicate keys has no
// size: CEL's size() and the comparisons fail on it (sizeErr), but Size
// itself returns its count of members, since cel-go's runtime cost
// tracking and its map equality assert that a Sizer's size is an Int (an
// error there was a recovered panic: "internal error: interface
// conversion").
func (o *object) Size() ref.Val {
	if err := o.index(); err != nil {
		return types.Int(len(o.members))
	}
	return types.Int(len(o.keys()))
}

// sizeErr is the error of v's size: that of an object with duplicate
// keys, naming the key; nil for any other value.
func sizeErr(v ref.Val) ref.Val {
	if o, ok := v.(*object); ok {
		if err := o.index(); err != nil {
			return types.WrapErr(err)
		}
	}
	return nil
}

// ConvertToNative implements ref.Val.
func (o *object) ConvertToNative(t reflect.Type) (any, error) {
	m, errVal := o.full()
	if errVal != nil {
		return nil, errVal.(*types.Err)
	}
	return m.ConvertToNative(t)
}

// ConvertToType implements ref.Val.
func (o *object) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.MapType:
		return o
	case types.TypeType:
		return types.MapType
	}
	return types.NewErr("type conversion error from '%s' to '%s'", types.MapType, t)
}

// Equal implements ref.Val. Unlike cel-go's maps, a field that cannot be
// read makes the comparison an error, not a match.
func (o *object) Equal(other ref.Val) ref.Val {
	om, ok := other.(traits.Mapper)
	if !ok {
		return types.False
	}
	keys := o.keys()
	if types.Int(len(keys)) != om.Size() {
		return types.False
	}
	for _, k := range keys {
		if types.IsError(k) {
			return k
		}
		v := o.Get(k)
		if types.IsError(v) {
			return v
		}
		ov, found := om.Find(k)
		if !found {
			return types.False
		}
		if eq := types.Equal(v, ov); eq != types.True {
			return eq
		}
	}
	return types.True
}

// Type implements ref.Val.
func (o *object) Type() ref.Type { return types.MapType }

// Value implements ref.Val.
func (o *object) Value() any {
	m, errVal := o.full()
	if errVal != nil {
		return errVal
	}
	return m.Value()
}

// listVal is a JSON array as CEL sees it: a list of its elements, each
// converted as a member is, that remembers its bytes so that a list moved
// by a step unchanged is written as it came.
type listVal struct {
	traits.Lister
	raw []byte
}

func newList(raw []byte, path string) ref.Val {
	var spans []int
	spans = serde.AppendElements(spans, raw)
	elems := make([]ref.Val, 0, len(spans)/2)
	var bad ref.Val
	for i := 0; i < len(spans); i += 2 {
		e := celJSON(raw[spans[i]:spans[i+1]], serde.IndexPath(path, i/2), "")
		if bad == nil && types.IsError(e) {
			bad = e
		}
		elems = append(elems, e)
	}
	l := types.NewRefValList(types.DefaultTypeAdapter, elems)
	if bad != nil {
		// An element that cannot be read fails what reads it (the
		// element, or the whole list), as a field of an object does;
		// the list copied whole keeps its bytes.
		l = badList{Lister: l, err: bad}
	}
	return listVal{Lister: l, raw: raw}
}

// badList is a list of the input with an element that has no exact value
// (err, naming it): its size and its other elements read as they are;
// anything that needs every element (==, in, +, iteration, conversion)
// is err.
type badList struct {
	traits.Lister
	err ref.Val
}

func (l badList) Equal(ref.Val) ref.Val    { return l.err }
func (l badList) Contains(ref.Val) ref.Val { return l.err }
func (l badList) Add(ref.Val) ref.Val      { return l.err }
func (l badList) ConvertToType(ref.Type) ref.Val {
	return l.err
}
func (l badList) ConvertToNative(reflect.Type) (any, error) {
	return nil, errOf(l.err)
}

// errOf is the Go error of a CEL error value.
func errOf(v ref.Val) error {
	if err, ok := v.Value().(error); ok {
		return err
	}
	return fmt.Errorf("%v", v.Value())
}

// Iterator yields err alone: a macro over the list reads every element.
func (l badList) Iterator() traits.Iterator { return &errIterator{err: l.err} }

type errIterator struct {
	err  ref.Val
	done bool
}

func (it *errIterator) HasNext() ref.Val { return types.Bool(!it.done) }
func (it *errIterator) Next() ref.Val    { it.done = true; return it.err }

// errIterator is a ref.Val as traits.Iterator requires; it is never a
// value of an expression.
func (it *errIterator) ConvertToNative(reflect.Type) (any, error) { return nil, errOf(it.err) }
func (it *errIterator) ConvertToType(ref.Type) ref.Val            { return it.err }
func (it *errIterator) Equal(ref.Val) ref.Val                     { return it.err }
func (it *errIterator) Type() ref.Type                            { return types.IteratorType }
func (it *errIterator) Value() any                                { return nil }

// storable is native, except that a scalar result is stored as the CEL
// value it is, without boxing it again (see scalar).
func storable(v ref.Val, path string, jsonOut bool) (any, error) {
	switch x := v.(type) {
	case types.Bool, types.Int, types.Uint, types.String, types.Null:
		return v, nil
	case types.Double:
		if f := float64(x); !jsonOut || !math.IsNaN(f) && !math.IsInf(f, 0) {
			return v, nil
		}
	}
	return native(v, path, jsonOut)
}

// scalar converts a CEL scalar that set stored (see storable) into its Go
// value; ok is false for any other value.
func scalar(v any) (any, bool) {
	switch x := v.(type) {
	case types.Bool:
		return bool(x), true
	case types.Int:
		return int64(x), true
	case types.Uint:
		return uint64(x), true
	case types.Double:
		return float64(x), true
	case types.String:
		return string(x), true
	case types.Null:
		return nil, true
	}
	return nil, false
}

// appendScalar appends the JSON text of a CEL scalar that set stored.
func appendScalar(b []byte, v any, path string) ([]byte, bool, error) {
	switch x := v.(type) {
	case types.Bool:
		return strconv.AppendBool(b, bool(x)), true, nil
	case types.Int:
		return strconv.AppendInt(b, int64(x), 10), true, nil
	case types.Uint:
		return strconv.AppendUint(b, uint64(x), 10), true, nil
	case types.Double:
		b, err := serde.AppendDouble(b, float64(x), 64, path)
		return b, true, err
	case types.String:
		b, err := serde.AppendString(b, string(x), path)
		return b, true, err
	case types.Null:
		return append(b, "null"...), true, nil
	}
	return b, false, nil
}

// native converts a CEL result into the value a step stores: Go shapes
// for scalars, lists and maps (copied, so that no two records share one),
// and the bytes as they came for an object or list of the input that no
// step changed. jsonOut refuses NaN and ±Inf, which JSON cannot hold,
// naming path.
func native(v ref.Val, path string, jsonOut bool) (any, error) {
	switch v := v.(type) {
	case *object:
		return v.snapshot(), nil
	case listVal:
		return rawJSON(v.raw), nil
	case types.Null, types.Bool, types.Int, types.Uint, types.String:
		s, _ := scalar(v)
		return s, nil
	case types.Double:
		return nativeDouble(float64(v), path, jsonOut)
	case types.Bytes:
		return []byte(v), nil
	case types.Timestamp:
		return v.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return v.Duration.String(), nil
	case traits.Mapper:
		return nativeMap(v, path, jsonOut)
	case traits.Lister:
		return nativeList(v, path, jsonOut)
	}
	return v.Value(), nil
}

// nativeDouble is native of a double f: refused if it is NaN or ±Inf and
// jsonOut.
func nativeDouble(f float64, path string, jsonOut bool) (any, error) {
	if jsonOut && (math.IsNaN(f) || math.IsInf(f, 0)) {
		_, err := serde.AppendDouble(nil, f, 64, path)
		return nil, err
	}
	return f, nil
}

// nativeMap is native of a map: an object keyed by each key's text.
func nativeMap(v traits.Mapper, path string, jsonOut bool) (any, error) {
	out := map[string]any{}
	for it := v.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		kn, err := native(k, path, jsonOut)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprint(kn)
		if _, twice := out[name]; twice {
			// {1: "a", "1": "b"}: one key of a JSON object, and
			// which value won would follow the map's iteration
			// order, another on each run.
			return nil, &serde.ValueError{Path: path, Err: fmt.Errorf("the map has two keys that both write the object key %q (one of them a %s): a JSON object holds one", name, k.Type().TypeName())}
		}
		if out[name], err = native(v.Get(k), serde.JoinPath(path, name), jsonOut); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// nativeList is native of a list.
func nativeList(v traits.Lister, path string, jsonOut bool) (any, error) {
	n := int(v.Size().(types.Int))
	out := make([]any, n)
	for i := range n {
		var err error
		if out[i], err = native(v.Get(types.Int(i)), serde.IndexPath(path, i), jsonOut); err != nil {
			return nil, err
		}
	}
	return out, nil
}
