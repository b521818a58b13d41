package topology

import (
	"fmt"
	"strconv"
	"strings"
)

// stepOps are the operation fields of a Step, in the order documented.
var stepOps = []string{"filter", "set", "drop", "rename", "key", "route", "explode", "headers", "func", "dedupe", "aggregate", "stateful"}

// Op returns the name of the step's operation, or "" if none or several
// are set.
func (st *Step) Op() string {
	if ops := st.ops(); len(ops) == 1 {
		return ops[0]
	}
	return ""
}

// ops lists the operation fields that are set.
func (st *Step) ops() []string {
	var ops []string
	for _, op := range stepOps {
		if st.has(op) {
			ops = append(ops, op)
		}
	}
	return ops
}

func (st *Step) has(op string) bool {
	switch op {
	case "filter":
		return st.Filter != ""
	case "set":
		return len(st.Set) > 0
	case "drop":
		return len(st.Drop) > 0
	case "rename":
		return len(st.Rename) > 0
	case "key":
		return st.Key != ""
	case "route":
		return len(st.Route) > 0
	case "explode":
		return st.Explode != ""
	case "headers":
		return len(st.Headers) > 0
	case "func":
		return st.Func != ""
	case "dedupe":
		return st.Dedupe != (Dedupe{})
	case "aggregate":
		return !st.Aggregate.IsZero()
	case "stateful":
		return st.Stateful != (Stateful{})
	}
	return false
}

// transform checks the shape of a stage's transform steps; the expressions
// themselves are compiled by processor/transform.
func (v *validator) transform(p string, s Stage, declared map[string]bool) {
	dedupes := 0
	for i, st := range s.Transform {
		sp := fmt.Sprintf("%s.transform[%d]", p, i)
		ops := st.ops()
		if v.has(sp+".dedupe") && !st.has("dedupe") {
			ops = append(ops, "dedupe") // written as dedupe: {}
		}
		for _, op := range []string{"aggregate", "stateful"} {
			if v.has(sp+"."+op) && !st.has(op) {
				ops = append(ops, op) // written as {} or ""
			}
		}
		switch len(ops) {
		case 0:
			v.report(sp, "a step needs one operation (one of: %s)", strings.Join(stepOps, ", "))
			continue
		case 1:
		default:
			v.report(sp, "a step has one operation, this one has %s (split it into steps)", strings.Join(ops, " and "))
			continue
		}
		if ops[0] == "dedupe" {
			v.dedupe(p, sp, i, dedupes, st.Dedupe)
			dedupes++
		}
		if ops[0] == "aggregate" {
			v.aggregate(p, sp, i, s, st.Aggregate)
		}
		if ops[0] == "stateful" {
			v.stateful(p, sp, i, s, st.Stateful)
		}
		for j, f := range st.Drop {
			if fp := fmt.Sprintf("%s.drop[%d]", sp, j); !validPath(f) {
				v.report(fp, "invalid field path %s (want names joined by dots, e.g. customer.tier)", v.q(fp, f))
			}
		}
		for _, m := range []struct {
			name string
			kv   map[string]string
		}{{"set", st.Set}, {"rename", st.Rename}, {"headers", st.Headers}} {
			for k, val := range m.kv {
				kp := sp + "." + m.name + "." + k
				if m.name != "headers" && !validPath(k) {
					v.report(kp, "invalid field path %q (want names joined by dots, e.g. customer.tier)", k)
				}
				if m.name == "rename" && !validPath(val) {
					v.report(kp, "invalid field path %s (want names joined by dots)", v.q(kp, val))
				}
				if m.name != "rename" && strings.TrimSpace(val) == "" {
					v.report(kp, "expression must not be empty")
				}
			}
		}
		catchAll := -1
		for j, r := range st.Route {
			rp := fmt.Sprintf("%s.route[%d]", sp, j)
			v.topicRef(rp+".topic", r.Topic, declared)
			if r.Topic != "" && r.Topic == s.Input.Topic {
				v.report(rp+".topic", "stage reads and writes topic %s (a route target must differ from the input)", v.q(rp+".topic", r.Topic))
			}
			if r.Topic != "" && r.Topic == s.DeadLetter.Topic {
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

// dedupe checks the dedupe step at sp, the i-th step of the stage at p;
// earlier is the number of dedupe steps before it.
func (v *validator) dedupe(p, sp string, i, earlier int, d Dedupe) {
	dp := sp + ".dedupe"
	switch {
	case earlier > 0:
		v.report(dp, "a stage has at most one dedupe step (this is its second)")
	case i > 0:
		v.report(dp, "dedupe must be the stage's first step: it decides whether an input record is processed at all (move it to transform[0])")
	}
	if strings.TrimSpace(d.ID) == "" {
		v.report(dp+".id", "required: an expression for the record's event ID (e.g. id: value.event_id)")
	}
	if rp := dp + ".retention"; !v.has(rp) {
		v.report(rp, "required: how long an ID is remembered, in stream time (e.g. retention: 7d)")
	} else if d.Retention.Duration <= 0 {
		v.report(rp, "must be positive (got %s)", v.num(rp, d.Retention.String()))
	}
	v.changelogDeclared(dp, v.f.Stages[stageIndex(p)].Name, DedupeStore, "dedupe")
}

// stageIndex returns i of the stage path "stages[i]".
func stageIndex(p string) int {
	i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(p, "stages["), "]"))
	return i
}

// declaredIndex returns the index of topic name in f.Topics, or -1.
func (v *validator) declaredIndex(name string) int {
	for i, t := range v.f.Topics {
		if t.Name == name {
			return i
		}
	}
	return -1
}
