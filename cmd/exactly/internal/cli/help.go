package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/exactly-io/exactly/cmd/exactly/docs"
)

// helpOrder is the order of the commands in `exactly help` and the CLI
// reference.
var helpOrder = []string{"run", "sink", "status", "verify", "reset", "redrive",
	"init", "validate", "schema", "topics create", "test", "demo", "version"}

// commandNamed returns the command called name ("topics create" too).
func commandNamed(name string) (*command, bool) {
	if name == "topics create" {
		return &topicsCreateCommand, true
	}
	c, ok := commands[name]
	return c, ok
}

// flagsOf returns the flags that c declares, by running it with --help on
// a silent flag set: every command declares its flags before parsing.
func flagsOf(name string, c *command) *flag.FlagSet {
	fs := newFlags(name, c, io.Discard, io.Discard)
	c.run(context.Background(), fs, []string{"--help"}, io.Discard, io.Discard)
	return fs
}

// placeholder is the word that stands for a flag's value in a synopsis:
// the `quoted` word of its usage, or one by its type; "" for a bool.
func placeholder(f *flag.Flag) string {
	name, _ := flag.UnquoteUsage(f)
	switch name {
	case "":
		return ""
	case "duration":
		return "D"
	case "int", "uint", "int64", "uint64":
		return "N"
	case "string", "value":
		return "VALUE"
	case "float":
		return "X"
	}
	return name
}

func flagText(f *flag.Flag) string {
	if p := placeholder(f); p != "" {
		return "--" + f.Name + " " + p
	}
	return "--" + f.Name
}

func required(f *flag.Flag) bool { return strings.Contains(f.Usage, "(required)") }

// synopsis returns c's synopsis, from its flags: the required ones, the
// groups of which one is given, the optional ones in brackets, then the
// operands. Each unit is one string, so that a wrapped line never splits
// one.
func synopsis(name string, c *command, fs *flag.FlagSet) []string {
	units := []string{"exactly " + name}
	inGroup := map[string]bool{}
	for _, g := range c.oneOf {
		for _, n := range g {
			inGroup[n] = true
		}
	}
	var req, opt []string
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case inGroup[f.Name] || (c.fileOperand && f.Name == "topology"):
		case f.Name == "topology":
			req = append([]string{flagText(f)}, req...)
		case required(f):
			req = append(req, flagText(f))
		default:
			opt = append(opt, "["+flagText(f)+"]")
		}
	})
	units = append(units, req...)
	for _, g := range c.oneOf {
		alts := make([]string, len(g))
		for i, n := range g {
			alts[i] = flagText(fs.Lookup(n))
		}
		units = append(units, "("+strings.Join(alts, " | ")+")")
	}
	units = append(units, opt...)
	if c.fileOperand {
		units = append(units, "[--topology] FILE")
	}
	if c.operands != "" {
		units = append(units, c.operands)
	}
	return units
}

// wrap joins units with spaces into lines of at most width, the lines
// after the first indented by indent.
func wrap(units []string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, u := range units {
		switch {
		case i == 0:
		case line+1+len(u) > width:
			b.WriteString("\n" + indent)
			line = len(indent)
		default:
			b.WriteByte(' ')
			line++
		}
		b.WriteString(u)
		line += len(u)
	}
	return b.String()
}

// printHelp writes c's help: synopsis, summary, description and flags.
func printHelp(w io.Writer, name string, c *command, flags *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n\n%s\n", wrap(synopsis(name, c, flags), 78, "         "), c.summary, c.desc)
	if hasFlags(flags) {
		fmt.Fprintln(w, "\nFlags:")
		printFlags(w, flags)
	}
	if title := pageTitle(name); title != "" {
		fmt.Fprintf(w, "\nFor the reference page %q, run: exactly help %s.md\n", title, name)
	}
}

// pageTitle returns the title of the page name.md, "" if there is none.
func pageTitle(name string) string {
	_, titles := topics()
	return titles[name]
}

// printFlags writes each flag as --name VALUE, then its usage and default.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		_, usage := flag.UnquoteUsage(f)
		if d := defaultText(f); d != "" {
			usage += " (default " + d + ")"
		}
		fmt.Fprintf(w, "  %s\n        %s\n", flagText(f), strings.ReplaceAll(usage, "\n", "\n        "))
	})
}

// defaultText is a flag's default as the help shows it, "" for none.
func defaultText(f *flag.Flag) string {
	switch f.DefValue {
	case "", "0", "false", "0s":
		return ""
	}
	if placeholder(f) == "VALUE" || strings.ContainsAny(f.DefValue, " \"") {
		return fmt.Sprintf("%q", f.DefValue)
	}
	return f.DefValue
}

// topics returns the names of the pages `exactly help TOPIC` prints, and
// the title of each.
func topics() (names []string, titles map[string]string) {
	titles = map[string]string{}
	files, _ := fs.Glob(docs.FS, "*.md")
	for _, f := range files {
		name := strings.TrimSuffix(f, ".md")
		b, _ := docs.FS.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "# ") {
				titles[name] = strings.TrimPrefix(l, "# ")
				break
			}
		}
		names = append(names, name)
	}
	return names, titles
}

