package topology

import (
	"strings"
	"testing"
	"time"
)

func TestParseJoin(t *testing.T) {
	src := head + "stages:\n" + stage + "    transform:\n      - join: { table: customers, key: value.customer_id, as: customer, missing: \"null\", history_retention: 7d }\n"
	f, err := Parse("t.yaml", []byte(src), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	j := f.Stages[0].JoinStep()
	if j == nil || j.Table != "customers" || j.Key != "value.customer_id" || j.As != "customer" || j.Missing != JoinNull || j.HistoryRetention.Duration != 7*24*time.Hour {
		t.Fatalf("JoinStep() = %+v", j)
	}
	if got := f.StateTopics(); len(got) != 0 {
		t.Fatalf("StateTopics() = %+v, want none: the table topic is the join's changelog", got)
	}
}

func TestValidateJoin(t *testing.T) {
	checkSteps(t, []stepsCase{
		{
			name:  "missing settings",
			steps: "      - join: {}\n",
			want: []string{
				"t.yaml:14:15: stages[0].transform[0].join.table: required: the table's topic, compacted and keyed by the lookup key (e.g. table: customers)",
				"t.yaml:14:15: stages[0].transform[0].join.key: required: an expression for the lookup key (e.g. key: value.customer_id)",
				"t.yaml:14:15: stages[0].transform[0].join.as: required: the field that gets the table's value (e.g. as: customer)",
				"t.yaml:14:15: stages[0].transform[0].join.history_retention: required: how far behind the table's newest timestamp earlier versions are kept (e.g. history_retention: 7d)",
			},
		},
		{
			name:  "global mode allows a key step before",
			steps: "      - key: value.c\n      - join: { table: customers, key: value.c, as: c, mode: global, history_retention: 1d }\n",
		},
		{
			name:  "bad missing",
			steps: "      - join: { table: customers, key: value.c, as: c, missing: skip, history_retention: 1d }\n",
			want:  []string{`t.yaml:14:65: stages[0].transform[0].join.missing: unknown missing rule "skip" (valid: drop, null, dead_letter)`},
		},
		{
			name:  "bare null missing",
			steps: "      - join: { table: customers, key: value.c, as: c, missing: null, history_retention: 1d }\n",
			want:  []string{`t.yaml:14:65: stages[0].transform[0].join.missing: is YAML's null, not a rule: write missing: "null" (quoted) to keep the record with null, or drop or dead_letter`},
		},
		{
			name:  "key step before",
			steps: "      - key: value.c\n      - join: { table: customers, key: value.c, as: c, history_retention: 1d }\n",
			want:  []string{"t.yaml:15:15: stages[0].transform[1].join: transform[0] key comes before the join in the same stage: in co_partitioned mode the record must still be in the input partition whose table partition it looks up (join first, then re-key; or mode: global)"},
		},
		{
			name:  "with dedupe",
			steps: "      - dedupe: { id: value.id, retention: 1h }\n      - join: { table: customers, key: value.c, as: c, history_retention: 1d }\n",
			want:  []string{"t.yaml:15:15: stages[0].transform[1].join: a stage has at most one stateful step, and this one also has transform[0] dedupe (one state store per stage: split it into two stages)"},
		},
		{
			name:  "table is the input",
			steps: "      - join: { table: in, key: value.c, as: c, history_retention: 1d }\n",
			want:  []string{`t.yaml:14:24: stages[0].transform[0].join.table: the table "in" is the stage's input: a stage cannot join its input with itself`},
		},
		{
			name:  "table is the output",
			steps: "      - join: { table: out, key: value.c, as: c, history_retention: 1d }\n",
			want:  []string{`t.yaml:14:24: stages[0].transform[0].join.table: the table "out" is the stage's output or dead-letter topic: a stage cannot join with what it writes (its join would wait for its own open transaction)`},
		},
		{
			name:  "table is the dead-letter topic",
			steps: "      - join: { table: dlq, key: value.c, as: c, history_retention: 1d }\n",
			want:  []string{`t.yaml:14:24: stages[0].transform[0].join.table: the table "dlq" is the stage's output or dead-letter topic: a stage cannot join with what it writes (its join would wait for its own open transaction)`},
		},
		{
			name:  "zero retention",
			steps: "      - join: { table: customers, key: value.c, as: c, history_retention: 0s }\n",
			want:  []string{"t.yaml:14:75: stages[0].transform[0].join.history_retention: must be positive (got 0s)"},
		},
		{
			name:  "empty path part",
			steps: "      - join: { table: customers, key: value.c, as: a..b, history_retention: 1d }\n",
			want:  []string{`t.yaml:14:53: stages[0].transform[0].join.as: "a..b" is not a field path: no empty part (e.g. as: enrich.customer)`},
		},
	})
	t.Run("declared table not compacted", func(t *testing.T) {
		// A topic declared first, without a cleanup.policy: the stage's
		// lines move down by one.
		src := strings.Replace(head, "topics:\n", "topics:\n  - { name: customers, partitions: 1 }\n", 1) +
			"stages:\n" + stage + "    transform:\n      - join: { table: customers, key: value.c, as: c, history_retention: 1d }\n"
		check(t, src, nil, `t.yaml:15:24: stages[0].transform[0].join.table: table topic "customers" must be compacted alone (set config: { cleanup.policy: compact } on topics[0]): with delete, expired segments would lose table entries`)
	})
}
