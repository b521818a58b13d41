package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionNamesTheCommit builds exactly as a clone's `go build` does
// (VCS stamping at its default, whatever GOFLAGS this machine sets) and
// checks that `exactly version` names the commit checked out.
func TestVersionNamesTheCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "exactly")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(build.Environ(), "GOFLAGS=-buildvcs=auto")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("exactly version: %v", err)
	}
	if want := "(commit " + strings.TrimSpace(string(head)); !strings.Contains(string(out), want) {
		t.Fatalf("exactly version = %q, want it to contain %q", out, want)
	}
}
