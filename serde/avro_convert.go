package serde

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// fromAvro converts v, a goavro native value of writer type w, into the
// in-memory representation of reader type r, resolving w against r as the
// Avro specification's "Schema Resolution" says. Without a reader schema r
// is w. Errors wrap ErrIncompatible or ErrSyntax.
func fromAvro(w, r *avroType, v any) (any, error) {
	if w.kind == "union" {
		if v == nil {
			return fromAvro(nullType, r, nil)
		}
		m, ok := v.(map[string]any)
		if !ok || len(m) != 1 {
			return nil, fmt.Errorf("%w: union value %T", ErrSyntax, v)
		}
		for name, inner := range m {
			for _, b := range w.branches {
				if b.unionName() == name {
					return fromAvro(b, r, inner)
				}
			}
			return nil, fmt.Errorf("%w: union has no branch %q", ErrSyntax, name)
		}
	}
	if r.kind == "union" {
		// A branch of the writer's own type first, then the first that
		// matches (by promotion): a long written in ["double","long"] is
		// read as its long, not promoted to a double (which would round
		// it, or dead-letter a datum this very schema wrote). The Java
		// implementation resolves the same way (ResolvingGrammarGenerator's
		// bestBranch: same type, then promotable); the specification says
		// only "the first schema in the reader's union that matches".
		for _, b := range r.branches {
			if b.kind == w.kind && b.logical == w.logical && matches(w, b) {
				return fromAvro(w, b, v)
			}
		}
		for _, b := range r.branches {
			if matches(w, b) {
				return fromAvro(w, b, v)
			}
		}
		return nil, fmt.Errorf("%w: writer type %s matches no branch of the reader's union", ErrIncompatible, w.unionName())
	}
	if !matches(w, r) {
		return nil, fmt.Errorf("%w: writer type %s cannot be read as %s", ErrIncompatible, w.unionName(), r.unionName())
	}
	// The specification resolves the physical types and leaves logical
	// types to the reader, so a writer's timestamp-millis read as
	// timestamp-micros (or a date as timestamp-millis) would be the same
	// number in another unit: another instant, silently. Two logical types
	// that differ are incompatible instead; a writer's plain number read
	// as a logical type is the reader's to interpret, as the specification
	// says.
	if w.logical != "" && r.logical != "" && w.logical != r.logical {
		return nil, fmt.Errorf("%w: writer type %s (%s) cannot be read as %s (%s): the same number would be another value",
			ErrIncompatible, w.logical, w.kind, r.logical, r.kind)
	}
	if r.logical != "" {
		switch {
		case r.logical == "decimal" && (w.logical != "decimal" || w.scale != r.scale):
			return nil, fmt.Errorf("%w: writer decimal scale %d, reader scale %d", ErrIncompatible, w.scale, r.scale)
		case r.kind == w.kind:
			return logicalFromAvro(r, v)
		case w.kind == "int" && r.kind == "long":
			// Promoted, then the reader's logical type.
			return logicalFromAvro(r, int64(v.(int32)))
		}
		return nil, fmt.Errorf("%w: writer type %s cannot be read as %s (%s)", ErrIncompatible, w.unionName(), r.logical, r.kind)
	}
	switch w.kind {
	case "null":
		return nil, nil
	case "boolean":
		return v, nil
	case "int", "long":
		var i int64
		if w.kind == "int" {
			i = int64(v.(int32))
		} else {
			i = v.(int64)
		}
		if r.kind == "float" || r.kind == "double" {
			return promote(w, r, i)
		}
		return i, nil
	case "float":
		f := v.(float32)
		if r.kind == "double" {
			// Promoted: the double is the float's value exactly, float64(f)
			// (0x3DCCCCCD is 0.10000000149011612), as the README says.
			// Through the float's shortest text it would be another value
			// (0.1), the writer's float no longer.
			return float64(f), nil
		}
		// Read as a float: through the float's shortest decimal text, so
		// float32 0.1 reads as 0.1, not 0.10000000149011612, and reads back
		// as the same float. An integral float is its integer itself:
		// float32 2147483648's shortest text, 2.1474836e+09, is another
		// number to a reader of doubles (2147483600), while the integer
		// reads back as the same float and the same double.
		if d := float64(f); d == math.Trunc(d) && !math.IsInf(d, 0) {
			return d, nil
		}
		d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
		return d, nil
	case "double":
		return v, nil
	case "string":
		if r.kind == "bytes" {
			return []byte(v.(string)), nil
		}
		return v, nil
	case "bytes", "fixed":
		b := v.([]byte)
		if r.kind == "string" {
			if !utf8.Valid(b) {
				return nil, fmt.Errorf("%w: bytes read as string", ErrInvalidUTF8)
			}
			return string(b), nil
		}
		return b, nil
	case "enum":
		s := v.(string)
		for _, sym := range r.symbols {
			if sym == s {
				return s, nil
			}
		}
		if r.enumDefault != nil {
			return *r.enumDefault, nil
		}
		return nil, fmt.Errorf("%w: enum symbol %q is not in the reader's %s", ErrIncompatible, s, r.name)
	case "array":
		return convertItems(v.([]any), func(e any) (any, error) { return fromAvro(w.items, r.items, e) }, false)
	case "map":
		return convertValues(v.(map[string]any), func(e any) (any, error) { return fromAvro(w.values, r.values, e) }, false)
	case "record":
		in := v.(map[string]any)
		out := make(map[string]any, len(r.fields))
		for _, rf := range r.fields {
			wf := writerField(w, rf)
			if wf == nil {
				// Added in the reader: its default (writer fields absent
				// from the reader are dropped by not being looked at).
				if !rf.hasDef {
					return nil, fmt.Errorf("%w: field %q of %s is not written and has no default", ErrIncompatible, rf.name, r.name)
				}
				x, err := defaultValue(rf.typ, rf.def)
				if err != nil {
					return nil, fmt.Errorf("%w: default of %s.%s: %v", ErrIncompatible, r.name, rf.name, err)
				}
				out[rf.name] = x
				continue
			}
			x, err := fromAvro(wf.typ, rf.typ, in[wf.name])
			if err != nil {
				return nil, fieldErr(rf.name, err)
			}
			out[rf.name] = x
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: type %s", ErrSyntax, w.kind)
}

var nullType = &avroType{kind: "null"}

// promote reads integer i of writer type w (int or long) as reader type r
// (float or double), a promotion of the specification's schema
// resolution, only if r holds i exactly: long 9007199254740993 is no
// double, int 16777217 no float. Rounding it would change the value
// silently; the record is a dead letter instead, naming the field.
func promote(w, r *avroType, i int64) (any, error) {
	bits := 64
	if r.kind == "float" {
		bits = 32
	}
	f, err := intFloat(i, bits)
	if err != nil {
		return nil, valueErr("", fmt.Errorf("%s %d is not exactly a %s, the reader schema's type (it would be rounded)", w.kind, i, r.kind))
	}
	return f, nil
}

// fieldErr is err from the value of field name (or of "[3]", an array's
// element, or a map's key): a *ValueError gets name in front of its path
// (`field "a.b"`, `field "tags[3]"`), any other error "name: " in front
// of its text.
func fieldErr(name string, err error) error {
	if ve, ok := errors.AsType[*ValueError](err); ok {
		switch {
		case ve.Path == "":
			ve.Path = name
		case ve.Path[0] == '[':
			ve.Path = name + ve.Path
		default:
			ve.Path = name + "." + ve.Path
		}
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

func isValueErr(err error) bool {
	_, ok := errors.AsType[*ValueError](err)
	return ok
}

// convertItems returns conv of each element of in, or the first error;
// with name, the error names the element's index ("[3]: ...").
func convertItems(in []any, conv func(any) (any, error), name bool) ([]any, error) {
	out := make([]any, len(in))
	if err := convertAll(slices.All(in), conv, name, func(i int) string { return "[" + strconv.Itoa(i) + "]" }, func(i int, x any) { out[i] = x }); err != nil {
		return nil, err
	}
	return out, nil
}

// convertValues returns conv of each value of in, or the first error; with
// name, the error names the value's key ("key: ...").
func convertValues(in map[string]any, conv func(any) (any, error), name bool) (map[string]any, error) {
	out := make(map[string]any, len(in))
	if err := convertAll(maps.All(in), conv, name, func(k string) string { return k }, func(k string, x any) { out[k] = x }); err != nil {
		return nil, err
	}
	return out, nil
}

// convertAll calls set with conv of each element that all yields, and
// returns the first error, named by seg of its key with name. A
// *ValueError is named either way: its path says where the value is.
func convertAll[K any](all iter.Seq2[K, any], conv func(any) (any, error), name bool, seg func(K) string, set func(K, any)) error {
	for k, e := range all {
		x, err := conv(e)
		if err != nil {
			if name || isValueErr(err) {
				err = fieldErr(seg(k), err)
			}
			return err
		}
		set(k, x)
	}
	return nil
}

func writerField(w *avroType, rf *avroField) *avroField {
	for _, wf := range w.fields {
		if wf.name == rf.name {
			return wf
		}
	}
	for _, a := range rf.aliases {
		for _, wf := range w.fields {
			if wf.name == a {
				return wf
			}
		}
	}
	return nil
}

// matches reports whether data of writer type w can be read as r (not a
// union), with the promotions of the specification.
func matches(w, r *avroType) bool {
	switch r.kind {
	case "record", "enum", "fixed":
		return w.kind == r.kind && namesMatch(w, r) && (r.kind != "fixed" || w.size == r.size)
	case "long":
		return w.kind == "long" || w.kind == "int"
	case "float":
		return w.kind == "float" || w.kind == "int" || w.kind == "long"
	case "double":
		return w.kind == "double" || w.kind == "float" || w.kind == "int" || w.kind == "long"
	case "string":
		return w.kind == "string" || w.kind == "bytes"
	case "bytes":
		return w.kind == "bytes" || w.kind == "string"
	}
	return w.kind == r.kind
}

// defaultValue converts a field default, written in the schema as JSON, to
// the in-memory representation. A union's default is for its first branch.
func defaultValue(t *avroType, d any) (any, error) {
	n, err := defaultNative(t, d)
	if err != nil {
		return nil, err
	}
	return fromAvro(t, t, n)
}

// defaultNative converts a JSON default into the goavro native value.
func defaultNative(t *avroType, d any) (any, error) {
	switch t.kind {
	case "union":
		b := t.branches[0]
		if b.kind == "null" {
			return nil, nil
		}
		n, err := defaultNative(b, d)
		if err != nil {
			return nil, err
		}
		return map[string]any{b.unionName(): n}, nil
	case "bytes", "fixed":
		// Bytes defaults are strings whose code points 0-255 are the bytes.
		s, ok := d.(string)
		if !ok {
			return nil, fmt.Errorf("want a string")
		}
		b := make([]byte, 0, len(s))
		for _, c := range s {
			if c > 255 {
				return nil, fmt.Errorf("code point above 255")
			}
			b = append(b, byte(c))
		}
		return b, nil
	case "record":
		m, ok := d.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("want an object")
		}
		out := make(map[string]any, len(t.fields))
		for _, f := range t.fields {
			fd, ok := m[f.name]
			if !ok {
				if !f.hasDef {
					return nil, fmt.Errorf("field %q missing", f.name)
				}
				fd = f.def
			}
			x, err := defaultNative(f.typ, fd)
			if err != nil {
				return nil, err
			}
			out[f.name] = x
		}
		return out, nil
	case "array":
		a, ok := d.([]any)
		if !ok {
			return nil, fmt.Errorf("want an array")
		}
		return convertItems(a, func(e any) (any, error) { return defaultNative(t.items, e) }, false)
	case "map":
		m, ok := d.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("want an object")
		}
		return convertValues(m, func(e any) (any, error) { return defaultNative(t.values, e) }, false)
	}
	// Scalars: the JSON value goes through the encoder's rules.
	return toAvro(t, d)
}

// toAvro converts v, in the in-memory representation (or as decoded from
// JSON), into the goavro native value of type t. It never rounds or
// truncates: a value that does not fit is an error wrapping ErrUnsupported.
func toAvro(t *avroType, v any) (any, error) {
	if m, ok := v.(Materializer); ok {
		var err error
		if v, err = m.Materialize("", AsText); err != nil {
			return nil, err
		}
	}
	if t.logical != "" {
		return logicalToAvro(t, v)
	}
	switch t.kind {
	case "union":
		if v == nil {
			for _, b := range t.branches {
				if b.kind == "null" {
					return nil, nil
				}
			}
			return nil, fmt.Errorf("%w: null for a union without null", ErrUnsupported)
		}
		if isIntegerValue(v) {
			// A number's type follows its text: an integer goes to the
			// first integer branch it fits, before any float or double
			// (2147483648 into ["int","float","long"] is a long, not the
			// float 2147483648.0, whose type a later step would read).
			for _, b := range t.branches {
				if (b.kind == "int" || b.kind == "long") && b.logical == "" {
					if n, err := toAvro(b, v); err == nil {
						return map[string]any{b.unionName(): n}, nil
					}
				}
			}
		}
		var first, inexact error
		for _, b := range t.branches {
			if b.kind == "null" {
				continue
			}
			if b.kind == "float" && t.hasBranch("double") && !floatHoldsDouble(v) {
				// 16777217.0 fits a float only rounded (to 16777216):
				// the union's double holds it as read, so it goes there.
				continue
			}
			n, err := toAvro(b, v)
			if err == nil {
				return map[string]any{b.unionName(): n}, nil
			}
			if inexact == nil && isValueErr(err) {
				inexact = err
			}
			if first == nil {
				first = err
			}
		}
		if inexact != nil {
			// The value has no exact reading as a number (an integer
			// beyond int64): that, not a branch's type, is why it fits
			// none, in the words a transform would use.
			return nil, inexact
		}
		return nil, fmt.Errorf("%w: %s matches no branch of the union (first: %v)", ErrUnsupported, describe(v), first)
	case "null":
		if v != nil {
			return nil, mismatch(t, v)
		}
		return nil, nil
	case "boolean":
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case "int":
		i, err := integer(v)
		if err != nil {
			return nil, numberErr(t, v, err)
		}
		if i < math.MinInt32 || i > math.MaxInt32 {
			return nil, fmt.Errorf("%w: %d overflows int", ErrUnsupported, i)
		}
		return int32(i), nil
	case "long":
		i, err := integer(v)
		if err != nil {
			return nil, numberErr(t, v, err)
		}
		return i, nil
	case "float", "double":
		bits := 64
		if t.kind == "float" {
			bits = 32
		}
		f, err := float(v, bits)
		if err != nil {
			return nil, numberErr(t, v, err)
		}
		if bits == 32 {
			return float32(f), nil
		}
		return f, nil
	case "string":
		switch s := v.(type) {
		case string:
			if !utf8.ValidString(s) {
				return nil, fmt.Errorf("%w: string is not valid UTF-8", ErrUnsupported)
			}
			return s, nil
		case []byte:
			if utf8.Valid(s) {
				return string(s), nil
			}
		}
	case "bytes", "fixed":
		var b []byte
		switch s := v.(type) {
		case []byte:
			b = s
		case string:
			// JSON carries bytes as base64 (what encoding/json writes).
			d, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, fmt.Errorf("%w: string for %s is not base64", ErrUnsupported, t.unionName())
			}
			b = d
		default:
			return nil, mismatch(t, v)
		}
		if t.kind == "fixed" && len(b) != t.size {
			return nil, fmt.Errorf("%w: %d bytes for %s of size %d", ErrUnsupported, len(b), t.name, t.size)
		}
		return b, nil
	case "enum":
		if s, ok := v.(string); ok {
			for _, sym := range t.symbols {
				if sym == s {
					return s, nil
				}
			}
			return nil, fmt.Errorf("%w: %q is not a symbol of %s", ErrUnsupported, s, t.name)
		}
	case "array":
		if a, ok := v.([]any); ok {
			return convertItems(a, func(e any) (any, error) { return toAvro(t.items, e) }, true)
		}
	case "map":
		if m, ok := v.(map[string]any); ok {
			return convertValues(m, func(e any) (any, error) { return toAvro(t.values, e) }, true)
		}
	case "record":
		m, ok := v.(map[string]any)
		if !ok {
			break
		}
		out := make(map[string]any, len(t.fields))
		present := 0
		for _, f := range t.fields {
			e, ok := m[f.name]
			var x any
			var err error
			switch {
			case ok:
				present++
				x, err = toAvro(f.typ, e)
			case f.hasDef:
				x, err = defaultNative(f.typ, f.def)
			case nullable(f.typ):
				x = nil
			default:
				return nil, fmt.Errorf("%w: field %q of %s is missing and has no default", ErrUnsupported, f.name, t.name)
			}
			if err != nil {
				return nil, fieldErr(f.name, err)
			}
			out[f.name] = x
		}
		if len(m) > present {
			for k := range m {
				if _, ok := out[k]; !ok {
					// Never drop data silently: a transform can drop it.
					return nil, fmt.Errorf("%w: field %q is not in %s", ErrUnsupported, k, t.name)
				}
			}
		}
		return out, nil
	}
	return nil, mismatch(t, v)
}

func nullable(t *avroType) bool {
	if t.kind != "union" {
		return t.kind == "null"
	}
	for _, b := range t.branches {
		if b.kind == "null" {
			return true
		}
	}
	return false
}

func mismatch(t *avroType, v any) error {
	return fmt.Errorf("%w: %s for Avro %s", ErrUnsupported, describe(v), t.unionName())
}

func mismatchErr(t *avroType, v any, err error) error {
	return fmt.Errorf("%w: %s for Avro %s: %v", ErrUnsupported, describe(v), t.unionName(), err)
}

// numberErr is mismatchErr, but a *ValueError (a number that has no
// exact reading at all) as it is: the same words as when a transform
// reads the field.
func numberErr(t *avroType, v any, err error) error {
	if isValueErr(err) {
		return err
	}
	return mismatchErr(t, v, err)
}

// describe names the type of an in-memory value for messages, without the
// value itself (it may be personal data).
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case []byte:
		return "bytes"
	case bool:
		return "bool"
	case json.Number, int, int32, int64, uint64, float32, float64:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// integer accepts the integer shapes of the in-memory representation. A
// double is not an integer, even 2.0: a number's type follows its text
// (README, "Values"), and a transform converts with int().
// isIntegerValue reports whether v is an integer by its type or, for a
// JSON number, by its text (no ".", "e" or "E").
func isIntegerValue(v any) bool {
	switch n := v.(type) {
	case int64, int, int32, uint64:
		return true
	case json.Number:
		return !IsDoubleText(string(n))
	}
	return false
}

func integer(v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	case int32:
		return int64(n), nil
	case uint64:
		if n > math.MaxInt64 {
			return 0, fmt.Errorf("overflows long")
		}
		return int64(n), nil
	case float64, float32:
		return 0, fmt.Errorf("a double is not an integer (convert it with int() in a transform)")
	case json.Number:
		if IsDoubleText(string(n)) {
			return 0, fmt.Errorf("%s is a double by its text, not an integer", truncateText(string(n)))
		}
		return int64Text(string(n))
	}
	return 0, fmt.Errorf("not a number")
}

