package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
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

// `exactly help TOPIC` prints a page of cmd/exactly/docs without its HTML
// comments; NAME.md is always the page, and a plain NAME the command when
// there is one, whose help then names the page.
func TestHelpTopics(t *testing.T) {
	for topic, page := range map[string]string{"topology": "topology.md", "values": "values.md", "sink.md": "sink.md",
		"cli-reference": "cli-reference.md", "getting-started": "getting-started.md", "stages.md": "stages.md"} {
		b, err := docs.FS.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI("help", topic)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "# ") {
			t.Errorf("exactly help %s: exit %d, stderr %q, stdout starts %q; want the page %s, its title first",
				topic, code, stderr, stdout[:min(len(stdout), 60)], page)
		}
		if strings.Contains(stdout, "<!--") || strings.Contains(stdout, "-->") {
			t.Errorf("exactly help %s prints an HTML comment", topic)
		}
		if want := uncommentedLines(string(b)); !slices.Equal(nonBlank(stdout), want) {
			t.Errorf("exactly help %s: the text is not %s's, less its comments", topic, page)
		}
	}
	_, stdout, _ := runCLI("help", "sink")
	if !strings.HasPrefix(stdout, "Usage: exactly sink") || !strings.HasSuffix(stdout, `For the reference page "The Postgres sink", run: exactly help sink.md`+"\n") {
		t.Errorf("exactly help sink: want the command's help, then a line naming the page sink.md:\n%s", stdout)
	}
	if _, stdout, _ := runCLI("help", "run"); strings.Contains(stdout, "For the reference page") {
		t.Errorf("exactly help run names a page run.md, which does not exist:\n%s", stdout)
	}
	if code, _, stderr := runCLI("help", "run.md"); code != 2 || !strings.Contains(stderr, `no command or reference page "run.md"`) {
		t.Errorf("exactly help run.md: exit %d, %q; want 2: there is no page run.md", code, stderr)
	}
}

// nonBlank returns the lines of text that are not blank.
func nonBlank(text string) []string {
	var ls []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

// uncommentedLines returns the lines of a page that are not blank,
// without the comments that fill a line and with inline ones cut out.
func uncommentedLines(page string) []string {
	var ls []string
	for _, l := range nonBlank(page) {
		l = regexp.MustCompile(`<!--.*?--> ?`).ReplaceAllString(l, "")
		if strings.TrimSpace(l) != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

func TestWithoutComments(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"<!-- note -->\n\n# T\n\ntext\n", "# T\n\ntext\n"},
		{"# T\n\n<!-- toc -->\n## Contents\n\n- a\n\n<!-- /toc -->\n## A\n", "# T\n\n## Contents\n\n- a\n\n## A\n"},
		{"a <!-- x --> b\n", "a  b\n"},
		{"a\n<!-- one\ntwo -->\nb\n", "a\nb\n"},
		{"```html\n<!-- kept -->\n\n\nx\n```\n", "```html\n<!-- kept -->\n\n\nx\n```\n"},
	} {
		if got := withoutComments(tc.in); got != tc.want {
			t.Errorf("withoutComments(%q) = %q, want %q", tc.in, got, tc.want)
		}
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
