package topology

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Aggregate is the aggregate step: windowed aggregations over event time,
// the last step of its stage.
//
//   - aggregate:
//     window: { tumbling: 1m }          # or { hopping: { size: 5m, advance: 1m } }, { session: { gap: 5m } }
//     time: value.ts                    # or $timestamp (the default): the record timestamp
//     grace: 30s
//     group_by: key                     # the default
//     aggregations: { n: count, total: { sum: value.amount } }
//     emit: final                       # or update
//
// State is kept per input partition and record key: a group must be the
// record key, so that all of a group's records share an input partition.
// With group_by an expression, the input must already be keyed by it: an
// earlier stage re-keys (a key step), and a record whose key is not its
// group_by value is a dead letter (reason key).
type Aggregate struct {
	Window Window `yaml:"window"`
	// Time is a CEL expression giving the record's event time (Unix
	// milliseconds as an int, or an RFC 3339 string), or $timestamp for
	// the record timestamp (the default).
	Time string `yaml:"time"`
	// Grace is how long, in stream time, a window still takes records
	// after its end. Default 0.
	Grace Duration `yaml:"grace"`
	// GroupBy is key (the default): the record key, or an expression the
	// record key must equal (see Aggregate).
	GroupBy string `yaml:"group_by"`
	// Aggregations are the results, by name: count, or one of sum, min,
	// max, avg, first and last with an expression.
	Aggregations map[string]Aggregation `yaml:"aggregations"`
	// Emit is final (the default: one result per window once it closes)
	// or update (a result on every change).
	Emit string `yaml:"emit"`
}

// Window is the window of an aggregate step: tumbling, hopping or
// session.
type Window struct {
	Tumbling Duration `yaml:"tumbling"`
	Hopping  Hopping  `yaml:"hopping"`
	Session  Session  `yaml:"session"`
}

// Session windows are a key's runs of records no more than Gap apart in
// event time (Kafka Streams' SessionWindows), merged as records bridge
// them.
type Session struct {
	Gap Duration `yaml:"gap"`
}

// Hopping windows are size long and start every advance.
type Hopping struct {
	Size    Duration `yaml:"size"`
	Advance Duration `yaml:"advance"`
}

// Size returns the window length and how far apart windows start (equal
// for tumbling windows; 0 for sessions).
func (w Window) Size() (size, advance time.Duration) {
	if w.Tumbling.Duration != 0 {
		return w.Tumbling.Duration, w.Tumbling.Duration
	}
	return w.Hopping.Size.Duration, w.Hopping.Advance.Duration
}

// Aggregation is one result of an aggregate step: count (written as the
// scalar `count`), or exactly one of the expression fields.
type Aggregation struct {
	Count bool   `yaml:"-"`
	Sum   string `yaml:"sum"`
	Min   string `yaml:"min"`
	Max   string `yaml:"max"`
	Avg   string `yaml:"avg"`
	First string `yaml:"first"`
	Last  string `yaml:"last"`
}

// aggregationKinds are the kinds of Aggregation, in the order documented.
var aggregationKinds = []string{"count", "sum", "min", "max", "avg", "first", "last"}

// Kind returns the aggregation's kind and expression ("" for count), or
// "" if none or several fields are set.
func (a Aggregation) Kind() (kind, expr string) {
	n := 0
	for _, k := range []struct {
		kind, expr string
	}{{"sum", a.Sum}, {"min", a.Min}, {"max", a.Max}, {"avg", a.Avg}, {"first", a.First}, {"last", a.Last}} {
		if k.expr != "" {
			kind, expr = k.kind, k.expr
			n++
		}
	}
	if a.Count {
		kind, expr = "count", ""
		n++
	}
	if n != 1 {
		return "", ""
	}
	return kind, expr
}

// parseScalar implements scalarDecoder: the scalar form is `count`.
func (a *Aggregation) parseScalar(s string) error {
	if s != "count" {
		return errBadAggregation
	}
	a.Count = true
	return nil
}

