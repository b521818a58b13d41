package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/kit"
	"github.com/exactly-io/exactly/topology"
)

// printWarnings writes the topology file's warnings (a literal password,
// say) one a line.
func printWarnings(f *topology.File, w io.Writer) {
	for _, e := range f.Warnings() {
		fmt.Fprintln(w, "warning:", e)
	}
}

// logWarnings logs the topology file's warnings at warn level.
func logWarnings(f *topology.File, log *slog.Logger) {
	for _, e := range f.Warnings() {
		log.Warn("topology file: " + e.Error())
	}
}

// runSetup is what run and sink share once the file is loaded: failpoints
// from the environment, Kafka options watched for a refused connection,
// and the file's warnings logged. ok is false after a printed problem.
func runSetup(ctx context.Context, f *topology.File, cmd string, log *slog.Logger, stderr io.Writer) (
	_ context.Context, fps []kit.Failpoint, kopts []kgo.Opt, refused func() error, ok bool) {
	fps, err := kit.ParseFailpoints(os.Getenv(kit.FailpointEnv))
	if err != nil {
		fmt.Fprintf(stderr, "exactly %s: %s: %v\n", cmd, kit.FailpointEnv, err)
		return ctx, nil, nil, nil, false
	}
	if kopts, ok = kafkaOptions(f, cmd, stderr); !ok {
		return ctx, nil, nil, nil, false
	}
	logWarnings(f, log)
	ctx, kopts, refused = watchKafka(ctx, kopts)
	return ctx, fps, kopts, refused, true
}
