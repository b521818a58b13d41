package topology

import (
	"testing"
	"time"
)

func TestParseRetention(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "7d", want: 7 * 24 * time.Hour},
		{in: "36h", want: 36 * time.Hour},
		{in: "1d12h30m15s", want: 36*time.Hour + 30*time.Minute + 15*time.Second},
		{in: "90s", want: 90 * time.Second},
		{in: "0s", want: 0},
		{in: "", bad: true},
		{in: "7", bad: true},
		{in: "d", bad: true},
		{in: "7w", bad: true},
		{in: "1.5d", bad: true},
		{in: "-1d", bad: true},
		{in: "100ms", bad: true},
		{in: "99999999d", bad: true},
		{in: "1d 2h", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseRetention(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("parseRetention(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseRetention(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseDedupe(t *testing.T) {
	ok := head + "stages:\n" + stage + "    transform:\n      - dedupe: { id: value.event_id, retention: 7d }\n      - filter: value.amount > 0\n"
	f, err := Parse("t.yaml", []byte(ok), nil)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	d := f.Stages[0].DedupeStep()
	if d == nil || d.ID != "value.event_id" || d.Retention.Duration != 7*24*time.Hour {
		t.Fatalf("DedupeStep() = %+v", d)
	}
	if op := f.Stages[0].Transform[0].Op(); op != "dedupe" {
		t.Fatalf("Op() = %q, want dedupe", op)
	}
	want := []Topic{{Name: "exactly-s-dedupe-changelog", Partitions: 1, ReplicationFactor: -1, Config: map[string]string{"cleanup.policy": "compact"}}}
	if got := f.StateTopics(); len(got) != 1 || got[0].Name != want[0].Name || got[0].Partitions != 1 || got[0].Config["cleanup.policy"] != "compact" {
		t.Fatalf("StateTopics() = %+v, want %+v", got, want)
	}

	checkSteps(t, []stepsCase{
		{
			name:  "missing id and retention",
			steps: "      - dedupe: {}\n",
			want: []string{
				"t.yaml:14:17: stages[0].transform[0].dedupe.id: required: an expression for the record's event ID (e.g. id: value.event_id)",
				"t.yaml:14:17: stages[0].transform[0].dedupe.retention: required: how long an ID is remembered, in stream time (e.g. retention: 7d)",
			},
		},
		{
			name:  "bad retention",
			steps: "      - dedupe: { id: value.id, retention: 7days }\n",
			want:  []string{"t.yaml:14:44: stages[0].transform[0].dedupe.retention: invalid retention \"7days\" (want numbers with units d, h, m or s, such as 7d, 12h or 1d12h)"},
		},
		{
			name:  "retention over 100 years",
			steps: "      - dedupe: { id: value.id, retention: 36501d }\n",
			want:  []string{"t.yaml:14:44: stages[0].transform[0].dedupe.retention: retention \"36501d\" is longer than 100 years (36500d), the most a retention may be"},
		},
		{
			// A product past int64 would wrap to a small duration.
			name:  "retention overflowing int64",
			steps: "      - dedupe: { id: value.id, retention: 999999999999999d }\n",
			want:  []string{"t.yaml:14:44: stages[0].transform[0].dedupe.retention: retention \"999999999999999d\" is longer than 100 years (36500d), the most a retention may be"},
		},
		{
			name:  "zero retention",
			steps: "      - dedupe: { id: value.id, retention: 0s }\n",
			want:  []string{"t.yaml:14:44: stages[0].transform[0].dedupe.retention: must be positive (got 0s)"},
		},
		{
			name:  "not first",
			steps: "      - filter: value.ok\n      - dedupe: { id: value.id, retention: 1h }\n",
			want:  []string{"t.yaml:15:17: stages[0].transform[1].dedupe: dedupe must be the stage's first step: it decides whether an input record is processed at all (move it to transform[0])"},
		},
		{
			name:  "two",
			steps: "      - dedupe: { id: value.id, retention: 1h }\n      - dedupe: { id: value.id, retention: 1h }\n",
			want:  []string{"t.yaml:15:17: stages[0].transform[1].dedupe: a stage has at most one dedupe step (this is its second)"},
		},
		{
			name:  "two operations",
			steps: "      - dedupe: { id: value.id, retention: 1h }\n        filter: value.ok\n",
			want:  []string{"t.yaml:14:9: stages[0].transform[0]: a step has one operation, this one has filter and dedupe (split it into steps)"},
		},
		{
			name:  "unknown field",
			steps: "      - dedupe: { id: value.id, retention: 1h, window: 5m }\n",
			want:  []string{"t.yaml:14:48: stages[0].transform[0].dedupe.window: unknown field (valid: id, retention)"},
		},
	})

	t.Run("changelog declared", func(t *testing.T) {
		src := head + "  - { name: exactly-s-dedupe-changelog, partitions: 1 }\nstages:\n" + stage + "    transform:\n      - dedupe: { id: value.id, retention: 1h }\n"
		check(t, src, nil, `t.yaml:8:13: topics[3].name: topic "exactly-s-dedupe-changelog" is the changelog of stage s's dedupe step: exactly topics create makes it (compacted, with the input's partitions); remove it from topics`)
	})
}