// alsoMapping tells the decoder that an Aggregation is a mapping too.
func (a *Aggregation) alsoMapping() string { return "count or a mapping" }

// Emit modes of an aggregate step.
const (
	emitFinal  = "final"
	emitUpdate = "update"
)

// AggregateStore is the name of the aggregate step's store, part of its
// changelog topic's name (see ChangelogTopic).
const AggregateStore = "aggregate"

// IsZero reports whether nothing of the step is set.
func (a *Aggregate) IsZero() bool {
	return a.Window == (Window{}) && a.Time == "" && a.Grace.Duration == 0 && a.GroupBy == "" && len(a.Aggregations) == 0 && a.Emit == ""
}

// AggregateStep returns the stage's aggregate step, nil if it has none.
func (s *Stage) AggregateStep() *Aggregate {
	for i := range s.Transform {
		if s.Transform[i].Op() == "aggregate" {
			return &s.Transform[i].Aggregate
		}
	}
	return nil
}

// StateStore returns the name of the store of the stage's stateful step
// (DedupeStore, AggregateStore, or a stateful step's StoreName), "" if it
// has none.
func (s *Stage) StateStore() string {
	switch {
	case s.DedupeStep() != nil:
		return DedupeStore
	case s.AggregateStep() != nil:
		return AggregateStore
	case s.statefulStep() != nil:
		return s.statefulStep().StoreName()
	}
	return ""
}

// aggregate: windowed results per record key; stateful, the stage's last
// step (see Aggregate).
var aggregateKind = stepKind{
	name:  "aggregate",
	set:   func(st *Step) bool { return !st.Aggregate.IsZero() },
	bare:  true,
	check: (*validator).aggregate,
}

// aggregate checks an aggregate step.
func (v *validator) aggregate(at stepAt) {
	p, i, s, a := at.p, at.i, at.s, at.st.Aggregate
	ap := at.sp + ".aggregate"
	switch {
	case i != len(s.Transform)-1:
		v.report(ap, "aggregate must be the stage's last step: its outputs are window results, not records (move later steps to a stage that reads %s)", v.q(p+".output.topic", s.Output.Topic))
	case s.DedupeStep() != nil:
		v.report(ap, "a stage has at most one stateful step: dedupe in one stage, aggregate in a stage that reads its output")
	}
	for j, st := range s.Transform[:i] {
		switch st.Op() {
		case "key":
			v.report(fmt.Sprintf("%s.transform[%d].key", p, j), "a key step before aggregate in the same stage: state is partitioned by the input record's key, so re-key in an earlier stage (see exactly help stateful, \"The keying rule\")")
		case "route", "explode", "aggregate":
			v.report(fmt.Sprintf("%s.transform[%d].%s", p, j, st.Op()), "a %s step cannot come before aggregate: an aggregate stage writes window results to its output topic", st.Op())
		}
	}
	if s.Key != "" {
		v.report(p+".key", "an aggregate stage's output key is the group's key; remove key")
	}
	if f := s.Output.Format; f != "" && f != "json" {
		v.report(p+".output.format", "an aggregate stage writes JSON window results (got format %s)", v.q(p+".output.format", f))
	}
	v.aggregateWindow(ap+".window", a.Window)
	if a.Grace.Duration < 0 || a.Grace.Duration%time.Millisecond != 0 {
		v.report(ap+".grace", "must be a non-negative whole number of milliseconds (got %s)", v.num(ap+".grace", a.Grace.String()))
	}
	if v.has(ap+".time") && strings.TrimSpace(a.Time) == "" {
		v.report(ap+".time", "must not be empty (an expression, or $timestamp)")
	}
	if v.has(ap+".group_by") && strings.TrimSpace(a.GroupBy) == "" {
		v.report(ap+".group_by", "must not be empty (key, or an expression the record key equals)")
	}
	if len(a.Aggregations) == 0 {
		v.report(ap+".aggregations", "required: at least one result, e.g. aggregations: { n: count, total: { sum: value.amount } }")
	}
	names := make([]string, 0, len(a.Aggregations))
	for name := range a.Aggregations {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		np := ap + ".aggregations." + name
		if kind, expr := a.Aggregations[name].Kind(); kind == "" {
			v.report(np, "want count, or one of %s with an expression (e.g. { sum: value.amount })", strings.Join(aggregationKinds[1:], ", "))
		} else if kind != "count" && strings.TrimSpace(expr) == "" {
			v.report(np, "expression must not be empty")
		}
	}
	v.keyingRule(p, ap, s, a)
	v.changelogDeclared(ap, s.Name, AggregateStore, "aggregate")
}

