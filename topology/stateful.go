package topology

import (
	"fmt"
	"strings"
)

// Stateful is the stateful step: a Go transform registered with
// transform.RegisterStateful, which reads and writes a key-value store of
// its stage as it turns a record into outputs.
//
//   - stateful: running-balance                              # store "running-balance"
//   - stateful: { func: running-balance, store: balances }   # the store named apart
//
// The store is partitioned like the input: the function sees the store of
// the record's input partition, so all records that share state must share
// an input partition, which the record key guarantees. A stage has at most
// one stateful step (dedupe, aggregate or stateful), and no key step may
// come before it in its stage: the function would see a key that does not
// say the partition.
type Stateful struct {
	// Func names the Go transform.
	Func string `yaml:"func"`
	// Store names the store, and so its changelog topic,
	// exactly-<stage>-<store>-changelog. Default: Func. Naming it apart
	// keeps the state when the Go function is renamed.
	Store string `yaml:"store"`
}

// parseScalar implements scalarDecoder: the scalar form is the function's
// name.
func (s *Stateful) parseScalar(v string) error {
	s.Func = v
	return nil
}

// alsoMapping tells the decoder that a Stateful is a mapping too.
func (s *Stateful) alsoMapping() string { return "a function name or a mapping" }

// StoreName returns the name of the step's store: Store, or Func.
func (s Stateful) StoreName() string {
	if s.Store != "" {
		return s.Store
	}
	return s.Func
}

// statefulStep returns the stage's stateful step, nil if it has none.
func (s *Stage) statefulStep() *Stateful {
	for i := range s.Transform {
		if s.Transform[i].Op() == "stateful" {
			return &s.Transform[i].Stateful
		}
	}
	return nil
}

// stateful: a Go transform registered with transform.RegisterStateful,
// and its store (see Stateful).
var statefulKind = stepKind{
	name:  "stateful",
	set:   func(st *Step) bool { return st.Stateful != (Stateful{}) },
	bare:  true,
	check: (*validator).stateful,
}

// stateful checks a stateful step.
func (v *validator) stateful(at stepAt) {
	p, i, s, sf := at.p, at.i, at.s, at.st.Stateful
	fp := at.sp + ".stateful"
	for j, o := range s.Transform {
		op := o.Op()
		if j == i || (op != "dedupe" && op != "aggregate" && op != "stateful") || (op == "stateful" && j > i) {
			continue
		}
		v.report(fp, "a stage has at most one stateful step, and this one also has transform[%d] %s (one state store per stage: split it into two stages)", j, op)
		break
	}
	for j, o := range s.Transform[:i] {
		if o.Op() == "key" {
			v.report(fmt.Sprintf("%s.transform[%d].key", p, j), "a key step before the stateful step in the same stage: its store is partitioned by the input record's key, so re-key in an earlier stage (see exactly help stateful, \"The keying rule\")")
		}
	}
	if strings.TrimSpace(sf.Func) == "" {
		v.report(fp+".func", "required: the name of a Go transform registered with transform.RegisterStateful (e.g. stateful: running-balance)")
		return
	}
	store, path, what := sf.StoreName(), fp+".store", "store"
	if sf.Store == "" {
		path, what = fp+".func", "store (the function's name, when store is not set)"
		if !v.has(path) {
			path = fp // the scalar form
		}
	}
	switch {
	case store == DedupeStore || store == AggregateStore:
		v.report(path, "%s %s is the name of the %s step's store; name the store apart (store: <name>)", what, v.q(path, store), store)
	case topicNameProblem(store) != "" || topicNameProblem(ChangelogTopic(s.Name, store)) != "":
		why := topicNameProblem(store)
		if why == "" {
			why = topicNameProblem(ChangelogTopic(s.Name, store))
		}
		v.report(path, "%s %s cannot be part of the changelog topic's name %s: %s (set store: <name>)", what, v.q(path, store), ChangelogTopic(s.Name, "<store>"), why)
	default:
		v.changelogDeclared(fp, s.Name, store, "stateful")
	}
}

// changelogUser is the first step of a file that has a changelog topic.
type changelogUser struct{ stage, what string }

// changelogDeclared reports the changelog topic of store of stage when
// topics declares it (exactly topics create makes it, compacted, with the
// input's partitions), or when an earlier step of the file, at path, has
// the same changelog: stage and store names may both hold '-', so stage
// "a-b" with store "c" and stage "a" with store "b-c" both name
// exactly-a-b-c-changelog, and two stores sharing one changelog would
// restore each other's entries.
func (v *validator) changelogDeclared(path, stage, store, step string) {
	name := ChangelogTopic(stage, store)
	if v.changelogs == nil {
		v.changelogs = map[string]changelogUser{}
	}
	if first, ok := v.changelogs[name]; !ok {
		v.changelogs[name] = changelogUser{stage, fmt.Sprintf("stage %s's %s step (%s)", stage, step, v.at(path))}
	} else if first.stage != stage { // within a stage, the one-stateful-step rule speaks
		v.report(path, "changelog topic %s is also the changelog of %s: two stores cannot share one changelog; rename this stage or its store",
			name, first.what)
	}
	if i := v.declaredIndex(name); i >= 0 {
		tp := fmt.Sprintf("topics[%d].name", i)
		v.report(tp, "topic %s is the changelog of stage %s's %s step: exactly topics create makes it (compacted, with the input's partitions); remove it from topics",
			v.q(tp, name), stage, step)
	}
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
