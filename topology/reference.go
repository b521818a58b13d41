package topology

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// kindOf names the type of a setting for people: the reference's Type
// column.
func kindOf(t reflect.Type) string {
	switch t {
	case durationType:
		return "duration"
	case retentionType:
		return "retention"
	case secretType:
		return "string (secret)"
	case columnsType:
		return "map of column to source"
	case statefulType:
		return "string or mapping"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "bool"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "list of mappings"
		}
		return "list of " + kindOf(t.Elem()) + "s"
	case reflect.Map:
		if t.Elem() == aggregationType {
			return "map of name to `count` or mapping"
		}
		return "map of " + kindOf(t.Elem()) + "s"
	}
	return "mapping"
}

// allowed says a setting's bounds or values for people.
func (s setting) allowed() string {
	unit := ""
	if s.unit != "" {
		unit = " " + s.unit
	}
	switch {
	case s.enum != nil:
		return "`" + strings.Join(s.enum, "`, `") + "`"
	case s.positive:
		return "> 0"
	case s.or != nil:
		return fmt.Sprintf("%v (%s), or ≥ %s", s.or, s.orWhy, s.text(s.min))
	case s.min != nil && s.max != nil && s.text(s.min) == s.text(s.max):
		return s.text(s.min)
	case s.min != nil && s.max != nil:
		return s.text(s.min) + " to " + s.text(s.max) + unit
	case s.min != nil:
		return "≥ " + s.text(s.min) + unit
	case s.max != nil:
		return "≤ " + s.text(s.max) + unit
	}
	return ""
}

// defaultText says a setting's default for people.
func (s setting) defaultText() string {
	switch {
	case s.defText != "":
		return s.defText
	case s.def == nil:
		return ""
	case s.unit != "":
		return s.text(s.def)
	}
	if str, ok := s.def.(string); ok {
		return "`" + str + "`"
	}
	return s.text(s.def)
}

// reference renders the field reference of the topology file as
// Markdown, from the spec: cmd/exactly/docs/topology.md.
func reference() []byte {
	var b bytes.Buffer
	b.WriteString(`<!-- Generated from the spec of package topology (topology/spec.go); do not edit. Regenerate: go test ./topology -update -->

# Topology file reference

A topology file is one YAML document. Every setting is listed here with its
type, default, allowed values and meaning; a setting marked **required**
must be written. Unknown and duplicate keys are errors, and every problem is
reported as ` + "`file:line:col: path.to.field: message (hint)`" + `.

Any scalar value may be written as ` + "`${VAR}` or `${VAR:-default}`" + `, expanded
from the environment (` + "`$$`" + ` is a literal ` + "`$`" + `); messages show the reference,
never its value. ` + "`exactly validate`" + ` needs no variable to be set; ` + "`exactly run`" + `
and ` + "`exactly sink`" + ` stop on one that is not. Durations are Go durations
(` + "`100ms`, `5s`, `1m30s`" + `). In a path, ` + "`[]`" + ` is any element of a list and ` + "`*`" + ` any
key of a map. ` + "`exactly schema`" + ` prints the JSON Schema of the file, for editors.
`)
	section := ""
	for _, n := range settings() {
		top, _, _ := strings.Cut(n.path, ".")
		top, _, _ = strings.Cut(top, "[")
		if top != section {
			section = top
			fmt.Fprintf(&b, "\n## %s\n\n| Setting | Type | Default | Allowed | Description |\n| --- | --- | --- | --- | --- |\n", section)
		}
		doc := n.doc
		if n.required {
			doc = "**Required.** " + doc
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", n.path, kindOf(n.typ), n.defaultText(), n.allowed(), strings.ReplaceAll(doc, "|", `\|`))
	}
	return b.Bytes()
}

// envRef is the pattern of a scalar holding a ${VAR} reference, which the
// schema accepts for any scalar setting.
const envRef = `\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}`

// Schema returns the JSON Schema (draft-07) of the topology file, derived
// from the spec: for editors (yaml-language-server) and `exactly schema`.
// It checks types, bounds, allowed values and unknown fields; the rules
// between settings are Parse's.
func Schema() []byte {
	root := schemaOf(reflect.TypeFor[File](), "")
	root["$schema"] = "http://json-schema.org/draft-07/schema#"
	root["$id"] = "https://github.com/exactly-io/exactly/cmd/exactly/docs/schema.json"
	root["title"] = "exactly topology file"
	out, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		panic(err) // maps of strings, numbers and bools always marshal
	}
	return append(out, '\n')
}

