package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v4"
)

// decoder walks a yaml.Node tree into a value, guided by the yaml struct
// tags, and keeps going after a problem so that one run reports them all.
// It records the position of every node it visits by field path.
type decoder struct {
	file   string
	lookup func(string) (string, bool)
	// offline checks a file where it will not run (LoadOffline): a
	// variable that is not set leaves its value unknown, not wrong.
	offline bool
	errs    Errors
	pos     map[string]Position
	null    map[string]bool   // paths written as null (~, null or nothing)
	src     map[string]string // source text of scalars that referenced variables
	failed  map[string]bool   // paths whose value could not be decoded
	types   map[string]string // column path -> type, of columns written in the long form
	nodes   int               // nodes decoded so far, aliases counted each time
}

// scalarDecoder is implemented by types decoded from one scalar string.
type scalarDecoder interface {
	parseScalar(s string) error
}

// mappingToo is implemented by scalarDecoders that may be written as a
// mapping too, decoded as their struct; alsoMapping says what is expected,
// for errors.
type mappingToo interface{ alsoMapping() string }

const (
	// maxMergeDepth bounds nested YAML merge keys ("<<").
	maxMergeDepth = 32
	// maxNodes bounds the work of decoding: aliases can make a small file
	// expand to a huge tree ("billion laughs").
	maxNodes = 200_000
)

func newDecoder(file string, lookup func(string) (string, bool)) *decoder {
	return &decoder{
		file:   file,
		lookup: lookup,
		pos:    make(map[string]Position),
		null:   make(map[string]bool),
		src:    make(map[string]string),
		failed: make(map[string]bool),
		types:  make(map[string]string),
	}
}

func nodePos(n *yaml.Node) Position { return Position{Line: n.Line, Col: n.Column} }

// add records a problem at n without marking path as failed.
func (d *decoder) add(pos Position, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Pos: pos, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// fail records a problem with the value at path, so that validation does not
// report the same value again.
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.add(nodePos(n), path, format, args...)
	d.failed[path] = true
}

// root parses data and returns its root mapping, or nil after recording why
// there is none.
func (d *decoder) root(data []byte) (root *yaml.Node) {
	defer func() {
		// yaml has panicked on hostile input before; Parse must not.
		if r := recover(); r != nil {
			d.add(Position{}, "", "invalid YAML: %v", r)
			root = nil
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.add(Position{}, "", "empty topology file (want a mapping with version, kafka, topics and stages)")
		} else {
			d.syntax(err, data)
		}
		return nil
	}
	n := &doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			d.add(Position{}, "", "empty topology file (want a mapping with version, kafka, topics and stages)")
			return nil
		}
		n = n.Content[0]
	}
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < maxMergeDepth; i++ {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null":
		d.add(Position{}, "", "empty topology file (want a mapping with version, kafka, topics and stages)")
		return nil
	case n.Kind != yaml.MappingNode:
		d.add(nodePos(n), "", "topology must be a mapping with version, kafka, topics and stages (got %s)", kindName(n))
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		d.add(nodePos(&next), "", "more than one YAML document (a topology file holds exactly one)")
	case !errors.Is(err, io.EOF):
		d.syntax(err, data)
	}
	return n
}

// syntax records a YAML syntax error (see SyntaxError).
func (d *decoder) syntax(err error, data []byte) {
	d.errs = append(d.errs, SyntaxError(d.file, data, err))
}

// SyntaxError turns err, a YAML library error from parsing data (the text
// of file), into an *Error "file:line:col: invalid YAML: message" at the
// place the parser stopped (yaml.LoadError's Mark; line and column count
// from 1). It names the construct the parser was reading and where that
// began (ContextMark), which is often where the mistake is: an unclosed
// '[' or quote, a key without ':'. An error without a mark keeps the line
// its message names ("yaml: line 3: ..."), or has no position.
func SyntaxError(file string, data []byte, err error) *Error {
	var le *yaml.LoadError
	var pos Position
	var msg string
	if errors.As(err, &le) && le.Mark.Line > 0 {
		pos = Position{Line: le.Mark.Line, Col: le.Mark.Column}
		msg = le.Message
		if c := le.ContextMark; le.ContextMsg != "" && c.Line > 0 && (c.Line != pos.Line || c.Column != pos.Col) {
			msg += fmt.Sprintf(" (%s that began at line %d, column %d)", le.ContextMsg, c.Line, c.Column)
		}
	} else {
		msg = strings.TrimPrefix(err.Error(), "yaml: ")
		if rest, ok := strings.CutPrefix(msg, "line "); ok {
			if num, text, ok := strings.Cut(rest, ": "); ok {
				if line, err := strconv.Atoi(num); err == nil && line > 0 {
					pos.Line, msg = line, text
				}
			}
		}
	}
	if pos.Line > 0 && pos.Col > 0 {
		lines := bytes.Split(data, []byte("\n"))
		if pos.Line <= len(lines) && pos.Col <= len(lines[pos.Line-1]) && lines[pos.Line-1][pos.Col-1] == '\t' {
			msg += " (a tab: YAML indents with spaces only)"
		}
	}
	if bytes.Contains(data, []byte("${")) && strings.Contains(msg, "did not find expected ','") {
		// Braces are syntax in flow collections: [${X}] does not parse.
		msg += ` (quote values holding ${...} inside [...] or {...}: "${VAR}")`
	}
	return &Error{File: file, Pos: pos, Msg: "invalid YAML: " + msg}
}

