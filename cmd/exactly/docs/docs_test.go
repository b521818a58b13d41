package docs

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/exactly-io/exactly/topology"
)

// Markers written on the line before a ```yaml block say what it is. A
// block without one must be a complete topology that topology.Parse
// accepts.
const (
	markFragment = "<!-- fragment -->" // part of a topology, shown in context
	markFixture  = "<!-- fixture -->"  // an `exactly test` fixture
	markOther    = "<!-- other-yaml -->"
)

const (
	maxPageLines   = 800
	maxReadmeLines = 300
)

// page is one Markdown file: the pages of this folder and the README.
type page struct {
	name string // as a link names it from this folder
	path string
	text string
}

func pages(t *testing.T) []page {
	t.Helper()
	var ps []page
	names, err := fs.Glob(FS, "*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		b, err := FS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, page{name: n, path: n, text: string(b)})
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(ps, page{name: "../../../README.md", path: filepath.Join("..", "..", "..", "README.md"), text: string(readme)})
}

type yamlBlock struct {
	line   int // of the opening fence
	marker string
	body   string
}

// yamlBlocks returns the ```yaml blocks of text with the marker on the
// line before each, if any.
func yamlBlocks(text string) []yamlBlock {
	var (
		blocks []yamlBlock
		cur    *yamlBlock
		prev   string
		inCode bool
	)
	for n, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case inCode && trimmed == "```":
			inCode = false
			if cur != nil {
				blocks = append(blocks, *cur)
				cur = nil
			}
		case inCode:
			if cur != nil {
				cur.body += l + "\n"
			}
		case strings.HasPrefix(trimmed, "```"):
			inCode = true
			if trimmed == "```yaml" {
				cur = &yamlBlock{line: n + 1, marker: strings.TrimSpace(prev)}
			}
		}
		prev = l
	}
	return blocks
}

// docEnv resolves the ${VAR}s of the examples to values of the right form.
func docEnv(name string) (string, bool) {
	switch {
	case strings.Contains(name, "DSN"):
		return "postgres://exactly@127.0.0.1:5432/app", true
	case strings.Contains(name, "URL"):
		return "http://127.0.0.1:8081", true
	case name == topology.BrokersEnv:
		return "", false
	}
	return "x", true
}

func TestYAMLBlocksAreTopologies(t *testing.T) {
	for _, p := range pages(t) {
		for _, b := range yamlBlocks(p.text) {
			name := fmt.Sprintf("%s:%d", p.path, b.line)
			switch b.marker {
			case markFragment, markFixture, markOther:
				continue
			}
			if _, err := topology.Parse(name, []byte(b.body), docEnv); err != nil {
				t.Errorf("%s: a yaml block that is not a valid topology needs a marker (%s, %s or %s) on the line before it: %v",
					name, markFragment, markFixture, markOther, err)
			}
		}
	}
}

func TestPagesAreShortAndHaveContents(t *testing.T) {
	for _, p := range pages(t) {
		lines := strings.Count(p.text, "\n")
		if strings.HasSuffix(p.name, "README.md") {
			if lines > maxReadmeLines {
				t.Errorf("README.md: %d lines, want at most %d", lines, maxReadmeLines)
			}
			continue
		}
		if p.name == "topology.md" {
			continue // generated from the topology spec
		}
		if lines > maxPageLines {
			t.Errorf("%s: %d lines, want at most %d", p.name, lines, maxPageLines)
		}
		if !strings.Contains(p.text, "\n## Contents\n") {
			t.Errorf("%s: no table of contents (a \"## Contents\" section at its top)", p.name)
		}
	}
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^(#{1,6}) (.*)$`)
	nonAnchor = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// anchors returns the anchors GitHub gives the headings of text.
func anchors(text string) map[string]bool {
	as := map[string]bool{}
	seen := map[string]int{}
	inCode := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := strings.ReplaceAll(nonAnchor.ReplaceAllString(strings.ToLower(strings.TrimSpace(m[2])), ""), " ", "-")
		if n := seen[a]; n > 0 {
			as[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			as[a] = true
		}
		seen[a]++
	}
	return as
}

// links returns the link targets of text outside code blocks.
func links(text string) []string {
	var ls []string
	inCode := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inCode = !inCode
		}
		if inCode {
			continue
		}
		l = regexp.MustCompile("`[^`]*`").ReplaceAllString(l, "")
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			ls = append(ls, m[1])
		}
	}
	return ls
}

// pending reports whether file is written by a generator or beside its CI
// fixture, and so may not exist yet where these pages link to it.
func pending(file string) bool {
	return strings.Contains(file, "deploy/examples/recipes/") ||
		file == "topology.md" || file == "schema.json" || strings.HasSuffix(file, "/docs/topology.md")
}

func TestRelativeLinksResolve(t *testing.T) {
	all := pages(t)
	byPath := map[string]string{}
	for _, p := range all {
		abs, err := filepath.Abs(p.path)
		if err != nil {
			t.Fatal(err)
		}
		byPath[abs] = p.text
	}
	for _, p := range all {
		dir := filepath.Dir(p.path)
		for _, target := range links(p.text) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			text := p.text
			if file != "" {
				abs, err := filepath.Abs(filepath.Join(dir, file))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(abs); err != nil {
					if pending(file) {
						continue
					}
					t.Errorf("%s: link %q: %v", p.name, target, err)
					continue
				}
				text = byPath[abs]
			}
			if frag != "" && text != "" && !anchors(text)[frag] {
				t.Errorf("%s: link %q: no heading with anchor #%s", p.name, target, frag)
			}
		}
	}
}

func TestFSHoldsEveryPage(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := FS.ReadFile(f)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("FS: %s is not embedded as it is on disk (%v)", f, err)
		}
	}
}
