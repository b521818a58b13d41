package transform

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"cel.dev/cel-go/common/types"

	"github.com/exactly-io/exactly/serde"
)

// A record's value moves through the steps without being decoded whole.
// A JSON object is an *object: its input bytes, an index of its members
// made on first use, and the edits the steps made. Steps read only the
// fields their expressions name (see cel.go), and the output splices the
// edited fields into the input bytes: an untouched field keeps its bytes
// and its place, a new field goes at the end, and an object no step
// changed is written as it came.
//
// Inside an object, and for a record whose value is not an object, a value
// is one of:
//   - rawJSON: the bytes of a JSON value as it came (checked by
//     serde.CheckJSON with its record);
//   - *object;
//   - a native value: nil, bool, int64, uint64, float64, string, []byte,
//     []any or map[string]any, as a CEL expression or a Go transform
//     returned it, or a codec other than JSON decoded it. Natives stored
//     in an object are never changed in place: a step that edits inside
//     one replaces it with an *object first.

// rawJSON is a JSON value kept as the bytes it came in.
type rawJSON []byte

// AppendJSON implements serde.JSONAppender: the bytes as they came.
func (r rawJSON) AppendJSON(b []byte, _ string) ([]byte, error) { return append(b, r...), nil }

// Materialize implements serde.Materializer.
func (r rawJSON) Materialize(path string, nums serde.Numbers) (any, error) {
	return serde.DecodeValue(r, path, nums)
}

// object is a JSON object under edit.
type object struct {
	raw     []byte // "{...}" as it came; nil for an object a step built
	path    string // where the object is in its record, for messages
	indexed bool
	dupKeys bool           // the index failed: raw has duplicate keys
	members []serde.Member // of raw, in order, once indexed
	edits   []edit         // in the order of their first change
	buf     [8]serde.Member
	ebuf    [4]edit
}

// edit is a field that a step set or deleted.
type edit struct {
	key     string
	val     any // rawJSON, *object or a native value
	deleted bool
}

func newObject(raw []byte, path string) *object { return &object{raw: raw, path: path} }

// fromNative returns an object holding the fields of m, in key order.
func fromNative(m map[string]any, path string) *object {
	o := &object{path: path, edits: make([]edit, 0, len(m))}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		o.edits = append(o.edits, edit{key: k, val: m[k]})
	}
	return o
}

// index indexes o's members once. Every read or edit of a member of an
// object comes here first, so that an object with duplicate keys fails
// whatever reads it (serde.AppendMembers), and one that nothing reads is
// copied as it came.
func (o *object) index() error {
	switch {
	case !o.indexed:
		o.indexed = true
		if o.raw == nil {
			return nil
		}
		var err error
		o.members, err = serde.AppendMembers(o.buf[:0], o.raw, o.path)
		o.dupKeys = err != nil
		return err
	case o.dupKeys:
		// The error again, made anew: a field for it would take every
		// object past its 512-byte size class, for a record that is
		// about to be dead-lettered.
		_, err := serde.AppendMembers(nil, o.raw, o.path)
		return err
	}
	return nil
}

// changed reports whether any step edited o.
func (o *object) changed() bool { return o.raw == nil || len(o.edits) > 0 }

// member returns the raw value of the member of raw named name.
func (o *object) member(name string) ([]byte, bool, error) {
	if o.raw == nil {
		return nil, false, nil
	}
	if err := o.index(); err != nil {
		return nil, false, err
	}
	for _, m := range o.members {
		if keyLenCould(m, name) && serde.KeyIs(m.Key(o.raw), name) {
			return m.Value(o.raw), true, nil
		}
	}
	return nil, false, nil
}

// keyLenCould is a cheap test that the raw key of m may be name: a key
// is at least as long as name with its quotes (escapes make it longer).
func keyLenCould(m serde.Member, name string) bool { return m.KeyEnd-m.KeyStart >= len(name)+2 }

func (o *object) editOf(name string) *edit {
	for i := range o.edits {
		if o.edits[i].key == name {
			return &o.edits[i]
		}
	}
	return nil
}

// find returns the field name of o: raw bytes when it is as it came, else
// its edit's value. The error is the index's (duplicate keys).
func (o *object) find(name string) (raw []byte, v any, found bool, err error) {
	if err := o.index(); err != nil {
		return nil, nil, false, err
	}
	if e := o.editOf(name); e != nil {
		if e.deleted {
			return nil, nil, false, nil
		}
		return nil, e.val, true, nil
	}
	raw, found, err = o.member(name)
	return raw, nil, found, err
}

