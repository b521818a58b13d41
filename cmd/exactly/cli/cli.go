// Package cli is the exactly command line, for a custom binary: a team
// that writes its own Go transforms builds its own main, registers them
// with transform.Register (or RegisterStateful), and calls Main. The
// binary then has every command of exactly (`run`, `sink`, `status`,
// `verify`, `reset`, `redrive`, `validate`, `topics create`, `test`,
// `demo`, `version`, `help`), with the transforms known to them.
//
// A Go program that runs a topology without the command line uses the
// engine, processor.New, instead.
package cli

import (
	"context"
	"io"

	"github.com/exactly-io/exactly/cmd/exactly/internal/cli"
)

// Main runs the command line args (without the program name) until it is
// done or SIGINT or SIGTERM arrives, and returns the exit code: 0 success,
// 1 a failed run, 2 bad flags or a bad topology file.
func Main(args []string) int { return cli.Main(args) }

// Run is Main with a context and the output streams given; canceling ctx
// is a clean stop.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return cli.Run(ctx, args, stdout, stderr)
}
