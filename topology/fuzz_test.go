package topology

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse checks that Parse never panics and keeps its contract: a File or
// a non-empty, sorted Errors, never both, and no expanded secret in messages.
func FuzzParse(f *testing.F) {
	f.Add(example)
	f.Add(head + "stages:\n" + stage)
	f.Add("")
	f.Add("- a\n")
	f.Add("a: &a {b: *a}\n")
	f.Add("x: &x {<<: [*x, *x]}\n")
	f.Add(head + "stages:\n  - <<: &s { name: s }\n    <<: [*s, *s]\n")
	f.Add(head + `  - { name: "${SECRET}", partitions: "${SECRET:-1}" }` + "\n")
	f.Add("version: 1\nkafka: { brokers: [\"${SECRET}:$$1\"] }\n")
	f.Add("stages:\n  - { name: a, input: { topic: t }, output: { topic: u } }\n  - { name: b, input: { topic: u }, output: { topic: t } }\n")
	f.Fuzz(func(t *testing.T, src string) {
		lookup := env(map[string]string{"SECRET": "s3cr3t-value", "EXACTLY_BROKERS_UNUSED": "x"})
		file, err := Parse("f.yaml", []byte(src), lookup)
		if err == nil {
			if file == nil {
				t.Fatal("nil file and nil error")
			}
			if got := len(file.StagesInOrder()); got != len(file.Stages) {
				t.Fatalf("StagesInOrder returned %d of %d stages", got, len(file.Stages))
			}
			return
		}
		if file != nil {
			t.Fatal("file returned with an error")
		}
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Fatalf("error %T %v is not a non-empty Errors", err, err)
		}
		for i, e := range es {
			if e.Msg == "" {
				t.Fatalf("empty message in %v", err)
			}
			if i > 0 && (e.Pos.Line < es[i-1].Pos.Line || e.Pos.Line == es[i-1].Pos.Line && e.Pos.Col < es[i-1].Pos.Col) {
				t.Fatalf("errors not sorted:\n%v", err)
			}
		}
		if strings.Contains(err.Error(), "s3cr3t-value") && !strings.Contains(src, "s3cr3t-value") {
			t.Fatalf("secret in error:\n%v", err)
		}
	})
}
