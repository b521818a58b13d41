package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
	}{
		{"ldflags win over the stamp", "v0.1.0", "def456", stamped,
			Info{Version: "v0.1.0", Commit: "def456", GoVersion: "go1.26.0"}},
		{"the stamp when ldflags are unset", "", "", stamped,
			Info{Version: "(devel)", Commit: "abc123", Modified: true, GoVersion: "go1.26.0"}},
		{"go install module@version", "", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.2.0"}},
			Info{Version: "v0.2.0", Commit: "unknown", GoVersion: "go1.26.0"}},
		{"go install module@commit: the pseudo-version's commit", "", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261204042406-2ae052f7493c"}},
			Info{Version: "v0.0.0-20261204042406-2ae052f7493c", Commit: "2ae052f7493c", GoVersion: "go1.26.0"}},
		{"a pseudo-version after a tag", "", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.1.1-0.20261204042406-2ae052f7493c+incompatible"}},
			Info{Version: "v0.1.1-0.20261204042406-2ae052f7493c+incompatible", Commit: "2ae052f7493c", GoVersion: "go1.26.0"}},
		{"the stamp wins over the pseudo-version", "", "", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.0.0-20261204042406-2ae052f7493c"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}},
			Info{Version: "v0.0.0-20261204042406-2ae052f7493c", Commit: "abc123", GoVersion: "go1.26.0"}},
		{"nothing known", "", "", &debug.BuildInfo{GoVersion: "go1.26.0"},
			Info{Version: "(devel)", Commit: "unknown", GoVersion: "go1.26.0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := get(c.version, c.commit, c.bi)
			got.Platform = ""
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	s := Info{Version: "v0.1.0", Commit: "abc", Modified: true, GoVersion: "go1.26.0", Platform: "linux/amd64"}.String()
	if want := "exactly v0.1.0 (commit abc-modified, go1.26.0, linux/amd64)"; s != want {
		t.Errorf("got %q, want %q", s, want)
	}
	if !strings.Contains(Get().String(), "go1.") {
		t.Errorf("Get().String() = %q lacks the Go version", Get().String())
	}
}
