package topology

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestStepKindsAreStepFields holds the table of step kinds to the Step
// fields that write them, in the order documented.
func TestStepKindsAreStepFields(t *testing.T) {
	var fields []string
	st := reflect.TypeFor[Step]()
	for i := range st.NumField() {
		if name, _, _ := strings.Cut(st.Field(i).Tag.Get("yaml"), ","); name != "name" {
			fields = append(fields, name)
		}
	}
	var kinds []string
	for _, k := range stepKinds {
		kinds = append(kinds, k.name)
		if k.set(&Step{}) {
			t.Errorf("kind %s: set on an empty step", k.name)
		}
	}
	if !slices.Equal(kinds, fields) {
		t.Errorf("step kinds %v, Step fields %v", kinds, fields)
	}
}
