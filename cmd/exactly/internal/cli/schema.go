package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/exactly-io/exactly/topology"
)

var schemaCommand = command{
	summary: "Prints the JSON Schema of the topology file, for editors.",
	desc: `Prints the JSON Schema (draft-07) of the topology file on stdout. It is
derived from the same definitions as validate and the field reference
(exactly help topology): types, bounds, allowed values and unknown fields.
The rules between settings are validate's. For the YAML language server
(VS Code, Neovim), save it and name it on the file's first line:

  exactly schema > exactly.schema.json
  # yaml-language-server: $schema=exactly.schema.json

In VS Code (redhat.vscode-yaml), the yaml.schemas setting maps it to your
files instead: exactly help cli, "Editor support".`,
	run: cmdSchema,
}

func cmdSchema(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) int {
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "exactly schema: takes no arguments")
		fs.Usage()
		return exitUsage
	}
	if _, err := stdout.Write(append(topology.Schema(), '\n')); err != nil {
		fmt.Fprintln(stderr, "exactly schema:", err)
		return exitFailure
	}
	return exitOK
}
