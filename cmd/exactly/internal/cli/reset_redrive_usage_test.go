package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/processor/deadletter"
)

// TestResetRedriveUsage: flag combinations that describe no reset or
// redrive exit 2 with a message, before any network I/O (the broker in the
// file does not exist).
func TestResetRedriveUsage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.yaml")
	src := strings.Replace(acceptHead, "127.0.0.1:9092", "127.0.0.1:1", 1) + `stages:
  - { name: s, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EXACTLY_BROKERS", "")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"reset without target", []string{"reset", "--topology", path, "--stage", "s"}, "give exactly one of --to-earliest"},
		{"reset with two targets", []string{"reset", "--topology", path, "--stage", "s", "--to-earliest", "--to-latest"}, "give exactly one of --to-earliest"},
		{"reset stage and sink", []string{"reset", "--topology", path, "--stage", "s", "--sink", "k", "--to-earliest"}, "give exactly one of --stage NAME and --sink NAME"},
		{"reset bad time", []string{"reset", "--topology", path, "--stage", "s", "--to-datetime", "yesterday"}, "want RFC 3339"},
		{"reset bad offsets", []string{"reset", "--topology", path, "--stage", "s", "--to-offsets", "0"}, "want PARTITION=OFFSET"},
		{"reset unknown stage", []string{"reset", "--topology", path, "--stage", "nope", "--to-earliest"}, `has no stage "nope"`},
		{"reset without topology", []string{"reset", "--stage", "s", "--to-earliest"}, "--topology FILE is required"},
		{"redrive without stage", []string{"redrive", "--topology", path}, "--stage NAME is required"},
		{"redrive zero limit", []string{"redrive", "--topology", path, "--stage", "s", "--max-redrives", "0"}, "--max-redrives must be at least 1"},
		{"redrive unknown stage", []string{"redrive", "--topology", path, "--stage", "nope"}, `has no stage "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Run(context.Background(), tt.args, &stdout, &stderr)
			if code != exitUsage || !strings.Contains(stderr.String(), tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), exitUsage, tt.want)
			}
		})
	}
}

// TestRedriveRefusesSharedInput: redrive writes to the stage's input
// topic, so a second reader of that topic would get the records twice; it
// exits 2 naming that reader, before any network I/O.
func TestRedriveRefusesSharedInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.yaml")
	src := strings.Replace(acceptHead, "127.0.0.1:9092", "127.0.0.1:1", 1) + `  - { name: out2, partitions: 1 }
stages:
  - { name: a, input: { topic: in }, output: { topic: out }, dead_letter: { topic: dlq } }
  - { name: b, input: { topic: in }, output: { topic: out2 }, dead_letter: { topic: dlq } }
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EXACTLY_BROKERS", "")
	var stdout, stderr strings.Builder
	code := Run(context.Background(), []string{"redrive", "--topology", path, "--stage", "a"}, &stdout, &stderr)
	want := "in, the input of stage a, is also read by stage b"
	if code != exitUsage || !strings.Contains(stderr.String(), want) || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, no report and %q", code, stdout.String(), stderr.String(), exitUsage, want)
	}
}

// TestRedriveHelpTimestamp: the help says what timestamp a redriven record
// gets (the time of writing) and where its original one goes.
func TestRedriveHelpTimestamp(t *testing.T) {
	desc := redriveCommand.desc
	for _, want := range []string{"time of writing", deadletter.HeaderRedriveTimestamp} {
		if !strings.Contains(desc, want) {
			t.Errorf("redrive help does not say %q:\n%s", want, desc)
		}
	}
	if strings.Contains(desc, "timestamp and partition") {
		t.Errorf("redrive help says the original timestamp is kept:\n%s", desc)
	}
}