// aggregateWindow checks the window of an aggregate step at wp: exactly
// one of tumbling, hopping and session, with sizes in whole milliseconds.
func (v *validator) aggregateWindow(wp string, w Window) {
	tumbling, hopping, sess := v.has(wp+".tumbling"), v.has(wp+".hopping"), v.has(wp+".session")
	switch {
	case !v.has(wp):
		v.report(wp, "required: tumbling: <size>, hopping: { size: <size>, advance: <step> }, or session: { gap: <gap> } (e.g. window: { tumbling: 1m })")
	case tumbling && hopping:
		v.report(wp, "a window is tumbling or hopping, not both")
	case sess && (tumbling || hopping):
		v.report(wp, "a window is session, or tumbling or hopping, not both")
	case sess:
		v.requiredMillis(wp+".session.gap", w.Session.Gap.Duration, "the longest lull in event time within a session, e.g. gap: 5m")
	case tumbling:
		v.positiveMillis(wp+".tumbling", w.Tumbling.Duration)
	case hopping:
		size, adv := w.Hopping.Size.Duration, w.Hopping.Advance.Duration
		okSize := v.requiredMillis(wp+".hopping.size", size, "the window length")
		okAdv := v.requiredMillis(wp+".hopping.advance", adv, "how far apart windows start")
		if okSize && okAdv && adv > size {
			v.report(wp+".hopping.advance", "must not exceed size %s (windows would leave gaps)", size)
		}
	default:
		v.report(wp, "required: tumbling: <size>, hopping: { size: <size>, advance: <step> }, or session: { gap: <gap> }")
	}
}

// keyingRule checks, where the file shows it, that an aggregate stage
// grouping by an expression reads a topic keyed by it: the stages that
// write its input topic must end with a key step of that expression.
func (v *validator) keyingRule(p, ap string, s Stage, a Aggregate) {
	group := strings.TrimSpace(a.GroupBy)
	if group == "" || group == "key" {
		return
	}
	for i, w := range v.f.Stages {
		if !slices.Contains(w.OutputTopics(), s.Input.Topic) || w.Name == s.Name {
			continue
		}
		keyedBy := ""
		for _, st := range w.Transform {
			if st.Op() == "key" {
				keyedBy = strings.TrimSpace(st.Key)
			}
		}
		if keyedBy == group {
			continue
		}
		how := "does not re-key it"
		if keyedBy != "" {
			how = fmt.Sprintf("keys it by %q", keyedBy)
		}
		v.report(ap+".group_by", "groups on %q, but input topic %q is written by stages[%d] (%s), which %s: state is partitioned by the record key, so the stage writing the input must end with `- key: %s`",
			group, s.Input.Topic, i, w.Name, how, group)
	}
}

// positiveMillis reports d at path unless it is a positive whole number
// of milliseconds.
func (v *validator) positiveMillis(path string, d time.Duration) bool {
	if d <= 0 || d%time.Millisecond != 0 {
		v.report(path, "must be a positive whole number of milliseconds (got %s)", v.num(path, d.String()))
		return false
	}
	return true
}

func (v *validator) requiredMillis(path string, d time.Duration, what string) bool {
	if !v.has(path) {
		v.report(path, "required: %s", what)
		return false
	}
	return v.positiveMillis(path, d)
}
