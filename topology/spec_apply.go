package topology

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// each calls fn with the concrete path ("stages[2].commit.interval") and
// the addressable field of every setting of f at pattern
// ("stages[].commit.interval"), in file order. Keys of maps (*) are not
// patterns the spec defaults or bounds.
func each(v reflect.Value, path, pattern string, fn func(path string, f reflect.Value)) {
	if pattern == "" {
		fn(path, v)
		return
	}
	seg, rest, _ := strings.Cut(pattern, ".")
	name, list := strings.CutSuffix(seg, "[]")
	fs := fieldsOf(v.Type())
	i, ok := fs.index[name]
	if !ok {
		return
	}
	fv, p := v.Field(i), join(path, name)
	if !list {
		each(fv, p, rest, fn)
		return
	}
	for j := range fv.Len() {
		each(fv.Index(j), p+"["+strconv.Itoa(j)+"]", rest, fn)
	}
}

// applyDefaults sets every setting the file leaves out to its spec
// default. A string written empty takes it too, but for an enum, where an
// empty value is a mistake that checkEnum reports; a value unknown offline
// (LoadOffline) takes it, so that the checks of other settings see a
// valid one.
func (v *validator) applyDefaults() {
	root := reflect.ValueOf(v.f).Elem()
	for _, n := range settings() {
		if n.def == nil || n.derived {
			continue
		}
		each(root, "", n.path, func(path string, f reflect.Value) {
			empty := f.Kind() == reflect.String && f.String() == ""
			if v.has(path) && !(empty && (n.enum == nil || v.d.failed[path])) {
				return
			}
			setValue(f, n.def)
		})
	}
}

// setValue stores def, a spec default or bound, into f.
func setValue(f reflect.Value, def any) {
	if f.Type() == durationType {
		f = f.Field(0)
	}
	d := reflect.ValueOf(def)
	switch f.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f.SetInt(d.Int())
	default:
		f.Set(d.Convert(f.Type()))
	}
}

// checkSpec reports every written setting outside its spec bounds or
// allowed values.
func (v *validator) checkSpec() {
	root := reflect.ValueOf(v.f).Elem()
	for _, n := range settings() {
		if n.own || n.min == nil && n.max == nil && !n.positive && n.enum == nil {
			continue
		}
		each(root, "", n.path, func(path string, f reflect.Value) {
			if !v.has(path) {
				return
			}
			if n.enum != nil {
				v.checkEnum(path, n.setting, f.String())
				return
			}
			v.checkBounds(path, n.setting, f)
		})
	}
}

func (v *validator) checkEnum(path string, s setting, val string) {
	switch {
	case slices.Contains(s.enum, val):
	case val == "":
		v.report(path, "must not be empty (valid: %s)", strings.Join(s.enum, ", "))
	case s.what == "":
		v.report(path, "must be %s (got %s)", strings.Join(s.enum, " or "), v.q(path, val))
	default:
		v.report(path, "unknown %s %s (valid: %s)", s.what, v.q(path, val), strings.Join(s.enum, ", "))
	}
}

// checkBounds reports the number or duration f at path outside s's bounds.
func (v *validator) checkBounds(path string, s setting, f reflect.Value) {
	val, got := number(f)
	got = v.num(path, got)
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if s.min != nil {
		lo, _ = number(reflect.ValueOf(s.min))
	}
	if s.max != nil {
		hi, _ = number(reflect.ValueOf(s.max))
	}
	unit := ""
	if s.unit != "" {
		unit = " " + s.unit
	}
	switch {
	case s.positive && val <= 0:
		v.report(path, "must be greater than 0 (got %s)", got)
	case s.or != nil && val == reflect.ValueOf(s.or).Int():
	case val >= lo && val <= hi:
	case s.or != nil:
		v.report(path, "must be %d (%s) or at least %s (got %s)", s.or, s.orWhy, s.text(s.min), got)
	case s.min != nil && s.max != nil && !s.apart:
		v.report(path, "must be between %s and %s%s (got %s)", s.text(s.min), s.text(s.max), unit, got)
	case val < lo && s.minWhy != "":
		v.report(path, "must be at least %s, %s (got %s)", s.text(s.min), s.minWhy, got)
	case val < lo:
		v.report(path, "must be at least %s%s (got %s)", s.text(s.min), unit, got)
	default:
		v.report(path, "must be at most %s%s (got %s)", s.text(s.max), unit, got)
	}
}

// number returns the value of a number or duration, and its text.
func number(f reflect.Value) (int64, string) {
	if f.Type() == durationType {
		f = f.Field(0)
	}
	if f.Type() == reflect.TypeFor[time.Duration]() {
		return f.Int(), time.Duration(f.Int()).String()
	}
	return f.Int(), strconv.FormatInt(f.Int(), 10)
}

// text writes a bound or default of s for people: "1h", "1024 (1 KiB)".
func (s setting) text(b any) string {
	switch b := b.(type) {
	case time.Duration:
		return shortDuration(b)
	case bool:
		return strconv.FormatBool(b)
	case string:
		return b
	}
	n := reflect.ValueOf(b).Int()
	if s.unit == "bytes" {
		for _, u := range []struct {
			size int64
			name string
		}{{gib, "GiB"}, {mib, "MiB"}, {kib, "KiB"}} {
			if n >= u.size && n%u.size == 0 {
				return fmt.Sprintf("%d (%d %s)", n, n/u.size, u.name)
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// shortDuration is d.String() without zero units: "1h", not "1h0m0s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Default returns the default that Parse gives the setting at path, in
// the spec's notation ("stages[].commit.interval", "sinks[].fetch_max_bytes"),
// as T: time.Duration for durations, int, int32 or string. The engine
// applies it to a configuration built without a file. It panics when
// path has no default of type T, a programming error a test finds.
func Default[T any](path string) T { return specValue[T](path, specOf(path).def) }

// Bounds returns the least and greatest value the setting at path (see
// Default) takes; a bound the setting lacks is T's zero value.
func Bounds[T any](path string) (lo, hi T) {
	s := specOf(path)
	if s.min != nil {
		lo = specValue[T](path, s.min)
	}
	if s.max != nil {
		hi = specValue[T](path, s.max)
	}
	return lo, hi
}

// Allowed returns the values the enum setting at path (see Default)
// allows, such as "skip" and "delete" for "sinks[].postgres.tombstones";
// nil when it is not an enum.
func Allowed(path string) []string { return slices.Clone(specOf(path).enum) }

func specValue[T any](path string, v any) T {
	var t T
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || !rv.CanConvert(reflect.TypeOf(t)) {
		panic(fmt.Sprintf("topology: setting %q has no %T value", path, t))
	}
	return rv.Convert(reflect.TypeOf(t)).Interface().(T)
}
