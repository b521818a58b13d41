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
	"strings"
	"unicode/utf8"
)

// fromAvro converts v, a goavro native value of writer type w, into the
// in-memory representation of reader type r, resolving w against r as the
// Avro specification's "Schema Resolution" says. Without a reader schema r
// is w. Errors wrap ErrIncompatible or ErrSyntax.
func fromAvro(w, r *avroType, v any) (any, error) {
	if w.kind == kindUnion {
		return fromAvroUnion(w, r, v)
	}
	if r.kind == kindUnion {
		return fromAvroIntoUnion(w, r, v)
	}
	if !matches(w, r) {
		return nil, fmt.Errorf("%w: writer type %s cannot be read as %s", ErrIncompatible, w.unionName(), r.unionName())
	}
	if r.logical != logicalNone {
		return fromAvroLogical(w, r, v)
	}
	return fromAvroKind(w, r, v)
}

// fromAvroKind is fromAvro of a writer type that is no union into a
// reader type that matches it and has no logical type.
func fromAvroKind(w, r *avroType, v any) (any, error) {
	switch w.kind {
	case kindNull:
		return nil, nil
	case kindBoolean, kindDouble:
		return v, nil
	case kindInt:
		return fromAvroInteger(r, int64(v.(int32)), w)
	case kindLong:
		return fromAvroInteger(r, v.(int64), w)
	case kindFloat:
		return fromAvroFloat(r, v.(float32)), nil
	case kindString:
		if r.kind == kindBytes {
			return []byte(v.(string)), nil
		}
		return v, nil
	case kindBytes, kindFixed:
		return fromAvroBytes(r, v.([]byte))
	case kindEnum:
		return fromAvroEnum(r, v.(string))
	case kindArray:
		return convertItems(v.([]any), func(e any) (any, error) { return fromAvro(w.items, r.items, e) }, false)
	case kindMap:
		return convertValues(v.(map[string]any), func(e any) (any, error) { return fromAvro(w.values, r.values, e) }, false)
	case kindRecord:
		return fromAvroRecord(w, r, v.(map[string]any))
	}
	return nil, fmt.Errorf("%w: type %s", ErrSyntax, w.kind)
}

// fromAvroUnion reads v, a value of writer union w, as its branch.
func fromAvroUnion(w, r *avroType, v any) (any, error) {
	if v == nil {
		return fromAvro(nullType, r, nil)
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, fmt.Errorf("%w: union value %T", ErrSyntax, v)
	}
	var name string
	var inner any
	for name, inner = range m {
	}
	for _, b := range w.branches {
		if b.unionName() == name {
			return fromAvro(b, r, inner)
		}
	}
	return nil, fmt.Errorf("%w: union has no branch %q", ErrSyntax, name)
}