// decode stores n into v, which must be addressable.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.fail(n, path, "file too large: more than %d values once aliases are expanded", maxNodes)
		}
		return
	}
	d.pos[path] = nodePos(n)
	n, ok := d.resolve(n, path)
	if !ok {
		return
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		d.null[path] = true
		return
	}
	mt, mapping := v.Addr().Interface().(mappingToo)
	if sd, ok := v.Addr().Interface().(scalarDecoder); ok && !(mapping && n.Kind == yaml.MappingNode) {
		want := "a duration"
		if mapping {
			want = mt.alsoMapping()
		}
		d.decodeScalar(n, sd, path, want)
		return
	}
	if cs, ok := v.Addr().Interface().(*ColumnSources); ok {
		d.decodeColumns(n, cs, path)
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.String:
		if s, _, ok := d.scalar(n, path, "a string"); ok {
			v.SetString(s)
		}
	case reflect.Bool:
		d.decodeBool(n, v, path)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.decodeInt(n, v, path)
	default:
		// Unreachable for the types of this package.
		d.fail(n, path, "cannot decode into %s", v.Type())
	}
}

// decodeScalar stores scalar n into sd; want says what is expected.
func (d *decoder) decodeScalar(n *yaml.Node, sd scalarDecoder, path, want string) {
	s, refs, ok := d.scalar(n, path, want)
	if !ok {
		return
	}
	switch err := sd.parseScalar(s); {
	case errors.Is(err, errBadAggregation):
		d.fail(n, path, "invalid aggregation %s (want count, or a mapping of one of sum, min, max, avg, first, last to an expression)", shown(n.Value, refs))
	case errors.Is(err, errRetentionTooLong):
		d.fail(n, path, "retention %s is longer than 100 years (36500d), the most a retention may be", shown(n.Value, refs))
	case errors.Is(err, errBadRetention):
		d.fail(n, path, "invalid retention %s (want numbers with units d, h, m or s, such as 7d, 12h or 1d12h)", shown(n.Value, refs))
	case err != nil:
		d.fail(n, path, "invalid duration %s (want a number and a unit such as 100ms, 5s or 1m)", shown(n.Value, refs))
	}
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "expected a sequence, got %s", kindName(n))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.decode(c, s.Index(i), path+"["+strconv.Itoa(i)+"]")
	}
	v.Set(s)
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	for _, e := range d.entries(n, path) {
		ev := reflect.New(v.Type().Elem()).Elem()
		d.decode(e.val, ev, join(path, e.key))
		m.SetMapIndex(reflect.ValueOf(e.key).Convert(v.Type().Key()), ev)
	}
	v.Set(m)
}

func (d *decoder) decodeBool(n *yaml.Node, v reflect.Value, path string) {
	s, refs, ok := d.scalar(n, path, "true or false")
	if !ok {
		return
	}
	switch s {
	case "true":
		v.SetBool(true)
	case "false":
		v.SetBool(false)
	default:
		d.fail(n, path, "expected true or false, got %s", shown(n.Value, refs))
	}
}

func (d *decoder) decodeInt(n *yaml.Node, v reflect.Value, path string) {
	s, refs, ok := d.scalar(n, path, "an integer")
	if !ok {
		return
	}
	bits := v.Type().Bits()
	i, err := strconv.ParseInt(s, 10, bits)
	switch {
	case errors.Is(err, strconv.ErrRange):
		lim := int64(1)<<(bits-1) - 1
		d.fail(n, path, "integer %s is out of range (%d..%d)", shown(n.Value, refs), -lim-1, lim)
	case err != nil:
		d.fail(n, path, "expected an integer, got %s", shown(n.Value, refs))
	default:
		v.SetInt(i)
	}
}

// resolve follows aliases.
func (d *decoder) resolve(n *yaml.Node, path string) (*yaml.Node, bool) {
	for i := 0; n.Kind == yaml.AliasNode; i++ {
		if n.Alias == nil || i >= maxMergeDepth {
			d.fail(n, path, "unresolvable alias *%s", n.Value)
			return nil, false
		}
		n = n.Alias
	}
	return n, true
}

