package topology

import (
	"strings"
	"testing"
)

func TestParseStateful(t *testing.T) {
	for _, tc := range []struct {
		name, step   string
		want         Stateful
		store, topic string
	}{
		{name: "scalar", step: "      - stateful: running-balance\n", want: Stateful{Func: "running-balance"},
			store: "running-balance", topic: "exactly-s-running-balance-changelog"},
		{name: "mapping", step: "      - stateful: { func: running-balance, store: balances }\n", want: Stateful{Func: "running-balance", Store: "balances"},
			store: "balances", topic: "exactly-s-balances-changelog"},
		{name: "mapping without store", step: "      - stateful: { func: sum }\n", want: Stateful{Func: "sum"},
			store: "sum", topic: "exactly-s-sum-changelog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("t.yaml", []byte(head+"stages:\n"+stage+"    transform:\n      - filter: value.ok\n"+tc.step+"      - key: value.id\n"), nil)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			st := &f.Stages[0]
			if sf := st.statefulStep(); sf == nil || *sf != tc.want {
				t.Fatalf("statefulStep() = %+v, want %+v", sf, tc.want)
			}
			if op := st.Transform[1].Op(); op != "stateful" {
				t.Fatalf("Op() = %q, want stateful", op)
			}
			if got := st.StateStore(); got != tc.store {
				t.Fatalf("StateStore() = %q, want %q", got, tc.store)
			}
			if got := f.StateTopics(); len(got) != 1 || got[0].Name != tc.topic || got[0].Config["cleanup.policy"] != "compact" {
				t.Fatalf("StateTopics() = %+v, want compacted %s", got, tc.topic)
			}
		})
	}
}

func TestValidateStateful(t *testing.T) {
	long := strings.Repeat("x", 240)
	checkSteps(t, []stepsCase{
		{
			name:  "empty",
			steps: "      - stateful: {}\n",
			want:  []string{"t.yaml:14:19: stages[0].transform[0].stateful.func: required: the name of a Go transform registered with transform.RegisterStateful (e.g. stateful: running-balance)"},
		},
		{
			name:  "empty name",
			steps: "      - stateful: \"\"\n",
			want:  []string{"t.yaml:14:19: stages[0].transform[0].stateful.func: required: the name of a Go transform registered with transform.RegisterStateful (e.g. stateful: running-balance)"},
		},
		{
			name:  "store only",
			steps: "      - stateful: { store: balances }\n",
			want:  []string{"t.yaml:14:19: stages[0].transform[0].stateful.func: required: the name of a Go transform registered with transform.RegisterStateful (e.g. stateful: running-balance)"},
		},
		{
			name:  "a sequence",
			steps: "      - stateful: [a]\n",
			want:  []string{"t.yaml:14:19: stages[0].transform[0].stateful: expected a function name or a mapping, got a sequence"},
		},
		{
			name:  "unknown field",
			steps: "      - stateful: { func: f, retention: 1d }\n",
			want:  []string{"t.yaml:14:30: stages[0].transform[0].stateful.retention: unknown field (valid: func, store)"},
		},
		{
			name:  "a name unfit for a topic",
			steps: "      - stateful: pkg/sum\n",
			want:  []string{`t.yaml:14:19: stages[0].transform[0].stateful: store (the function's name, when store is not set) "pkg/sum" cannot be part of the changelog topic's name exactly-s-<store>-changelog: use only letters, digits, '.', '_' and '-' (set store: <name>)`},
		},
		{
			name:  "a store unfit for a topic",
			steps: "      - stateful: { func: sum, store: \"my store\" }\n",
			want:  []string{`t.yaml:14:39: stages[0].transform[0].stateful.store: store "my store" cannot be part of the changelog topic's name exactly-s-<store>-changelog: use only letters, digits, '.', '_' and '-' (set store: <name>)`},
		},
		{
			name:  "a changelog name too long",
			steps: "      - stateful: { func: sum, store: " + long + " }\n",
			want:  []string{`t.yaml:14:39: stages[0].transform[0].stateful.store: store "` + long[:64] + `..." cannot be part of the changelog topic's name exactly-s-<store>-changelog: longer than 249 characters (set store: <name>)`},
		},
		{
			name:  "a reserved store",
			steps: "      - stateful: { func: dd, store: dedupe }\n",
			want:  []string{`t.yaml:14:38: stages[0].transform[0].stateful.store: store "dedupe" is the name of the dedupe step's store; name the store apart (store: <name>)`},
		},
		{
			name:  "two",
			steps: "      - stateful: a\n      - stateful: b\n",
			want:  []string{"t.yaml:15:19: stages[0].transform[1].stateful: a stage has at most one stateful step, and this one also has transform[0] stateful (one state store per stage: split it into two stages)"},
		},
		{
			name:  "with dedupe",
			steps: "      - dedupe: { id: value.id, retention: 1h }\n      - stateful: a\n",
			want:  []string{"t.yaml:15:19: stages[0].transform[1].stateful: a stage has at most one stateful step, and this one also has transform[0] dedupe (one state store per stage: split it into two stages)"},
		},
		{
			name:  "with aggregate",
			steps: "      - stateful: a\n      - aggregate: { window: { tumbling: 1m }, aggregations: { n: count } }\n",
			want:  []string{"t.yaml:14:19: stages[0].transform[0].stateful: a stage has at most one stateful step, and this one also has transform[1] aggregate (one state store per stage: split it into two stages)"},
		},
		{
			name:  "after a key step",
			steps: "      - key: value.customer\n      - stateful: a\n",
			want:  []string{"t.yaml:14:14: stages[0].transform[0].key: a key step before the stateful step in the same stage: its store is partitioned by the input record's key, so re-key in an earlier stage (see exactly help stateful, \"The keying rule\")"},
		},
	})

	t.Run("changelog declared", func(t *testing.T) {
		check(t, head+"  - { name: exactly-s-balances-changelog, partitions: 1 }\nstages:\n"+stage+"    transform:\n      - stateful: { func: sum, store: balances }\n", nil,
			`t.yaml:8:13: topics[3].name: topic "exactly-s-balances-changelog" is the changelog of stage s's stateful step: exactly topics create makes it (compacted, with the input's partitions); remove it from topics`)
	})
}

