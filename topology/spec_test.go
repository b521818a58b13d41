package topology

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestSpecCoversEveryField: every field of the file's types has a
// definition with a doc line, and every definition names a field.
func TestSpecCoversEveryField(t *testing.T) {
	used := map[string]bool{}
	for _, n := range settings() {
		if strings.TrimSpace(n.doc) == "" {
			t.Errorf("%s: no doc in spec", n.path)
		}
		used[n.path], used[typeKey(n.parent, n.name)] = true, true
		for _, b := range []any{n.def, n.min, n.max} {
			if b == nil || n.typ == reflect.TypeFor[bool]() {
				continue
			}
			bt := reflect.TypeOf(b)
			switch {
			case n.typ == durationType:
				if bt != reflect.TypeFor[time.Duration]() {
					t.Errorf("%s: bound or default %v is a %s, want time.Duration", n.path, b, bt)
				}
			case bt.Kind() != n.typ.Kind() && !(bt.Kind() == reflect.Int && n.typ.Kind() >= reflect.Int && n.typ.Kind() <= reflect.Int64):
				t.Errorf("%s: bound or default %v is a %s, want %s", n.path, b, bt, n.typ)
			}
		}
	}
	for k := range spec {
		if !used[k] {
			t.Errorf("spec key %q names no field", k)
		}
	}
}

func TestDefaultAndBounds(t *testing.T) {
	if got := Default[time.Duration]("sinks[].commit.interval"); got != 200*time.Millisecond {
		t.Errorf("sink commit interval default = %s", got)
	}
	if got := Default[int32]("stages[].fetch_max_bytes"); got != 2<<20 {
		t.Errorf("stage fetch_max_bytes default = %d", got)
	}
	if got := Default[string]("stages[].input.format"); got != "json" {
		t.Errorf("format default = %q", got)
	}
	if lo, hi := Bounds[time.Duration]("sinks[].postgres.timeout"); lo != time.Second || hi != time.Hour {
		t.Errorf("postgres timeout bounds = %s, %s", lo, hi)
	}
	defer func() {
		if recover() == nil {
			t.Error("Default of an unknown setting did not panic")
		}
	}()
	Default[int]("stages[].nope")
}
