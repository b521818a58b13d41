package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/exactly-io/exactly/cmd/exactly/internal/buildinfo"
)

var versionCommand = command{
	summary: "Prints the version, commit and Go version of this binary.",
	desc: `Prints the version, the git commit and the Go version of this binary.
A release build sets the version and commit at build time (see
deploy/container/build.sh); a plain go build or go install from a clone
reports "(devel)" and the commit the Go toolchain stamped, and go install
of a module at a commit the commit in its pseudo-version. The toolchain
stamps nothing with -buildvcs=false (GOFLAGS too) or under go run: the
commit is then "unknown".`,
	run: cmdVersion,
}

func cmdVersion(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	asJSON := fs.Bool("json", false, "print as JSON")
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return exitUsage
	}
	info := buildinfo.Get()
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(info); err != nil {
			fmt.Fprintln(stderr, "exactly version:", err)
			return exitFailure
		}
		return exitOK
	}
	fmt.Fprintln(stdout, info)
	return exitOK
}
