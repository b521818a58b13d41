package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/cmd/exactly/docs"
	"github.com/exactly-io/exactly/topology"
)

var update = flag.Bool("update", false, "rewrite cmd/exactly/docs/cli-reference.md from the commands")

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// Help asked for, as `exactly CMD -h` or `exactly help CMD`, is printed on
// stdout with exit code 0, so that `exactly help run | grep state-dir`
// finds the flag.
func TestHelpOnStdout(t *testing.T) {
	for _, name := range sortedCommandNames() {
		for _, args := range [][]string{
			append(strings.Fields(name), "-h"),
			append(strings.Fields(name), "--help"),
			append([]string{"help"}, strings.Fields(name)...),
		} {
			code, stdout, stderr := runCLI(args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "Usage: exactly "+name) {
				t.Errorf("exactly %s: exit %d, stderr %q, stdout starts %q", strings.Join(args, " "), code, stderr, stdout[:min(len(stdout), 60)])
			}
		}
	}
	if _, stdout, _ := runCLI("help", "run"); !strings.Contains(stdout, "--state-dir DIR") {
		t.Errorf("exactly help run lacks --state-dir DIR:\n%s", stdout)
	}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, stderr := runCLI(args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Commands:") {
			t.Errorf("exactly %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
	}
}

// A usage error is printed on stderr with the help, and exit code 2.
func TestUsageErrorsOnStderr(t *testing.T) {
	for _, args := range [][]string{
		{"run", "--no-such-flag"},
		{"run"},
		{"verify", "--topology", "x.yaml"},
		{"validate"},
		{"schema", "extra"},
		{"init", "a", "b"},
		{"no-such-command"},
		{},
		{"topics", "delete"},
		{"help", "no-such-topic"},
	} {
		code, stdout, stderr := runCLI(args...)
		if code != 2 || stdout != "" || stderr == "" {
			t.Errorf("exactly %s: exit %d, stdout %q, stderr %q; want 2, nothing on stdout, the error on stderr",
				strings.Join(args, " "), code, stdout, stderr)
		}
	}
}

// Every command has a one-line summary in `exactly help`, and the
// tagline names both ends.
func TestOverviewListsEveryCommand(t *testing.T) {
	names := sortedCommandNames()
	order := slices.Sorted(slices.Values(helpOrder))
	if !slices.Equal(names, order) {
		t.Fatalf("helpOrder %v, commands %v", order, names)
	}
	_, stdout, _ := runCLI("help")
	if !strings.Contains(stdout, "Kafka-to-PostgreSQL") {
		t.Errorf("the tagline does not name PostgreSQL:\n%s", stdout)
	}
	for _, name := range names {
		c, _ := commandNamed(name)
		if c.summary == "" || strings.Contains(c.summary, "\n") || len(c.summary) > 72 {
			t.Errorf("%s: summary %q, want one line of at most 72 characters", name, c.summary)
		}
		if !strings.Contains(stdout, "  "+name+" ") || !strings.Contains(stdout, c.summary) {
			t.Errorf("exactly help does not list %s with its summary", name)
		}
	}
}

// The synopsis is made from the flag set, so every flag is in it.
func TestSynopsisNamesEveryFlag(t *testing.T) {
	for _, name := range sortedCommandNames() {
		c, _ := commandNamed(name)
		fs := flagsOf(name, c)
		syn := strings.Join(synopsis(name, c, fs), " ")
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(syn+" ", "--"+f.Name+" ") && !strings.Contains(syn, "--"+f.Name+"]") {
				t.Errorf("%s: synopsis %q lacks --%s", name, syn, f.Name)
			}
		})
	}
	for name, want := range map[string]string{
		"validate": "exactly validate [--topology] FILE",
		"test":     "exactly test --topology FILE [--log-format FORMAT] [--log-level LEVEL] [--timeout D] [FIXTURE...]",
		"reset":    "exactly reset --topology FILE (--stage NAME | --sink NAME) (--to-earliest | --to-latest | --to-datetime TIME | --to-offsets P=O,...) [--execute] [--keep-state] [--timeout D]",
		"verify":   "exactly verify --topology FILE --event-id FIELD [--hanging-after D] [--json] [--no-progress] [--open-txn-wait D] [--temp-dir DIR] [--timeout D]",
	} {
		c, _ := commandNamed(name)
		if got := strings.Join(synopsis(name, c, flagsOf(name, c)), " "); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
	if _, stdout, _ := runCLI("validate", "-h"); strings.Contains(stdout, "(required)") {
		t.Errorf("validate takes FILE as an argument, but its help calls --topology required:\n%s", stdout)
	}
}