// lookup returns the field name of o as one value.
func (o *object) lookup(name string) (any, bool, error) {
	raw, v, found, err := o.find(name)
	if raw != nil {
		return rawJSON(raw), true, nil
	}
	return v, found, err
}

// put sets the field name of o. Setting a member is a read of the object:
// it fails for an object with duplicate keys.
func (o *object) put(name string, v any) error {
	if err := o.index(); err != nil {
		return err
	}
	if e := o.editOf(name); e != nil {
		e.val, e.deleted = v, false
		return nil
	}
	if o.edits == nil {
		o.edits = o.ebuf[:0]
	}
	o.edits = append(o.edits, edit{key: name, val: v})
	return nil
}

func (o *object) remove(name string) (bool, error) {
	if _, _, found, err := o.find(name); !found || err != nil {
		return false, err
	}
	if e := o.editOf(name); e != nil {
		e.val, e.deleted = nil, true
		return true, nil
	}
	if o.edits == nil {
		o.edits = o.ebuf[:0]
	}
	o.edits = append(o.edits, edit{key: name, deleted: true})
	return true, nil
}

// child returns the object at field name of o for a change inside it:
// an object field becomes an edit holding an *object, and a missing or
// null field a new empty object. path is the full path, for messages.
func (o *object) child(name string, path []string, depth int) (*object, error) {
	v, _, err := o.lookup(name)
	if err != nil {
		return nil, err
	}
	var c *object
	switch x := v.(type) {
	case *object:
		return x, nil
	case rawJSON:
		switch x[0] {
		case '{':
			c = newObject(x, serde.JoinPath(o.path, name))
		case 'n':
			c = &object{path: serde.JoinPath(o.path, name)}
		}
	case map[string]any:
		c = fromNative(x, serde.JoinPath(o.path, name))
	case nil, types.Null:
		c = &object{path: serde.JoinPath(o.path, name)}
	}
	if c == nil {
		return nil, fmt.Errorf("cannot set %s: %s is not an object", strings.Join(path, "."), strings.Join(path[:depth+1], "."))
	}
	if err := o.put(name, c); err != nil {
		return nil, err
	}
	return c, nil
}

// asObject returns *v as an object that steps can edit, converting a
// native map or raw JSON object in place; ok is false for any other value.
func asObject(v *any) (*object, bool) {
	switch x := (*v).(type) {
	case *object:
		return x, true
	case rawJSON:
		if x[0] == '{' {
			o := newObject(x, "")
			*v = o
			return o, true
		}
	case map[string]any:
		o := fromNative(x, "")
		*v = o
		return o, true
	}
	return nil, false
}

// setPath sets the value at path in *v, creating missing objects on the way.
func setPath(v *any, path []string, val any) error {
	o, ok := asObject(v)
	if !ok {
		return fmt.Errorf("cannot set %s: the value is not an object", strings.Join(path, "."))
	}
	for i, p := range path[:len(path)-1] {
		var err error
		if o, err = o.child(p, path, i); err != nil {
			return err
		}
	}
	return o.put(path[len(path)-1], val)
}

// getPath returns the value at path in v. The error is that of an object
// on the way that has duplicate keys.
func getPath(v any, path []string) (any, bool, error) {
	at := ""
	for _, p := range path {
		switch x := v.(type) {
		case *object:
			raw, f, found, err := x.find(p)
			switch {
			case err != nil:
				return nil, false, err
			case !found:
				return nil, false, nil
			case raw != nil:
				v = rawJSON(raw)
			default:
				v = f
			}
		case rawJSON:
			if x[0] != '{' {
				return nil, false, nil
			}
			var ok bool
			var err error
			if v, ok, err = newObject(x, at).lookup(p); !ok || err != nil {
				return nil, false, err
			}
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				return nil, false, nil
			}
		default:
			return nil, false, nil
		}
		at = serde.JoinPath(at, p)
	}
	return v, true, nil
}

