package topology

import (
	"errors"
	"sort"
	"strconv"
	"strings"
)

// errBadDuration is returned by Duration.parseScalar; the decoder turns it
// into a positioned *Error.
var errBadDuration = errors.New("invalid duration")

// errBadAggregation is returned by Aggregation.parseScalar.
var errBadAggregation = errors.New("invalid aggregation")

// errBadRetention is returned by parseRetention.
var errBadRetention = errors.New("invalid retention")

// errRetentionTooLong is a retention beyond maxRetention (100 years).
var errRetentionTooLong = errors.New("retention too long")

// Error is one problem in a topology file, located by file, position and
// field path (for example "stages[0].input.topic").
type Error struct {
	File string
	Pos  Position // zero when the problem has no place in the file
	Path string   // empty when the problem concerns the whole file
	Msg  string
}

// Error formats e as "file:line:col: path: msg". The position is left out
// when it is zero (and the column alone when only the line is known, as for
// YAML syntax errors); "path: " is left out when Path is empty.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Pos.Line > 0 {
		b.WriteString(strconv.Itoa(e.Pos.Line))
		b.WriteByte(':')
		if e.Pos.Col > 0 {
			b.WriteString(strconv.Itoa(e.Pos.Col))
			b.WriteByte(':')
		}
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a topology file, sorted by line and
// column. Parse returns it as its error; use errors.As to get it back.
type Errors []*Error

// Error returns one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As reach each *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Sorted returns es sorted by line and column, each problem once.
func (es Errors) Sorted() Errors { return es.sorted() }

// sorted orders es by position, keeping discovery order for ties, and drops
// repeats: a node reached through several YAML aliases would otherwise
// report the same problem once per alias.
func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	type key struct {
		pos       Position
		msg, path string
	}
	seen := make(map[key]bool, len(es))
	out := es[:0]
	for _, e := range es {
		if e.Pos.Line > 0 {
			k := key{e.Pos, e.Msg, stripIndexes(e.Path)}
			if seen[k] {
				continue
			}
			seen[k] = true
		}
		out = append(out, e)
	}
	return out
}

// stripIndexes turns "stages[3].commit" into "stages[].commit".
func stripIndexes(path string) string {
	var b strings.Builder
	skip := false
	for _, r := range path {
		switch {
		case r == '[':
			skip = true
			b.WriteRune(r)
		case r == ']':
			skip = false
			b.WriteRune(r)
		case !skip:
			b.WriteRune(r)
		}
	}
	return b.String()
}
