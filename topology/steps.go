package topology

import (
	"fmt"
	"strings"
)

// A step kind is one operation of a transform step: the Step field that
// writes it (its spec entry documents it) and the checks of its settings
// beyond the spec's. processor/transform compiles each kind by the same
// name; a test there holds the two lists equal.
type stepKind struct {
	name string
	// set reports whether st has the kind's field set.
	set func(st *Step) bool
	// bare: the field written empty ({} or "") still names the kind, and
	// its checks say what is missing.
	bare bool
	// check reports the problems of a step of the kind; nil: none beyond
	// the spec's.
	check func(v *validator, at stepAt)
}

// stepAt is a step being checked: step i of stage s, at sp.
type stepAt struct {
	p, sp    string // the stage's path and the step's
	i        int
	s        Stage
	st       *Step
	declared map[string]bool // the declared topics
	earlier  int             // steps of the same kind before it in the stage
}

// stepKinds are the kinds of Step, in the order documented. Set in init:
// the checks read Op, which reads this table.
var stepKinds []stepKind

func init() {
	stepKinds = []stepKind{
		filterKind, setKind, dropKind, renameKind, keyKind, routeKind,
		explodeKind, headersKind, funcKind, dedupeKind, aggregateKind, statefulKind, joinKind,
	}
}

// Op returns the name of the step's operation, or "" if none or several
// are set.
func (st *Step) Op() string {
	var op string
	for i := range stepKinds {
		if stepKinds[i].set(st) {
			if op != "" {
				return ""
			}
			op = stepKinds[i].name
		}
	}
	return op
}

// transform checks the shape of a stage's transform steps; the expressions
// themselves are compiled by processor/transform.
func (v *validator) transform(p string, s Stage, declared map[string]bool) {
	seen := map[string]int{}
	for i := range s.Transform {
		sp := fmt.Sprintf("%s.transform[%d]", p, i)
		kinds := v.stepKindsOf(sp, &s.Transform[i])
		switch len(kinds) {
		case 0:
			names := make([]string, len(stepKinds))
			for j, k := range stepKinds {
				names[j] = k.name
			}
			v.report(sp, "a step needs one operation (one of: %s)", strings.Join(names, ", "))
			continue
		case 1:
		default:
			names := make([]string, len(kinds))
			for j, k := range kinds {
				names[j] = k.name
			}
			v.report(sp, "a step has one operation, this one has %s (split it into steps)", strings.Join(names, " and "))
			continue
		}
		k := kinds[0]
		if k.check != nil {
			k.check(v, stepAt{p: p, sp: sp, i: i, s: s, st: &s.Transform[i], declared: declared, earlier: seen[k.name]})
		}
		seen[k.name]++
	}
}

// stepKindsOf returns the kinds the step at sp is written with: those set,
// then the bare ones written empty.
func (v *validator) stepKindsOf(sp string, st *Step) []*stepKind {
	var kinds []*stepKind
	for i := range stepKinds {
		if stepKinds[i].set(st) {
			kinds = append(kinds, &stepKinds[i])
		}
	}
	for i, k := range stepKinds {
		if k.bare && !k.set(st) && v.has(sp+"."+k.name) {
			kinds = append(kinds, &stepKinds[i])
		}
	}
	return kinds
}

// validPath reports whether p is names joined by single dots.
func validPath(p string) bool {
	if p == "" {
		return false
	}
	for _, part := range strings.Split(p, ".") {
		if part == "" || strings.TrimSpace(part) != part {
			return false
		}
	}
	return true
}

// The kinds below have no state; dedupe, aggregate and stateful are in
// their own files.

// filter: a bool expression.
var filterKind = stepKind{name: "filter", set: func(st *Step) bool { return st.Filter != "" }}

// set: field path -> expression.
var setKind = stepKind{
	name: "set",
	set:  func(st *Step) bool { return len(st.Set) > 0 },
	check: func(v *validator, at stepAt) {
		for k, val := range at.st.Set {
			kp := at.sp + ".set." + k
			v.fieldPathKey(kp, k)
			v.nonEmptyExpr(kp, val)
		}
	},
}

// drop: field paths.
var dropKind = stepKind{
	name: "drop",
	set:  func(st *Step) bool { return len(st.Drop) > 0 },
	check: func(v *validator, at stepAt) {
		for j, f := range at.st.Drop {
			if fp := fmt.Sprintf("%s.drop[%d]", at.sp, j); !validPath(f) {
				v.report(fp, "invalid field path %s (want names joined by dots, e.g. customer.tier)", v.q(fp, f))
			}
		}
	},
}

// rename: old path -> new path.
var renameKind = stepKind{
	name: "rename",
	set:  func(st *Step) bool { return len(st.Rename) > 0 },
	check: func(v *validator, at stepAt) {
		for k, val := range at.st.Rename {
			kp := at.sp + ".rename." + k
			v.fieldPathKey(kp, k)
			if !validPath(val) {
				v.report(kp, "invalid field path %s (want names joined by dots)", v.q(kp, val))
			}
		}
	},
}

// key: an expression.
var keyKind = stepKind{name: "key", set: func(st *Step) bool { return st.Key != "" }}

// route: rules of a when expression and a declared topic.
var routeKind = stepKind{
	name:  "route",
	set:   func(st *Step) bool { return len(st.Route) > 0 },
	check: (*validator).route,
}

func (v *validator) route(at stepAt) {
	catchAll := -1
	for j, r := range at.st.Route {
		rp := fmt.Sprintf("%s.route[%d]", at.sp, j)
		v.topicRef(rp+".topic", r.Topic, at.declared)
		if r.Topic != "" && r.Topic == at.s.Input.Topic {
			v.report(rp+".topic", "stage reads and writes topic %s (a route target must differ from the input)", v.q(rp+".topic", r.Topic))
		}
		if r.Topic != "" && r.Topic == at.s.DeadLetter.Topic {
			v.report(rp+".topic", "route target %s is the stage's dead letter topic", v.q(rp+".topic", r.Topic))
		}
		if catchAll >= 0 {
			v.report(rp, "unreachable: route[%d] has no when and matches every record", catchAll)
		}
		if strings.TrimSpace(r.When) == "" && catchAll < 0 {
			catchAll = j
		}
	}
}

// explode: a list expression.
var explodeKind = stepKind{name: "explode", set: func(st *Step) bool { return st.Explode != "" }}

// headers: header name -> expression.
var headersKind = stepKind{
	name: "headers",
	set:  func(st *Step) bool { return len(st.Headers) > 0 },
	check: func(v *validator, at stepAt) {
		for k, val := range at.st.Headers {
			v.nonEmptyExpr(at.sp+".headers."+k, val)
		}
	},
}

// func: the name of a Go transform, looked up when compiled.
var funcKind = stepKind{name: "func", set: func(st *Step) bool { return st.Func != "" }}

// fieldPathKey reports the key k at kp unless it is a field path.
func (v *validator) fieldPathKey(kp, k string) {
	if !validPath(k) {
		v.report(kp, "invalid field path %q (want names joined by dots, e.g. customer.tier)", k)
	}
}

// nonEmptyExpr reports the expression at path if it is blank.
func (v *validator) nonEmptyExpr(path, expr string) {
	if strings.TrimSpace(expr) == "" {
		v.report(path, "expression must not be empty")
	}
}
