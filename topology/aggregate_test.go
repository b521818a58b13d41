package topology

import (
	"fmt"
	"testing"
	"time"
)

func TestParseAggregate(t *testing.T) {
	ok := head + "stages:\n" + stage + `    transform:
      - filter: value.amount > 0
      - aggregate:
          window: { hopping: { size: 5m, advance: 1m } }
          time: value.ts
          grace: 30s
          aggregations: { n: count, total: { sum: value.amount }, lo: { min: value.amount }, first_id: { first: value.id } }
          emit: update
`
	f, err := Parse("t.yaml", []byte(ok), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	a := f.Stages[0].AggregateStep()
	if a == nil {
		t.Fatal("AggregateStep() = nil")
	}
	if size, adv := a.Window.Size(); size != 5*time.Minute || adv != time.Minute || a.Grace.Duration != 30*time.Second || a.Emit != emitUpdate || a.Time != "value.ts" {
		t.Fatalf("AggregateStep() = %+v", a)
	}
	for name, want := range map[string][2]string{"n": {"count", ""}, "total": {"sum", "value.amount"}, "lo": {"min", "value.amount"}, "first_id": {"first", "value.id"}} {
		if k, e := a.Aggregations[name].Kind(); k != want[0] || e != want[1] {
			t.Errorf("aggregation %s = %s %q, want %v", name, k, e, want)
		}
	}
	if got := f.StateTopics(); len(got) != 1 || got[0].Name != "exactly-s-aggregate-changelog" || got[0].Config["cleanup.policy"] != "compact" {
		t.Fatalf("StateTopics() = %+v", got)
	}

	agg := func(body string) string { return "      - aggregate: " + body + "\n" }
	good := "{ window: { tumbling: 1m }, aggregations: { n: count } }"
	checkSteps(t, []stepsCase{
		{name: "tumbling, defaults", steps: agg(good)},
		{name: "empty", steps: "      - aggregate: {}\n", want: []string{
			"t.yaml:14:20: stages[0].transform[0].aggregate.window: required: tumbling: <size>, hopping: { size: <size>, advance: <step> }, or session: { gap: <gap> } (e.g. window: { tumbling: 1m })",
			"t.yaml:14:20: stages[0].transform[0].aggregate.aggregations: required: at least one result, e.g. aggregations: { n: count, total: { sum: value.amount } }",
		}},
		{name: "not last", steps: agg(good) + "      - filter: value.ok\n", want: []string{
			`t.yaml:14:20: stages[0].transform[0].aggregate: aggregate must be the stage's last step: its outputs are window results, not records (move later steps to a stage that reads "out")`,
		}},
		{name: "key step before", steps: "      - key: value.customer\n" + agg(good), want: []string{
			"t.yaml:14:14: stages[0].transform[0].key: a key step before aggregate in the same stage: state is partitioned by the input record's key, so re-key in an earlier stage (see exactly help stateful, \"The keying rule\")",
		}},
		{name: "with dedupe", steps: "      - dedupe: { id: value.id, retention: 1h }\n" + agg(good), want: []string{
			"t.yaml:15:20: stages[0].transform[1].aggregate: a stage has at most one stateful step: dedupe in one stage, aggregate in a stage that reads its output",
		}},
		{name: "both windows", steps: agg("{ window: { tumbling: 1m, hopping: { size: 2m, advance: 1m } }, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:30: stages[0].transform[0].aggregate.window: a window is tumbling or hopping, not both",
		}},
		{name: "session and tumbling", steps: agg("{ window: { tumbling: 1m, session: { gap: 5m } }, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:30: stages[0].transform[0].aggregate.window: a window is session, or tumbling or hopping, not both",
		}},
		{name: "session without gap", steps: agg("{ window: { session: {} }, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:41: stages[0].transform[0].aggregate.window.session.gap: required: the longest lull in event time within a session, e.g. gap: 5m",
		}},
		{name: "session gap zero", steps: agg("{ window: { session: { gap: 0s } }, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:48: stages[0].transform[0].aggregate.window.session.gap: must be a positive whole number of milliseconds (got 0s)",
		}},
		{name: "session gap negative, negative grace", steps: agg("{ window: { session: { gap: -1m } }, grace: -1s, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:48: stages[0].transform[0].aggregate.window.session.gap: must be a positive whole number of milliseconds (got -1m0s)",
			"t.yaml:14:64: stages[0].transform[0].aggregate.grace: must be a non-negative whole number of milliseconds (got -1s)",
		}},
		{name: "session, every aggregation", steps: agg("{ window: { session: { gap: 5m } }, grace: 1m, aggregations: { n: count, s: { sum: value.a }, lo: { min: value.a }, hi: { max: value.a }, m: { avg: value.a }, f: { first: value.a }, l: { last: value.a } }, emit: update }")},
		{name: "hopping advance beyond size", steps: agg("{ window: { hopping: { size: 1m, advance: 2m } }, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:62: stages[0].transform[0].aggregate.window.hopping.advance: must not exceed size 1m0s (windows would leave gaps)",
		}},
		{name: "hopping without advance, sub-millisecond", steps: agg("{ window: { hopping: { size: 1us } }, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:41: stages[0].transform[0].aggregate.window.hopping.advance: required: how far apart windows start",
			"t.yaml:14:49: stages[0].transform[0].aggregate.window.hopping.size: must be a positive whole number of milliseconds (got 1µs)",
		}},
		{name: "bad aggregations and emit", steps: agg("{ window: { tumbling: 1m }, aggregations: { a: counts, b: { sum: x, max: y }, c: { median: x }, d: { avg: ' ' } }, emit: sometimes }"), want: []string{
			`t.yaml:14:67: stages[0].transform[0].aggregate.aggregations.a: invalid aggregation "counts" (want count, or a mapping of one of sum, min, max, avg, first, last to an expression)`,
			"t.yaml:14:78: stages[0].transform[0].aggregate.aggregations.b: want count, or one of sum, min, max, avg, first, last with an expression (e.g. { sum: value.amount })",
			"t.yaml:14:101: stages[0].transform[0].aggregate.aggregations.c: want count, or one of sum, min, max, avg, first, last with an expression (e.g. { sum: value.amount })",
			"t.yaml:14:103: stages[0].transform[0].aggregate.aggregations.c.median: unknown field (valid: sum, min, max, avg, first, last)",
			"t.yaml:14:119: stages[0].transform[0].aggregate.aggregations.d: expression must not be empty",
			`t.yaml:14:141: stages[0].transform[0].aggregate.emit: must be final or update (got "sometimes")`,
		}},
		{name: "negative grace", steps: agg("{ window: { tumbling: 1m }, grace: -1s, aggregations: { n: count } }"), want: []string{
			"t.yaml:14:55: stages[0].transform[0].aggregate.grace: must be a non-negative whole number of milliseconds (got -1s)",
		}},
	})
}

// TestAggregateKeyingRule: an aggregate stage grouping on an expression
// must read a topic that the stage writing it keys by that expression.
func TestAggregateKeyingRule(t *testing.T) {
	const top = `version: 1
kafka:
  brokers: ["127.0.0.1:9092"]
topics:
  - { name: in, partitions: 2 }
  - { name: mid, partitions: 2 }
  - { name: out, partitions: 1 }
  - { name: dlq, partitions: 1 }
stages:
  - name: rekey
    input: { topic: in }
    output: { topic: mid }
    dead_letter: { topic: dlq }
    transform:
      - %s
  - name: agg
    input: { topic: mid }
    output: { topic: out }
    dead_letter: { topic: dlq }
    transform:
      - aggregate: { window: { tumbling: 1m }, group_by: value.customer, aggregations: { n: count } }
`
	for _, tc := range []struct {
		name, step string
		want       []string
	}{
		{name: "re-keyed by it", step: "key: value.customer"},
		{name: "re-keyed by something else", step: "key: value.region", want: []string{
			`t.yaml:21:58: stages[1].transform[0].aggregate.group_by: groups on "value.customer", but input topic "mid" is written by stages[0] (rekey), which keys it by "value.region": state is partitioned by the record key, so the stage writing the input must end with ` + "`- key: value.customer`",
		}},
		{name: "not re-keyed", step: "filter: value.ok", want: []string{
			`t.yaml:21:58: stages[1].transform[0].aggregate.group_by: groups on "value.customer", but input topic "mid" is written by stages[0] (rekey), which does not re-key it: state is partitioned by the record key, so the stage writing the input must end with ` + "`- key: value.customer`",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, fmtf(top, tc.step), nil, tc.want...)
		})
	}
}

func fmtf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
