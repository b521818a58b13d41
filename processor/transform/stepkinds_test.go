package transform

import (
	"reflect"
	"testing"

	"github.com/exactly-io/exactly/topology"
)

// TestStepKindsMatchTopology holds the compilers to topology's step kinds:
// each operation field of topology.Step, set alone, names a kind (Op) that
// has a compiler here, and each compiler is of such a kind.
func TestStepKindsMatchTopology(t *testing.T) {
	kinds := map[string]bool{}
	typ := reflect.TypeFor[topology.Step]()
	for i := range typ.NumField() {
		field := typ.Field(i).Name
		if field == "Name" {
			continue
		}
		var st topology.Step
		fill(reflect.ValueOf(&st).Elem().Field(i))
		op := st.Op()
		if op == "" {
			t.Errorf("Step.%s set: Op() is empty, topology has no step kind for it", field)
			continue
		}
		kinds[op] = true
		if _, ok := stepKinds[op]; !ok {
			t.Errorf("step kind %s (Step.%s) has no compiler (registerStep)", op, field)
		}
	}
	for op := range stepKinds {
		if !kinds[op] {
			t.Errorf("compiler of step kind %s: topology.Step has no such kind", op)
		}
	}
}

// fill makes v non-zero: a struct by its first field, a slice or map by
// one element.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.New(v.Type().Elem()).Elem()))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem())
		v.Set(m)
	case reflect.Struct:
		fill(v.Field(0))
	}
}