// test -h holds the fixture format; demo -h tells of both halves.
func TestHelpTexts(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"test": {"A fixture file:", "input:", "output:", "dead_letters:", "value_base64", "reason: decode"},
		"demo": {"dedupe", "resent"},
	} {
		_, stdout, _ := runCLI(cmd, "-h")
		for _, w := range wants {
			if !strings.Contains(stdout, w) {
				t.Errorf("exactly %s -h lacks %q", cmd, w)
			}
		}
	}
}

// `exactly help TOPIC` prints a page of cmd/exactly/docs; a command's name
// wins, and NAME.md names the page.
func TestHelpTopics(t *testing.T) {
	for topic, page := range map[string]string{"topology": "topology.md", "values": "values.md", "sink.md": "sink.md", "cli-reference": "cli-reference.md"} {
		want, err := docs.FS.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI("help", topic)
		if code != 0 || stderr != "" || stdout != string(want) {
			t.Errorf("exactly help %s: exit %d, stderr %q, stdout is not %s", topic, code, stderr, page)
		}
	}
	if _, stdout, _ := runCLI("help", "sink"); !strings.HasPrefix(stdout, "Usage: exactly sink") || !strings.Contains(stdout, "exactly help sink.md") {
		t.Errorf("exactly help sink: want the command's help, naming the page sink.md:\n%s", stdout)
	}
}

func TestSchemaCommand(t *testing.T) {
	code, stdout, stderr := runCLI("schema")
	if code != 0 || stderr != "" || stdout != string(topology.Schema())+"\n" {
		t.Fatalf("exactly schema: exit %d, stderr %q", code, stderr)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(stdout), &v); err != nil || v["$schema"] == nil {
		t.Fatalf("not a JSON Schema: %v", err)
	}
}

// The files init writes validate, and the fixture passes `exactly test`
// as written; a second init refuses to overwrite them.
func TestInit(t *testing.T) {
	t.Setenv("EXACTLY_BROKERS", "127.0.0.1:9") // never dialed: validate and test connect to nothing
	for _, args := range [][]string{{"init"}, {"init", "--sink"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "new")
			if code, _, stderr := runCLI(append(args, dir)...); code != 0 {
				t.Fatalf("exactly init: exit %d: %s", code, stderr)
			}
			topo := filepath.Join(dir, "topology.yaml")
			code, stdout, stderr := runCLI("validate", topo)
			if code != 0 {
				t.Fatalf("validate: exit %d: %s", code, stderr)
			}
			if hasSink := strings.Contains(stdout, "1 sink"); hasSink != slices.Contains(args, "--sink") {
				t.Errorf("validate: %s", stdout)
			}
			if code, stdout, stderr := runCLI("test", "--topology", topo); code != 0 || !strings.HasPrefix(stdout, "ok ") {
				t.Fatalf("exactly test: exit %d\n%s%s", code, stdout, stderr)
			}
			before, _ := os.ReadFile(topo)
			if code, _, stderr := runCLI("init", dir); code != 2 || !strings.Contains(stderr, "exists") {
				t.Errorf("a second init: exit %d, %q; want 2, naming the file that exists", code, stderr)
			}
			if after, _ := os.ReadFile(topo); !bytes.Equal(before, after) {
				t.Error("a second init changed topology.yaml")
			}
		})
	}
}

// cli-reference.md is generated from the commands; regenerate it with
// go test ./cmd/exactly/internal/cli -update.
func TestCLIReferenceIsCurrent(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "cli-reference.md")
	want := reference()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it with go test ./cmd/exactly/internal/cli -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s is out of date with the commands: regenerate it with go test ./cmd/exactly/internal/cli -update", path)
	}
}
