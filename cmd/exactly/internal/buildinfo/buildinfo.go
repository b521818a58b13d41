// Package buildinfo says which build of exactly is running: its version,
// the commit it was built from and the Go toolchain that built it.
//
// A release build sets Version and Commit with the linker:
//
//	go build -ldflags "-X github.com/exactly-io/exactly/cmd/exactly/internal/buildinfo.Version=v0.1.0 \
//	  -X github.com/exactly-io/exactly/cmd/exactly/internal/buildinfo.Commit=$(git rev-parse HEAD)" ./cmd/exactly
//
// (deploy/container/build.sh does this). A plain `go build` or `go install`
// from a clone leaves them empty; Get then falls back to what the Go
// toolchain stamps into every binary (runtime/debug.ReadBuildInfo): the
// module version and the vcs.revision and vcs.modified settings. `go
// install module@commit` stamps no vcs.* settings, but its module version
// is a pseudo-version that ends in the commit's first 12 hex digits.
// Stamping is off with -buildvcs=false (in GOFLAGS too) and under `go run`.
package buildinfo

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
)

// Set at build time with -ldflags -X; see the package doc.
var (
	Version string // e.g. v0.1.0
	Commit  string // the full git commit hash
)

// Info is one build's identity.
type Info struct {
	Version   string `json:"version"`    // "v0.1.0", or "(devel)" when unknown
	Commit    string `json:"commit"`     // git hash, or "unknown"
	Modified  bool   `json:"modified"`   // built from a work tree with uncommitted changes
	GoVersion string `json:"go_version"` // e.g. go1.26.0
	Platform  string `json:"platform"`   // GOOS/GOARCH
}

// pseudoRevision matches a pseudo-version's commit (golang.org/ref/mod#pseudo-versions):
// v0.0.0-20260101120000-0123456789ab, v1.2.4-0.20260101120000-0123456789ab.
var pseudoRevision = regexp.MustCompile(`[-.]\d{14}-([0-9a-f]{12})(\+incompatible)?$`)

// Get returns the running binary's Info: the -X values where set, else the
// toolchain's build settings.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(Version, Commit, bi)
}

func get(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		info.GoVersion = bi.GoVersion
		if info.Version == "" && bi.Main.Version != "" {
			info.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if info.Commit == "" {
					info.Commit = s.Value
				}
			case "vcs.modified":
				// Only a stamped commit can be modified; a commit set with
				// -X says nothing about the work tree.
				info.Modified = commit == "" && s.Value == "true"
			}
		}
	}
	if info.Version == "" {
		info.Version = "(devel)"
	}
	if m := pseudoRevision.FindStringSubmatch(info.Version); info.Commit == "" && m != nil {
		info.Commit = m[1]
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// String is the one-line form, e.g.
// "exactly v0.1.0 (commit 3f2a…, go1.26.0, linux/amd64)".
func (i Info) String() string {
	commit := i.Commit
	if i.Modified {
		commit += "-modified"
	}
	return fmt.Sprintf("exactly %s (commit %s, %s, %s)", i.Version, commit, i.GoVersion, i.Platform)
}