// float converts a number to a float of size bits (32 or 64). Decimal
// text becomes the nearest float, but an overflow or an underflow to zero
// is an error; an integer must convert exactly (9007199254740993 is no
// double).
func float(v any, bits int) (float64, error) {
	switch n := v.(type) {
	case float64:
		return narrow(n, bits)
	case float32:
		return float64(n), nil
	case int64:
		return intFloat(n, bits)
	case int:
		return intFloat(int64(n), bits)
	case int32:
		return intFloat(int64(n), bits)
	case uint64:
		return exactFloat(strconv.FormatUint(n, 10), bits)
	case json.Number:
		if IsDoubleText(string(n)) {
			// Double text with no exact reading as a double (1e400,
			// 2e-324) has none in any branch: a *ValueError, the reason a
			// union names (README, union), in a transform's words. Text
			// that is a double but no float is only a type mismatch.
			f, err := parseFloat(string(n), 64)
			if err != nil {
				return 0, valueErr("", err)
			}
			if bits == 32 {
				return parseFloat(string(n), 32)
			}
			return f, nil
		}
		// Integer text is read as an int64 first, as everywhere (README,
		// "Values"): 2^63 is refused here too, though a double holds it.
		i, err := int64Text(string(n))
		if err != nil {
			return 0, err
		}
		return intFloat(i, bits)
	}
	return 0, fmt.Errorf("not a number")
}