// overview is the text of `exactly help`: a line for each command and
// each topic.
func overview() string {
	var b strings.Builder
	b.WriteString(`exactly runs Kafka-to-Kafka stages and Kafka-to-PostgreSQL sinks, exactly once.

Usage: exactly COMMAND [flags]

Commands:
`)
	for _, name := range helpOrder {
		c, _ := commandNamed(name)
		fmt.Fprintf(&b, "  %-16s %s\n", name, c.summary)
	}
	fmt.Fprintf(&b, "  %-16s %s\n", "help [TOPIC]", "Prints help on a command, or a page of the reference.")
	b.WriteString("\nReference pages (exactly help TOPIC):\n")
	names, titles := topics()
	for _, n := range names {
		label := n
		if _, isCommand := commandNamed(n); isCommand {
			label += ".md" // the command's help is under the plain name
		}
		fmt.Fprintf(&b, "  %-16s %s\n", label, titles[n])
	}
	b.WriteString("\nRun 'exactly help COMMAND' (or 'exactly COMMAND --help') for a command's flags.\n")
	return b.String()
}

// help prints the help on topic: a command's, or a page of the reference.
// NAME.md is always the page; a plain NAME is the command when there is
// one (whose help then names the page), else the page.
func help(ctx context.Context, topic string, stdout, stderr io.Writer) int {
	if topic == "topics" {
		topic = "topics create"
	}
	if c, ok := commandNamed(topic); ok {
		return c.start(ctx, topic, []string{"--help"}, stdout, stderr)
	}
	page := strings.TrimSuffix(topic, ".md") + ".md"
	if b, err := docs.FS.ReadFile(page); err == nil && !strings.Contains(topic, "/") {
		_, _ = io.WriteString(stdout, withoutComments(string(b)))
		return exitOK
	}
	names, _ := topics()
	fmt.Fprintf(stderr, "exactly help: no command or reference page %q (pages: %s)\n", topic, strings.Join(names, ", "))
	return exitUsage
}

// withoutComments returns a Markdown page as a reader of the terminal
// wants it: without the HTML comments outside its code blocks (generator
// notes, markers for the tests), and without the blank lines they leave.
func withoutComments(page string) string {
	var (
		out            []string
		inCode, inNote bool
	)
	for _, l := range strings.Split(page, "\n") {
		if !inCode && (inNote || strings.Contains(l, "<!--")) {
			had, lead := strings.TrimSpace(l) != "", strings.HasPrefix(l, "<!--")
			l, inNote = stripComments(l, inNote)
			if had && strings.TrimSpace(l) == "" {
				continue
			}
			if lead {
				l = strings.TrimLeft(l, " ") // "<!-- note --> Text" is "Text"
			}
		}
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inCode = !inCode
		}
		if !inCode && l == "" && (len(out) == 0 || out[len(out)-1] == "") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// stripComments removes the HTML comments of line l, which starts inside
// one when open; open is then whether the last one goes on past l.
func stripComments(l string, open bool) (string, bool) {
	var b strings.Builder
	for {
		if open {
			j := strings.Index(l, "-->")
			if j < 0 {
				return b.String(), true
			}
			l, open = l[j+3:], false
		}
		i := strings.Index(l, "<!--")
		if i < 0 {
			b.WriteString(l)
			return b.String(), false
		}
		b.WriteString(l[:i])
		l, open = l[i+4:], true
	}
}

// reference returns the CLI reference page, cmd/exactly/docs/cli-reference.md.
func reference() string {
	var b strings.Builder
	b.WriteString(`# CLI reference

Every command of ` + "`exactly`" + `, its synopsis and its flags. This page is
generated from the commands themselves (` + "`go test ./cmd/exactly/internal/cli -update`" + `),
so it says what the binary does; ` + "`exactly help COMMAND`" + ` prints the same.
The guide to the commands is [The command line](cli.md).

<!-- toc -->
## Contents

`)
	for _, name := range helpOrder {
		fmt.Fprintf(&b, "- [`exactly %s`](#exactly-%s)\n", name, strings.ReplaceAll(name, " ", "-"))
	}
	b.WriteString("\n<!-- /toc -->\n")
	for _, name := range helpOrder {
		c, _ := commandNamed(name)
		fs := flagsOf(name, c)
		fmt.Fprintf(&b, "\n## `exactly %s`\n\n%s\n\n```text\n%s\n```\n\n", name, c.summary, wrap(synopsis(name, c, fs), 78, "    "))
		fmt.Fprintf(&b, "```text\n%s\n```\n", c.desc)
		if !hasFlags(fs) {
			continue
		}
		b.WriteString("\n| flag | default | what it does |\n| --- | --- | --- |\n")
		fs.VisitAll(func(f *flag.Flag) {
			_, usage := flag.UnquoteUsage(f)
			d := defaultText(f)
			switch {
			case machineDefaults[f.Name] != "":
				d = machineDefaults[f.Name]
			case d != "":
				d = "`" + d + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", flagText(f), d, mdCell(usage))
		})
	}
	return b.String()
}

// machineDefaults describe the defaults that depend on the machine, so
// that the reference is the same wherever it is generated.
var machineDefaults = map[string]string{"instance-id": "the host name", "state-dir": "`$TMPDIR/exactly-state`"}

// mdCell escapes text for a Markdown table cell.
func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "\n", " ").Replace(s)
}

// sortedCommandNames are every command's name, for tests.
func sortedCommandNames() []string {
	names := []string{"topics create"}
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
