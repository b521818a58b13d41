package topology

import (
	"slices"
	"strings"
)

// Join is the join step: a stream-table join as of event time.
//
//   - join:
//     table: customers                 # a compacted topic, keyed by customer ID
//     key: value.customer_id           # the lookup key
//     as: customer                     # value.customer gets the table's value
//     missing: "null"                  # or drop (the default), dead_letter
//     history_retention: 7d
//
// The table is read read_committed from its topic into the stage's local
// state, versioned: each key keeps its values with their record
// timestamps (a tombstone deletes the key from its timestamp on), and a
// lookup reads the value as of the input record's timestamp. In
// co-partitioned mode, input partition p looks up table partition p: the
// table topic must have the input's partition count and be keyed the
// same way (checked at start). In global mode every instance holds every
// table partition, and a lookup reads them all. The topic itself is the
// table's changelog: nothing is written to it.
type Join struct {
	// Table is the table's topic.
	Table string `yaml:"table"`
	// Key is a CEL expression giving the lookup key: a string as its
	// text, any other value but null as its JSON text.
	Key string `yaml:"key"`
	// As is the field of the value that gets the table's value, dotted
	// for a nested one.
	As string `yaml:"as"`
	// Missing says what a record whose key the table does not hold at
	// its time becomes: JoinDrop (the default), JoinNull or
	// JoinDeadLetter.
	Missing string `yaml:"missing"`
	// Mode is JoinCoPartitioned (the default) or JoinGlobal.
	Mode string `yaml:"mode"`
	// HistoryRetention is how far behind the newest timestamp read from
	// a table partition the earlier versions of its keys are kept.
	HistoryRetention Retention `yaml:"history_retention"`
}

// Missing rules and modes of a join step.
const (
	JoinDrop          = "drop"
	JoinNull          = "null"
	JoinDeadLetter    = "dead_letter"
	JoinCoPartitioned = "co_partitioned"
	JoinGlobal        = "global"
)

// JoinStep returns the stage's join step, nil if it has none.
func (s *Stage) JoinStep() *Join {
	for i := range s.Transform {
		if s.Transform[i].Op() == "join" {
			return &s.Transform[i].Join
		}
	}
	return nil
}

// join: a stream-table join as of event time (see Join).
var joinKind = stepKind{
	name:  "join",
	set:   func(st *Step) bool { return st.Join != (Join{}) },
	bare:  true,
	check: (*validator).join,
}

// join checks a join step.
func (v *validator) join(at stepAt) {
	j, jp := at.st.Join, at.sp+".join"
	for k, o := range at.s.Transform {
		op := o.Op()
		if k == at.i || !slices.Contains([]string{"dedupe", "aggregate", "stateful", "join"}, op) || (op == "join" && k > at.i) {
			continue
		}
		v.report(jp, "a stage has at most one stateful step, and this one also has transform[%d] %s (one state store per stage: split it into two stages)", k, op)
		break
	}
	for k, o := range at.s.Transform[:at.i] {
		if j.Mode != JoinGlobal && (o.Op() == "key" || o.Op() == "explode") {
			v.report(jp, "transform[%d] %s comes before the join in the same stage: in co_partitioned mode the record must still be in the input partition whose table partition it looks up (join first, then re-key; or mode: global)", k, o.Op())
			break
		}
	}
	v.joinTable(at)
	if mp := jp + ".missing"; v.d.null[mp] {
		// Bare null is YAML's null, not the rule "null": it would
		// silently mean the default, drop.
		v.report(mp, `is YAML's null, not a rule: write missing: "null" (quoted) to keep the record with null, or drop or dead_letter`)
	}
	if strings.TrimSpace(j.Key) == "" {
		v.report(jp+".key", "required: an expression for the lookup key (e.g. key: value.customer_id)")
	}
	if strings.TrimSpace(j.As) == "" {
		v.report(jp+".as", "required: the field that gets the table's value (e.g. as: customer)")
	} else if slices.Contains(strings.Split(j.As, "."), "") {
		v.report(jp+".as", "%s is not a field path: no empty part (e.g. as: enrich.customer)", v.q(jp+".as", j.As))
	}
	if rp := jp + ".history_retention"; !v.has(rp) {
		v.report(rp, "required: how far behind the table's newest timestamp earlier versions are kept (e.g. history_retention: 7d)")
	} else if j.HistoryRetention.Duration <= 0 {
		v.report(rp, "must be positive (got %s)", v.num(rp, j.HistoryRetention.String()))
	}
}

// joinTable checks a join step's table topic.
func (v *validator) joinTable(at stepAt) {
	j, jp := at.st.Join, at.sp+".join"
	switch {
	case strings.TrimSpace(j.Table) == "":
		v.report(jp+".table", "required: the table's topic, compacted and keyed by the lookup key (e.g. table: customers)")
	case j.Table == at.s.Input.Topic:
		v.report(jp+".table", "the table %s is the stage's input: a stage cannot join its input with itself", v.q(jp+".table", j.Table))
	case j.Table == at.s.Output.Topic || j.Table == at.s.DeadLetter.Topic:
		// The join reads its table up to what was written before each
		// poll, waiting for open transactions: its own among them.
		v.report(jp+".table", "the table %s is the stage's output or dead-letter topic: a stage cannot join with what it writes (its join would wait for its own open transaction)", v.q(jp+".table", j.Table))
	case topicNameProblem(j.Table) != "":
		v.report(jp+".table", "%s is not a topic name: %s", v.q(jp+".table", j.Table), topicNameProblem(j.Table))
	default:
		if i := v.declaredIndex(j.Table); i >= 0 {
			if pol, ok := v.f.Topics[i].Config["cleanup.policy"]; !ok || pol != "compact" {
				v.report(jp+".table", "table topic %s must be compacted alone (set config: { cleanup.policy: compact } on topics[%d]): with delete, expired segments would lose table entries", v.q(jp+".table", j.Table), i)
			}
		}
	}
}
