package topology

import "strings"

// dedupe: an ID expression and a retention; stateful, the stage's first
// step (see Dedupe).
var dedupeKind = stepKind{
	name:  "dedupe",
	set:   func(st *Step) bool { return st.Dedupe != (Dedupe{}) },
	bare:  true,
	check: (*validator).dedupe,
}

// dedupe checks a dedupe step.
func (v *validator) dedupe(at stepAt) {
	d, dp := at.st.Dedupe, at.sp+".dedupe"
	switch {
	case at.earlier > 0:
		v.report(dp, "a stage has at most one dedupe step (this is its second)")
	case at.i > 0:
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
	v.changelogDeclared(dp, at.s.Name, DedupeStore, "dedupe")
}