// fromAvroIntoUnion reads v, of writer type w (not a union), as a branch
// of reader union r.
func fromAvroIntoUnion(w, r *avroType, v any) (any, error) {
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

// fromAvroLogical reads v, of writer type w, as r, which has a logical
// type.
func fromAvroLogical(w, r *avroType, v any) (any, error) {
	// The specification resolves the physical types and leaves logical
	// types to the reader, so a writer's timestamp-millis read as
	// timestamp-micros (or a date as timestamp-millis) would be the same
	// number in another unit: another instant, silently. Two logical types
	// that differ are incompatible instead; a writer's plain number read
	// as a logical type is the reader's to interpret, as the specification
	// says.
	if w.logical != logicalNone && w.logical != r.logical {
		return nil, fmt.Errorf("%w: writer type %s (%s) cannot be read as %s (%s): the same number would be another value",
			ErrIncompatible, w.logical, w.kind, r.logical, r.kind)
	}
	switch {
	case r.logical == logicalDecimal && (w.logical != logicalDecimal || w.scale != r.scale):
		return nil, fmt.Errorf("%w: writer decimal scale %d, reader scale %d", ErrIncompatible, w.scale, r.scale)
	case r.kind == w.kind:
		return logicalFromAvro(r, v)
	case w.kind == kindInt && r.kind == kindLong:
		// Promoted, then the reader's logical type.
		return logicalFromAvro(r, int64(v.(int32)))
	}
	return nil, fmt.Errorf("%w: writer type %s cannot be read as %s (%s)", ErrIncompatible, w.unionName(), r.logical, r.kind)
}

// fromAvroInteger reads i, of writer type w (int or long), as r.
func fromAvroInteger(r *avroType, i int64, w *avroType) (any, error) {
	if r.kind == kindFloat || r.kind == kindDouble {
		return promote(w, r, i)
	}
	return i, nil
}

// fromAvroFloat reads float f as r (float or double).
func fromAvroFloat(r *avroType, f float32) any {
	if r.kind == kindDouble {
		// Promoted: the double is the float's value exactly, float64(f)
		// (0x3DCCCCCD is 0.10000000149011612), as values.md says.
		// Through the float's shortest text it would be another value
		// (0.1), the writer's float no longer.
		return float64(f)
	}
	// Read as a float: through the float's shortest decimal text, so
	// float32 0.1 reads as 0.1, not 0.10000000149011612, and reads back
	// as the same float. An integral float is its integer itself:
	// float32 2147483648's shortest text, 2.1474836e+09, is another
	// number to a reader of doubles (2147483600), while the integer
	// reads back as the same float and the same double.
	if d := float64(f); d == math.Trunc(d) && !math.IsInf(d, 0) {
		return d
	}
	d, _ := strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	return d
}

// fromAvroBytes reads b, bytes or a fixed, as r (bytes, fixed or string).
func fromAvroBytes(r *avroType, b []byte) (any, error) {
	if r.kind == kindString {
		if !utf8.Valid(b) {
			return nil, fmt.Errorf("%w: bytes read as string", ErrInvalidUTF8)
		}
		return string(b), nil
	}
	return b, nil
}

// fromAvroEnum reads symbol s as a symbol of r, or r's default.
func fromAvroEnum(r *avroType, s string) (any, error) {
	if slices.Contains(r.symbols, s) {
		return s, nil
	}
	if r.enumDefault != nil {
		return *r.enumDefault, nil
	}
	return nil, fmt.Errorf("%w: enum symbol %q is not in the reader's %s", ErrIncompatible, s, r.name)
}

// fromAvroRecord reads record in, of writer type w, as r: by field name
// or alias, with r's defaults for the fields w does not have.
func fromAvroRecord(w, r *avroType, in map[string]any) (any, error) {
	out := make(map[string]any, len(r.fields))
	for _, rf := range r.fields {
		wf := writerField(w, rf)
		if wf == nil {
			// Added in the reader: its default (writer fields absent
			// from the reader are dropped by not being looked at).
			x, err := readerDefault(r, rf)
			if err != nil {
				return nil, err
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

// readerDefault is the value of field rf of reader record r that the
// writer does not have: its default.
func readerDefault(r *avroType, rf *avroField) (any, error) {
	if !rf.hasDef {
		return nil, fmt.Errorf("%w: field %q of %s is not written and has no default", ErrIncompatible, rf.name, r.name)
	}
	x, err := defaultValue(rf.typ, rf.def)
	if err != nil {
		return nil, fmt.Errorf("%w: default of %s.%s: %v", ErrIncompatible, r.name, rf.name, err)
	}
	return x, nil
}

var nullType = &avroType{kind: kindNull}

// promote reads integer i of writer type w (int or long) as reader type r
// (float or double), a promotion of the specification's schema
// resolution, only if r holds i exactly: long 9007199254740993 is no
// double, int 16777217 no float. Rounding it would change the value
// silently; the record is a dead letter instead, naming the field.
func promote(w, r *avroType, i int64) (any, error) {
	bits := 64
	if r.kind == kindFloat {
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
	case kindRecord, kindEnum:
		return w.kind == r.kind && namesMatch(w, r)
	case kindFixed:
		return w.kind == r.kind && namesMatch(w, r) && w.size == r.size
	}
	return w.kind == r.kind || promotedFrom[r.kind]&(1<<w.kind) != 0
}

// promotedFrom holds, for each reader kind, the set (by bit) of the other
// writer kinds the specification promotes to it.
var promotedFrom = [kindFixed + 1]uint16{
	kindLong:   1 << kindInt,
	kindFloat:  1<<kindInt | 1<<kindLong,
	kindDouble: 1<<kindInt | 1<<kindLong | 1<<kindFloat,
	kindString: 1 << kindBytes,
	kindBytes:  1 << kindString,
}

// defaultValue converts a field default, written in the schema as JSON, to
// the in-memory representation.
func defaultValue(t *avroType, d any) (any, error) {
	n, err := defaultNative(t, d)
	if err != nil {
		return nil, err
	}
	return fromAvro(t, t, n)
}

// defaultNative converts a JSON default into the goavro native value, as
// the specification reads it ("Complex Types / Records", the table of
// default values): a union's default is of its first branch; bytes and
// fixed are a string of code points 0-255; a logical type's default is
// its underlying type's. An error names where in the default it is
// ("[2]: ...", "key: ...").
func defaultNative(t *avroType, d any) (any, error) {
	return defaultAt(t, d, nil)
}

// defaultAt is defaultNative inside the fields' own defaults in, which
// a record's default that leaves them out takes.
func defaultAt(t *avroType, d any, in []*avroField) (any, error) {
	switch t.kind {
	case kindUnion:
		return defaultUnion(t, d, in)
	case kindBytes, kindFixed:
		return defaultBytes(t, d)
	case kindRecord:
		return defaultRecord(t, d, in)
	case kindArray:
		a, ok := d.([]any)
		if !ok {
			return nil, fmt.Errorf("an array default is a JSON array, not %s %s", article(jsonKind(d)), jsonKind(d))
		}
		return convertItems(a, func(e any) (any, error) { return defaultAt(t.items, e, in) }, true)
	case kindMap:
		m, ok := d.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a map default is a JSON object, not %s %s", article(jsonKind(d)), jsonKind(d))
		}
		return convertValues(m, func(e any) (any, error) { return defaultAt(t.values, e, in) }, true)
	}
	return defaultScalar(t, d)
}

// defaultJSON is the JSON a default of each scalar kind is written as (the
// specification's table of default values).
var defaultJSON = map[avroKind]string{
	kindNull: "null", kindBoolean: "boolean", kindInt: "integer", kindLong: "integer",
	kindFloat: "number", kindDouble: "number", kindString: "string", kindEnum: "string",
}

// defaultScalar converts the default of scalar t: JSON of the kind the
// specification's table gives, then the encoder's rules for the underlying
// type (a timestamp-millis default is a long, not text; an int's must fit).
func defaultScalar(t *avroType, d any) (any, error) {
	want := defaultJSON[t.kind]
	got := jsonKind(d)
	if want != got && (want != "number" || got != "integer") {
		return nil, fmt.Errorf("%s %s default is a JSON %s, not %s %s", article(t.kind.String()), t.kind, want, article(got), got)
	}
	return toAvroKind(t, d)
}

// jsonKind names the JSON kind of d, decoded with UseNumber.
func jsonKind(d any) string {
	switch n := d.(type) {
	case json.Number:
		if IsDoubleText(string(n)) {
			return "number"
		}
		return "integer"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return describe(d)
}

func article(word string) string {
	if strings.IndexByte("aeiou", word[0]) >= 0 {
		return "an"
	}
	return "a"
}

// defaultUnion converts the default of union t, a value of its first
// branch.
func defaultUnion(t *avroType, d any, in []*avroField) (any, error) {
	b := t.branches[0]
	if b.kind == kindNull {
		if d != nil {
			return nil, fmt.Errorf("a union's default is of its first branch, null, not %s %s", article(jsonKind(d)), jsonKind(d))
		}
		return nil, nil
	}
	n, err := defaultAt(b, d, in)
	if err != nil {
		return nil, fmt.Errorf("a union's default is of its first branch, %s: %w", b.unionName(), err)
	}
	return map[string]any{b.unionName(): n}, nil
}

// defaultBytes converts the default of t, bytes or a fixed: a string whose
// code points 0-255 are the bytes ("\u00ff" is the byte 0xff, not its
// UTF-8 encoding), one byte each, as many as a fixed's size.
func defaultBytes(t *avroType, d any) (any, error) {
	s, ok := d.(string)
	if !ok {
		return nil, fmt.Errorf("a %s default is a JSON string of code points 0-255, not %s %s", t.kind, article(jsonKind(d)), jsonKind(d))
	}
	b := make([]byte, 0, len(s))
	for i, c := range []rune(s) {
		if c > 255 {
			return nil, fmt.Errorf("code point %U at index %d is above 255: a %s default is a string of code points 0-255, one per byte", c, i, t.kind)
		}
		b = append(b, byte(c))
	}
	if t.kind == kindFixed && len(b) != t.size {
		return nil, fmt.Errorf("%d bytes for %s of size %d", len(b), t.name, t.size)
	}
	return b, nil
}

// defaultRecord converts the default of record t: an object, with the
// fields' own defaults for the fields it leaves out. A field's own
// default that leaves out that field again ({"name":"next","type":"R",
// "default":{}}) has no end: an error.
func defaultRecord(t *avroType, d any, in []*avroField) (any, error) {
	m, ok := d.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("a record default is a JSON object, not %s %s", article(jsonKind(d)), jsonKind(d))
	}
	out := make(map[string]any, len(t.fields))
	for _, f := range t.fields {
		fd, ok := m[f.name]
		fin := in
		if !ok {
			if !f.hasDef {
				return nil, fmt.Errorf("field %q missing", f.name)
			}
			if slices.Contains(in, f) {
				return nil, fmt.Errorf("field %q of %s is left out of its own default, which never ends", f.name, t.name)
			}
			fd, fin = f.def, append(in[:len(in):len(in)], f)
		}
		x, err := defaultAt(f.typ, fd, fin)
		if err != nil {
			return nil, fieldErr(f.name, err)
		}
		out[f.name] = x
	}
	return out, nil
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
	if t.logical != logicalNone {
		return logicalToAvro(t, v)
	}
	return toAvroKind(t, v)
}

// toAvroKind is toAvro of a type without a logical type.
func toAvroKind(t *avroType, v any) (any, error) {
	switch t.kind {
	case kindUnion:
		return toAvroUnion(t, v)
	case kindNull:
		return toAvroNull(t, v)
	case kindBoolean:
		return toAvroBoolean(t, v)
	case kindInt:
		return toAvroInt(t, v)
	case kindLong:
		return toAvroLong(t, v)
	case kindFloat, kindDouble:
		return toAvroFloat(t, v)
	case kindString:
		return toAvroString(t, v)
	case kindBytes, kindFixed:
		return toAvroBytes(t, v)
	case kindEnum:
		return toAvroEnum(t, v)
	case kindArray:
		return toAvroArray(t, v)
	case kindMap:
		return toAvroMap(t, v)
	case kindRecord:
		return toAvroRecord(t, v)
	}
	return nil, mismatch(t, v)
}

// toAvroUnion converts v into a branch of union t: null into its null
// branch, an integer into its first integer branch that holds it, any
// other value into the first branch that holds it.
func toAvroUnion(t *avroType, v any) (any, error) {
	if v == nil {
		if t.hasBranch(kindNull) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: null for a union without null", ErrUnsupported)
	}
	if n, ok := toAvroIntegerBranch(t, v); ok {
		return n, nil
	}
	var first, inexact error
	for _, b := range t.branches {
		if b.kind == kindNull {
			continue
		}
		if b.kind == kindFloat && t.hasBranch(kindDouble) && !floatHoldsDouble(v) {
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
}

// toAvroIntegerBranch converts v, if it is an integer, into the first
// int or long branch of union t that holds it; false if none does.
func toAvroIntegerBranch(t *avroType, v any) (any, bool) {
	if !isIntegerValue(v) {
		return nil, false
	}
	// A number's type follows its text: an integer goes to the
	// first integer branch it fits, before any float or double
	// (2147483648 into ["int","float","long"] is a long, not the
	// float 2147483648.0, whose type a later step would read).
	for _, b := range t.branches {
		if (b.kind == kindInt || b.kind == kindLong) && b.logical == logicalNone {
			if n, err := toAvro(b, v); err == nil {
				return map[string]any{b.unionName(): n}, true
			}
		}
	}
	return nil, false
}

func toAvroNull(t *avroType, v any) (any, error) {
	if v != nil {
		return nil, mismatch(t, v)
	}
	return nil, nil
}

func toAvroBoolean(t *avroType, v any) (any, error) {
	if b, ok := v.(bool); ok {
		return b, nil
	}
	return nil, mismatch(t, v)
}

func toAvroInt(t *avroType, v any) (any, error) {
	i, err := integer(v)
	if err != nil {
		return nil, numberErr(t, v, err)
	}
	if i < math.MinInt32 || i > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d overflows int", ErrUnsupported, i)
	}
	return int32(i), nil
}

func toAvroLong(t *avroType, v any) (any, error) {
	i, err := integer(v)
	if err != nil {
		return nil, numberErr(t, v, err)
	}
	return i, nil
}

// toAvroFloat converts number v into float or double t, exactly where
// v is an integer.
func toAvroFloat(t *avroType, v any) (any, error) {
	bits := 64
	if t.kind == kindFloat {
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
}

// toAvroString converts v, a string or bytes, into a string of valid
// UTF-8.
func toAvroString(t *avroType, v any) (any, error) {
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
	return nil, mismatch(t, v)
}

// toAvroBytes converts v, bytes or their base64 text, into bytes or a
// fixed t of its size.
func toAvroBytes(t *avroType, v any) (any, error) {
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
	if t.kind == kindFixed && len(b) != t.size {
		return nil, fmt.Errorf("%w: %d bytes for %s of size %d", ErrUnsupported, len(b), t.name, t.size)
	}
	return b, nil
}

func toAvroEnum(t *avroType, v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, mismatch(t, v)
	}
	if slices.Contains(t.symbols, s) {
		return s, nil
	}
	return nil, fmt.Errorf("%w: %q is not a symbol of %s", ErrUnsupported, s, t.name)
}

// toAvroArray converts each element of array v into t's items; an error
// names the element's index.
func toAvroArray(t *avroType, v any) (any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, mismatch(t, v)
	}
	return convertItems(a, func(e any) (any, error) { return toAvro(t.items, e) }, true)
}

// toAvroMap converts each value of object v into t's values; an error
// names the value's key.
func toAvroMap(t *avroType, v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, mismatch(t, v)
	}
	return convertValues(m, func(e any) (any, error) { return toAvro(t.values, e) }, true)
}

// toAvroRecord converts object v into record t: each field from v, or
// its default, or null; a key of v that t has no field for is an error.
func toAvroRecord(t *avroType, v any) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, mismatch(t, v)
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
		// Never drop data silently: a transform can drop it.
		return nil, unknownFields(m, out, t.name)
	}
	return out, nil
}

// unknownFields names the fields of m that record name does not have (out
// holds the ones it has), in sorted order: the same record gets the same
// dead letter on every run, whatever the map's order.
func unknownFields(m, out map[string]any, name string) error {
	var extra []string
	for k := range m {
		if _, ok := out[k]; !ok {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	if len(extra) == 1 {
		return fmt.Errorf("%w: field %q is not in %s", ErrUnsupported, extra[0], name)
	}
	quoted := make([]string, len(extra))
	for i, k := range extra {
		quoted[i] = strconv.Quote(k)
	}
	return fmt.Errorf("%w: fields %s are not in %s", ErrUnsupported, strings.Join(quoted, ", "), name)
}

func nullable(t *avroType) bool {
	if t.kind != kindUnion {
		return t.kind == kindNull
	}
	return t.hasBranch(kindNull)
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
// (values.md, rule 2), and a transform converts with int().
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
			// union names (values.md, conversion rules: union), in a transform's words. Text
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
		// Integer text is read as an int64 first, as everywhere (values.md,
		// rule 2): 2^63 is refused here too, though a double holds it.
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
func (t *avroType) hasBranch(kind avroKind) bool {
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