type object = map[string]any

// schemaOf returns the schema of struct type t at path.
func schemaOf(t reflect.Type, path string) object {
	props := object{}
	var required []string
	fs := fieldsOf(t)
	for _, name := range fs.names {
		p := join(path, name)
		s, _ := settingAt(p, t, name)
		ft := t.Field(fs.index[name]).Type
		props[name] = schemaOfField(ft, p, s)
		if s.required && isRequiredInSchema(p) {
			required = append(required, name)
		}
	}
	o := object{"type": "object", "properties": props, "additionalProperties": false}
	if required != nil {
		o["required"] = required
	}
	return o
}

// isRequiredInSchema reports whether a required setting is required
// whenever its mapping is written: some are required only with another
// (aws keys with the aws mapping, a hopping window's size) and others
// have an alternative (EXACTLY_BROKERS for kafka.brokers).
func isRequiredInSchema(p string) bool {
	switch p {
	case "kafka.brokers", "kafka.sasl.mechanism":
		return false
	}
	return true
}

func schemaOfField(ft reflect.Type, p string, s setting) object {
	var o object
	switch {
	case ft == durationType:
		o = object{"type": "string", "pattern": `^([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$|^0$|` + envRef}
	case ft == retentionType:
		o = object{"type": "string", "pattern": `^([0-9]+[dhms])+$|` + envRef}
	case ft == columnsType:
		o = object{"type": "object", "additionalProperties": object{"oneOf": []any{
			object{"type": "string"},
			object{"type": "object", "properties": object{"field": object{"type": "string"}, "type": object{"type": "string"}}, "additionalProperties": false},
		}}}
	case ft == statefulType:
		o = object{"oneOf": []any{object{"type": "string"}, schemaOf(ft, p)}}
	case ft.Kind() == reflect.Struct:
		o = schemaOf(ft, p)
	case ft.Kind() == reflect.Slice:
		o = object{"type": "array", "items": schemaOfField(ft.Elem(), p+"[]", setting{})}
	case ft.Kind() == reflect.Map && ft.Elem() == aggregationType:
		o = object{"type": "object", "additionalProperties": object{"oneOf": []any{
			object{"const": "count"}, schemaOf(ft.Elem(), p+".*"),
		}}}
	case ft.Kind() == reflect.Map:
		o = object{"type": "object", "additionalProperties": schemaOfField(ft.Elem(), p+".*", setting{})}
	case ft.Kind() == reflect.String:
		o = object{"type": "string"}
		switch {
		case p == "kafka.sasl.mechanism": // any case
			o["examples"] = s.enum
		case s.enum != nil:
			o = envOr(object{"enum": s.enum})
		}
	case ft.Kind() == reflect.Bool:
		o = envOr(object{"type": "boolean"})
	default: // integers
		n := object{"type": "integer"}
		if s.min != nil {
			lo, _ := number(reflect.ValueOf(s.min))
			n["minimum"] = lo
		}
		if s.max != nil {
			hi, _ := number(reflect.ValueOf(s.max))
			n["maximum"] = hi
		}
		if s.or != nil {
			n = object{"anyOf": []any{object{"const": s.or}, n}}
		}
		o = envOr(n)
	}
	if s.doc != "" {
		o["description"] = s.doc
	}
	if s.def != nil && !s.derived {
		d := s.def
		if dur, ok := d.(interface{ String() string }); ok && ft == durationType {
			d = dur.String()
		}
		o["default"] = d
	}
	return o
}

// envOr lets a non-string scalar be written as a ${VAR} reference too.
func envOr(o object) object {
	return object{"anyOf": []any{o, object{"type": "string", "pattern": envRef}}}
}
