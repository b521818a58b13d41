package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor"
	"github.com/exactly-io/exactly/topology"
)

// kafkaOptions returns the client options of f's kafka settings (brokers,
// TLS, SASL), which every Kafka client of every command uses. A file it
// cannot read (a CA, a password file) is reported on stderr; ok is then
// false and the command exits with exitUsage.
func kafkaOptions(f *topology.File, cmd string, stderr io.Writer) (opts []kgo.Opt, ok bool) {
	opts, err := processor.KafkaOptions(f)
	if err != nil {
		fmt.Fprintf(stderr, "exactly %s: %s: %v\n", cmd, f.Path, err)
		return nil, false
	}
	return opts, true
}

// loadKafka loads the topology file at path and builds its Kafka client
// options; a problem is printed as cmd's error and ok is false (exit 2).
func loadKafka(path, cmd string, stderr io.Writer) (f *topology.File, opts []kgo.Opt, ok bool) {
	f, err := topology.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return nil, nil, false
	}
	opts, ok = kafkaOptions(f, cmd, stderr)
	return f, opts, ok
}

// loadAdmin is loadKafka, then kafkaAdmin on the file's brokers. When ok is
// false a problem was printed and code is the exit code: 2 for the file, 1
// for the client.
func loadAdmin(ctx context.Context, path string, timeout time.Duration, cmd string, stderr io.Writer) (
	_ context.Context, f *topology.File, adm *kadm.Client, release func(), code int, ok bool) {
	f, kopts, ok := loadKafka(path, cmd, stderr)
	if !ok {
		return ctx, nil, nil, nil, exitUsage, false
	}
	ctx, adm, release, ok = kafkaAdmin(ctx, kopts, timeout, cmd, stderr)
	if !ok {
		return ctx, nil, nil, nil, exitFailure, false
	}
	return ctx, f, adm, release, exitOK, true
}

// kafkaAdmin returns ctx bounded by timeout and an admin client built from
// kopts, and a function that releases both. A client that cannot be built
// is reported as cmd's error; ok is then false (exit 1).
func kafkaAdmin(ctx context.Context, kopts []kgo.Opt, timeout time.Duration, cmd string, stderr io.Writer) (
	_ context.Context, _ *kadm.Client, release func(), ok bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		cancel()
		fmt.Fprintf(stderr, "exactly %s: %v\n", cmd, err)
		return ctx, nil, nil, false
	}
	return ctx, kadm.NewClient(cl), func() { cl.Close(); cancel() }, true
}