// int64Text reads integer text as an int64; text beyond int64 is a
// *ValueError, worded as ParseNumber words it.
func int64Text(text string) (int64, error) {
	i, err := ParseNumber(text, "")
	if err != nil {
		return 0, err
	}
	return i.(int64), nil
}

// intFloat converts i to a float of size bits if it is exact there.
func intFloat(i int64, bits int) (float64, error) {
	limit := int64(1) << 53
	if bits == 32 {
		limit = 1 << 24
	}
	if -limit <= i && i <= limit {
		return float64(i), nil // every integer this small is exact
	}
	return exactFloat(strconv.FormatInt(i, 10), bits)
}

// narrow checks that the double f fits a float of size bits: a float
// takes the nearest value, but not ±Inf or zero for a finite nonzero f.
func narrow(f float64, bits int) (float64, error) {
	if bits == 64 || math.IsNaN(f) || math.IsInf(f, 0) {
		return f, nil
	}
	f32 := float32(f)
	switch {
	case math.IsInf(float64(f32), 0):
		return 0, fmt.Errorf("%v is beyond the range of a float", f)
	case f32 == 0 && f != 0:
		return 0, fmt.Errorf("%v underflows to zero as a float", f)
	}
	return float64(f32), nil
}

// hasBranch reports whether union t has a branch of kind.
func (t *avroType) hasBranch(kind string) bool {
	for _, b := range t.branches {
		if b.kind == kind {
			return true
		}
	}
	return false
}

// floatHoldsDouble reports whether the number v, read as a double, is
// held by a float as it is (true for what is no number: the float branch
// then says why it does not fit).
func floatHoldsDouble(v any) bool {
	f, err := float(v, 64)
	return err != nil || float64(float32(f)) == f
}