// scalar returns the expanded text of scalar n. refs reports whether the
// text came from environment variables.
func (d *decoder) scalar(n *yaml.Node, path, want string) (s string, refs, ok bool) {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "expected %s, got %s", want, kindName(n))
		return "", false, false
	}
	s, refs, problems, unset := expand(n.Value, d.lookup)
	if d.offline && len(unset) > 0 && len(unset) == len(problems) {
		// Unknown until run: no check may judge the value.
		d.src[path] = n.Value
		d.failed[path] = true
		return "", refs, false
	}
	for _, p := range problems {
		d.fail(n, path, "%s", p)
	}
	if len(problems) > 0 {
		return "", refs, false
	}
	if refs {
		d.src[path] = n.Value
	}
	return s, refs, true
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	fs := fieldsOf(v.Type())
	for _, e := range d.entries(n, path) {
		i, ok := fs.index[e.key]
		if !ok {
			d.add(nodePos(e.keyNode), join(path, e.key), "unknown field (valid: %s)", strings.Join(fs.names, ", "))
			continue
		}
		d.decode(e.val, v.Field(i), join(path, e.key))
	}
}

type entry struct {
	key     string
	keyNode *yaml.Node
	val     *yaml.Node
}

// entries returns the key/value pairs of mapping n in order, reporting
// duplicate keys and applying YAML merge keys ("<<: *defaults"), whose
// entries never override the mapping's own.
func (d *decoder) entries(n *yaml.Node, path string) []entry {
	return d.mergedEntries(n, path, map[*yaml.Node]bool{n: true}, 0)
}

// mergedEntries is entries for n and the mappings it merges. visited holds
// the mappings already merged: merging one twice adds nothing, and skipping
// it keeps "<<: [*a, *a]" chains from growing exponentially.
func (d *decoder) mergedEntries(n *yaml.Node, path string, visited map[*yaml.Node]bool, depth int) []entry {
	var out []entry
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		k, ok := d.resolve(k, path)
		if !ok {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.add(nodePos(k), path, "mapping keys must be scalars, got %s", kindName(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, val)
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.add(nodePos(k), join(path, k.Value), "duplicate key (first defined at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		out = append(out, entry{key: k.Value, keyNode: k, val: val})
	}
	for _, m := range merges {
		var sources []*yaml.Node
		m, ok := d.resolve(m, path)
		if !ok {
			continue
		}
		switch m.Kind {
		case yaml.MappingNode:
			sources = []*yaml.Node{m}
		case yaml.SequenceNode:
			sources = m.Content
		}
		for _, s := range sources {
			s, ok := d.resolve(s, path)
			if !ok {
				continue
			}
			if s.Kind != yaml.MappingNode || depth >= maxMergeDepth {
				d.add(nodePos(s), path, "merge key value must be a mapping or a sequence of mappings")
				continue
			}
			if visited[s] {
				continue
			}
			visited[s] = true
			for _, e := range d.mergedEntries(s, path, visited, depth+1) {
				if _, dup := seen[e.key]; !dup {
					seen[e.key] = e.keyNode
					out = append(out, e)
				}
			}
		}
		if len(sources) == 0 {
			d.add(nodePos(m), path, "merge key value must be a mapping or a sequence of mappings")
		}
	}
	return out
}

// fields describes the yaml-tagged fields of a struct type.
type fields struct {
	index map[string]int // yaml name -> field index
	names []string       // yaml names in declaration order, for hints
}

var fieldCache sync.Map // reflect.Type -> *fields

func fieldsOf(t reflect.Type) *fields {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*fields)
	}
	fs := &fields{index: make(map[string]int)}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() || f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || name == "" {
			continue
		}
		fs.index[name] = i
		fs.names = append(fs.names, name)
	}
	fieldCache.Store(t, fs)
	return fs
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// parent returns the path of the node containing path: "a[0].b" -> "a[0]"
// -> "a" -> "".
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// kindName names the kind of n for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", truncate(n.Value))
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// shown quotes the source text of a scalar for a message. When the value
// came from environment variables only the source (the ${...} references)
// is shown: the expanded value may be a secret.
func shown(src string, refs bool) string {
	q := strconv.Quote(truncate(src))
	if refs {
		return q + " (after environment expansion)"
	}
	return q
}

// decodeColumns decodes a sink's columns: each is "col: source" or
// "col: { field: source, type: pgtype }". Types go to d.types by path.
func (d *decoder) decodeColumns(n *yaml.Node, cs *ColumnSources, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", kindName(n))
		return
	}
	m := make(ColumnSources, len(n.Content)/2)
	for _, e := range d.entries(n, path) {
		p := join(path, e.key)
		val, ok := d.resolve(e.val, p)
		if !ok {
			continue
		}
		if val.Kind != yaml.MappingNode {
			var src string
			d.decode(val, reflect.ValueOf(&src).Elem(), p)
			m[e.key] = src
			continue
		}
		d.pos[p] = nodePos(val)
		var spec columnSpec
		d.decodeStruct(val, reflect.ValueOf(&spec).Elem(), p)
		m[e.key] = spec.Field
		if _, written := d.pos[p+".type"]; written || spec.Type != "" {
			d.types[p] = spec.Type
		}
	}
	*cs = m
}