// TestValidateChangelogCollision: stage and store names may both hold '-',
// so two state stores of different stages can name one changelog topic;
// validate refuses the second, which would restore the first's entries
// (stage a-b store c against stage a store b-c, and a dedupe store
// against a stateful store named x-dedupe).
func TestValidateChangelogCollision(t *testing.T) {
	two := func(first, firstStep, second, secondStep string) string {
		return head + "  - { name: mid, partitions: 1 }\nstages:\n" +
			"  - name: " + first + "\n    input:  { topic: in }\n    output: { topic: mid }\n    dead_letter: { topic: dlq }\n    transform:\n      - " + firstStep + "\n" +
			"  - name: " + second + "\n    input:  { topic: mid }\n    output: { topic: out }\n    dead_letter: { topic: dlq }\n    transform:\n      - " + secondStep + "\n"
	}
	for _, tc := range []struct {
		name string
		src  string
		want string
	}{
		{
			name: "two stateful stores",
			src:  two("a-b", "stateful: { func: f, store: c }", "a", "stateful: { func: f, store: b-c }"),
			want: `t.yaml:21:19: stages[1].transform[0].stateful: changelog topic exactly-a-b-c-changelog is also the changelog of stage a-b's stateful step (15:19): two stores cannot share one changelog; rename this stage or its store`,
		},
		{
			name: "dedupe and a stateful store",
			src:  two("a-x", "dedupe: { id: value.id, retention: 1h }", "a", "stateful: { func: f, store: x-dedupe }"),
			want: `t.yaml:21:19: stages[1].transform[0].stateful: changelog topic exactly-a-x-dedupe-changelog is also the changelog of stage a-x's dedupe step (15:17): two stores cannot share one changelog; rename this stage or its store`,
		},
		{
			name: "a stateful store and an aggregate",
			src:  two("a", "stateful: { func: f, store: x-aggregate }", "a-x", "aggregate: { window: { tumbling: 1m }, aggregations: { n: count } }"),
			want: `t.yaml:21:20: stages[1].transform[0].aggregate: changelog topic exactly-a-x-aggregate-changelog is also the changelog of stage a's stateful step (15:19): two stores cannot share one changelog; rename this stage or its store`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) { check(t, tc.src, nil, tc.want) })
	}
	t.Run("apart", func(t *testing.T) {
		check(t, two("a-b", "stateful: { func: f, store: c }", "a", "stateful: { func: f, store: c }"), nil)
	})
}
