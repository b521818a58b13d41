package topology

import (
	"reflect"
)

// node is one setting of the file as its Go types shape it: a path in the
// spec's notation ("stages[].commit.interval": [] any element of a list,
// * any key of a map) and the Go type that holds it.
type node struct {
	path   string
	typ    reflect.Type
	parent reflect.Type // the struct that has the field
	name   string       // the field's yaml name
}

var (
	durationType    = reflect.TypeFor[Duration]()
	retentionType   = reflect.TypeFor[Retention]()
	secretType      = reflect.TypeFor[Secret]()
	columnsType     = reflect.TypeFor[ColumnSources]()
	statefulType    = reflect.TypeFor[Stateful]()
	aggregationType = reflect.TypeFor[Aggregation]()
)

// scalarLike reports whether values of t are written as one scalar (or,
// for the types that also take a mapping, are documented as one setting).
func scalarLike(t reflect.Type) bool {
	switch t {
	case durationType, retentionType:
		return true
	}
	return t.Kind() != reflect.Struct && t.Kind() != reflect.Slice && t.Kind() != reflect.Map
}

// walk lists every setting below the struct type t at path, in
// declaration order, mappings before what they hold.
func walk(t reflect.Type, path string, out []node) []node {
	fs := fieldsOf(t)
	for _, name := range fs.names {
		ft := t.Field(fs.index[name]).Type
		p := join(path, name)
		out = append(out, node{p, ft, t, name})
		out = walkType(ft, p, out)
	}
	return out
}

func walkType(ft reflect.Type, p string, out []node) []node {
	switch {
	case scalarLike(ft), ft == columnsType:
		return out
	case ft.Kind() == reflect.Struct:
		return walk(ft, p, out)
	case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
		return walk(ft.Elem(), p+"[]", out)
	case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
		return walk(ft.Elem(), p+".*", out)
	}
	return out
}

// settingNodes is every setting of a topology file.
var settingNodes = walk(reflect.TypeFor[File](), "", nil)