// deletePath removes the value at path from *v and reports whether there
// was one. The error is that of an object on the way that has duplicate
// keys.
func deletePath(v *any, path []string) (bool, error) {
	if len(path) == 1 {
		o, ok := asObject(v)
		if !ok {
			return false, nil
		}
		return o.remove(path[0])
	}
	if _, found, err := getPath(*v, path); !found || err != nil {
		return false, err
	}
	o, _ := asObject(v)
	for i, p := range path[:len(path)-1] {
		var err error
		if o, err = o.child(p, path, i); err != nil {
			return false, err
		}
	}
	return o.remove(path[len(path)-1])
}

// snapshot returns a value equal to o now that later edits of o do not
// change: its raw bytes if it has no edits, else a deep copy.
func (o *object) snapshot() any {
	if !o.changed() {
		return rawJSON(o.raw)
	}
	return o.clone()
}

func (o *object) clone() *object {
	c := &object{raw: o.raw, path: o.path, edits: make([]edit, len(o.edits))}
	copy(c.edits, o.edits)
	for i, e := range c.edits {
		if x, ok := e.val.(*object); ok {
			c.edits[i].val = x.clone()
		}
	}
	return c
}

// AppendJSON implements serde.JSONAppender: o's input bytes, with each
// edited member's value replaced in place, deleted members removed with
// their separator, and new members appended at the end.
func (o *object) AppendJSON(b []byte, path string) ([]byte, error) {
	if !o.changed() {
		return append(b, o.raw...), nil
	}
	b = slices.Grow(b, len(o.raw)+16*len(o.edits))
	if err := o.index(); err != nil {
		return nil, err
	}
	var planBuf [32]int
	var placedBuf [8]bool
	plan, placed := o.plan(planBuf[:0], placedBuf[:0])
	if len(o.members) == 0 {
		b = append(b, '{')
	} else {
		b = append(b, o.raw[:o.members[0].KeyStart]...)
	}
	var err error
	emitted := 0
	for i, m := range o.members {
		if plan[i] == -2 {
			continue
		}
		if emitted > 0 {
			b = append(b, o.raw[o.members[i-1].ValueEnd:m.KeyStart]...)
		}
		if plan[i] == -1 {
			b = append(b, o.raw[m.KeyStart:m.ValueEnd]...)
		} else {
			e := &o.edits[plan[i]]
			b = append(b, o.raw[m.KeyStart:m.ValueStart]...)
			if b, err = appendValue(b, e.val, path, e.key); err != nil {
				return nil, err
			}
		}
		emitted++
	}
	if b, err = o.appendNew(b, path, placed, emitted); err != nil {
		return nil, err
	}
	switch {
	case o.raw == nil:
		return append(b, '}'), nil
	case len(o.members) == 0:
		return append(b, o.raw[1:]...), nil // the whitespace and '}'
	}
	return append(b, o.raw[o.members[len(o.members)-1].ValueEnd:]...), nil
}

// plan says what becomes of each member of o (whose keys are unique, as
// index checked): plan[i] is -1 when member i is kept as it is, -2 when it
// is deleted, else the index of the edit whose value replaces it.
// placed[e] is whether edit e has a member; the others are new fields.
func (o *object) plan(plan []int, placed []bool) ([]int, []bool) {
	for range o.members {
		plan = append(plan, -1)
	}
	for ei := range o.edits {
		e := &o.edits[ei]
		placed = append(placed, false)
		for mi, m := range o.members {
			if !keyLenCould(m, e.key) || !serde.KeyIs(m.Key(o.raw), e.key) {
				continue
			}
			placed[ei] = true
			if e.deleted {
				plan[mi] = -2
			} else {
				plan[mi] = ei
			}
			break
		}
	}
	return plan, placed
}

// appendNew appends the fields that steps added to o (those not placed),
// after emitted members.
func (o *object) appendNew(b []byte, path string, placed []bool, emitted int) ([]byte, error) {
	var err error
	for i := range o.edits {
		e := &o.edits[i]
		if e.deleted || placed[i] {
			continue
		}
		if emitted > 0 {
			b = append(b, ',')
		}
		if b, err = serde.AppendString(b, e.key, serde.JoinPath(path, e.key)); err != nil {
			return nil, err
		}
		b = append(b, ':')
		if b, err = appendValue(b, e.val, path, e.key); err != nil {
			return nil, err
		}
		emitted++
	}
	return b, nil
}

