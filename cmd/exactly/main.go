// Command exactly runs exactly-once Kafka→Kafka stages and Postgres sinks
// declared in a topology file. Run `exactly help` for the commands.
package main

import (
	"os"

	"github.com/exactly-io/exactly/cmd/exactly/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
