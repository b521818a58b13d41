package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestForTerminalIsQuietOffATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range []struct {
		name  string
		quiet bool
	}{{"a file", false}, {"a file, quiet", true}} {
		t.Run(c.name, func(t *testing.T) {
			r := ForTerminal(f, c.quiet, "reading", 100)
			if r != nil {
				t.Fatalf("ForTerminal on %s = %v, want nil", c.name, r)
			}
			r.Add(10) // a nil Reporter takes calls and shows nothing
			r.SetTotal(5)
			r.Done()
		})
	}
	if IsTerminal(&bytes.Buffer{}) {
		t.Error("a buffer is a terminal")
	}
	if fi, _ := f.Stat(); fi.Size() != 0 {
		t.Errorf("%d bytes written to a file", fi.Size())
	}
}

func TestReporterShowsDoneOfTotal(t *testing.T) {
	var buf bytes.Buffer
	r := newReporter(&buf, "reading topics", -1, 0)
	r.SetTotal(2000)
	r.Add(500)
	r.Add(500)
	r.Done()
	out := buf.String()
	for _, want := range []string{"reading topics", "1000/2000", "records/"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q: %q", want, out)
		}
	}
}