func appendValue(b []byte, v any, path, key string) ([]byte, error) {
	if b, ok, err := appendScalar(b, v, path); ok {
		if err != nil {
			return nil, withPath(err, serde.JoinPath(path, key))
		}
		return b, nil
	}
	return serde.AppendJSON(b, v, serde.JoinPath(path, key))
}

// withPath sets the path of a *serde.ValueError that was made without it.
func withPath(err error, path string) error {
	var ve *serde.ValueError
	if errors.As(err, &ve) {
		ve.Path = path
	}
	return err
}

// Materialize implements serde.Materializer: o decoded whole into a
// map[string]any, with its edits applied.
func (o *object) Materialize(path string, nums serde.Numbers) (any, error) {
	m := map[string]any{}
	if o.raw != nil {
		if err := o.index(); err != nil {
			return nil, err
		}
		for _, mb := range o.members {
			k, err := serde.Unquote(mb.Key(o.raw), path)
			if err != nil {
				return nil, err
			}
			if o.editOf(k) != nil {
				continue
			}
			if m[k], err = serde.DecodeValue(mb.Value(o.raw), serde.JoinPath(path, k), nums); err != nil {
				return nil, err
			}
		}
	}
	for _, e := range o.edits {
		if e.deleted {
			delete(m, e.key)
			continue
		}
		v, err := materialize(e.val, serde.JoinPath(path, e.key), nums)
		if err != nil {
			return nil, err
		}
		m[e.key] = v
	}
	return m, nil
}

// materialize returns v with every rawJSON and *object in it decoded.
func materialize(v any, path string, nums serde.Numbers) (any, error) {
	if s, ok := scalar(v); ok {
		return s, nil
	}
	switch x := v.(type) {
	case serde.Materializer:
		return x.Materialize(path, nums)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var err error
			if out[i], err = materialize(e, serde.IndexPath(path, i), nums); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			var err error
			if out[k], err = materialize(e, serde.JoinPath(path, k), nums); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}

// FromJSON returns the value of a JSON record for Apply, without decoding
// it: an object is read field by field as steps need them and written back
// with only the changed fields re-encoded. It fails, with the errors of
// serde.CheckJSON, when b is not one JSON value in valid UTF-8.
func FromJSON(b []byte) (any, error) {
	if err := serde.CheckJSON(b); err != nil {
		return nil, err
	}
	i := 0
	for b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r' {
		i++
	}
	j := len(b)
	for b[j-1] == ' ' || b[j-1] == '\t' || b[j-1] == '\n' || b[j-1] == '\r' {
		j--
	}
	if b[i] == '{' {
		return newObject(b[i:j], ""), nil
	}
	return rawJSON(b[i:j]), nil
}

// CELJSON returns the CEL value of the JSON value b as a stage's
// expressions see `value` (see FromJSON): an object's fields are decoded
// as the expression reads them, so that one that cannot be read exactly
// (1e400, a lone surrogate) fails only the expression that reads it, and
// numbers follow the text rule. It fails as FromJSON does.
func CELJSON(b []byte) (any, error) {
	v, err := FromJSON(b)
	if err != nil {
		return nil, err
	}
	return celValue(&Record{Value: v}), nil
}

// Field returns the top-level field name of v, a record's value after
// Apply, as the stage's key field reads it: like serde.FieldValue (numbers
// keep their text; an object or list is a value that serde.AppendJSON
// writes as it will be written), nil for null or absent. isObject is false
// when v is not an object. An error names a field that cannot be read
// exactly (a lone surrogate, say).
func Field(v any, name string) (fv any, isObject bool, err error) {
	switch x := v.(type) {
	case map[string]any:
		return x[name], true, nil
	case *object:
		raw, f, found, err := x.find(name)
		switch {
		case err != nil:
			return nil, true, err
		case !found:
			return nil, true, nil
		case raw != nil && (raw[0] == '{' || raw[0] == '['):
			fv = json.RawMessage(raw) // as serde.FieldValue: the bytes as they came
		case raw != nil:
			fv, err = serde.DecodeValue(raw, name, serde.AsText)
		case isContainer(f):
			fv = f // written by its AppendJSON
		default:
			fv, err = materialize(f, name, serde.AsText)
		}
		return fv, true, err
	case rawJSON:
		if x[0] == '{' {
			return Field(newObject(x, ""), name)
		}
	}
	return nil, false, nil
}

func isContainer(v any) bool {
	switch v.(type) {
	case *object, rawJSON:
		return true
	}
	return false
}
