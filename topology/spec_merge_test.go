package topology

import (
	"reflect"
	"testing"
)

// A setting with both a path entry and a type entry takes the type's
// definition with what the path's entry sets over it.
func TestMergeSettingPathOverType(t *testing.T) {
	base := setting{doc: "type doc", def: 1, min: 0, max: 10, unit: "bytes"}
	over := setting{doc: "path doc", max: 5, enum: []string{"a"}, required: true}
	got := mergeSetting(base, over)
	want := setting{doc: "path doc", def: 1, min: 0, max: 5, unit: "bytes", enum: []string{"a"}, required: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mergeSetting = %+v, want %+v", got, want)
	}
}
