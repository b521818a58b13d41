//go:build integration

// Command bench measures exactly against the broker's own limit, its own
// at-least-once mode, Kafka Streams' exactly_once_v2 and a plain Postgres
// COPY, side by side in one run on the same real broker. Every
// stage case reads the same input topic (1 KiB JSON records) into its own
// output topic of the same shape, with a 100 ms commit interval. The
// windowed case reads its own input (1 KiB JSON events keyed by one of
// -windowed-keys keys, event times over -windowed-minutes minutes) into
// per-key, per-minute counts and sums, in exactly and in Kafka Streams,
// and checks both outputs against the counts it computed. The join case
// joins its own orders (1 KiB JSON keyed by customer ID) with a compacted
// customers table topic, co-partitioned, in exactly's join step and in a
// Kafka Streams KStream-KTable join on a versioned store, and checks that
// both write every order once with its customer.
//
//	source /tmp/exactly-local/env   # deploy/local/up.sh
//	go run -tags integration ./processor/internal/bench [-records 200000] [-partitions 3] [-profile FILE] [-cases windowed]
//
// It prints a table and writes results/<time>.json and .png (and
// latest.json, latest.png) under -out. exactly runs as a subprocess built
// from this module, so its peak RSS (getrusage of the child) is its own.
// Throughput is steady state: records committed from the first committed
// offsets of the consumer group (or, for the sink, the first stored
// position) to the last, over that time; startup and group join are
// excluded for every case alike, and reported apart as wall time.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type config struct {
	brokers, pgDSN, kafkaLibs string
	records, partitions       int
	latencyFor                time.Duration
	latencyFull               int
	latencyPeers              bool
	latencyLoads              []int
	profile                   string
	sinkProfile               string // CPU profiles of the sink cases: <sinkProfile>_<mode>.top
	repeat                    int
	ksHeap                    string
	out                       string
	keep                      bool
	jdbc                      bool // the sink case's Debezium JDBC sink peer
	cases                     map[string]bool
	exactlyBin                string
	winKeys, winMinutes       int    // the windowed case's keys and event-time minutes
	root                      string // module root
}

// allCases are the case groups of -cases, in run order.
var allCases = []string{"limit", "alos", "eos", "kstreams", "windowed", "join", "latency", "sink"}

func main() {
	var cfg config
	var cases string
	flag.IntVar(&cfg.records, "records", 200_000, "input records (1 KiB JSON each) for every throughput case")
	flag.IntVar(&cfg.partitions, "partitions", 3, "partitions of the input and output topics")
	flag.IntVar(&cfg.repeat, "repeat", 3, "rounds of the alos, eos and kstreams cases, interleaved; the table shows medians")
	flag.DurationVar(&cfg.latencyFor, "latency-for", 15*time.Second, "how long the latency case produces")
	flag.IntVar(&cfg.latencyFull, "latency-full", 0, "records/s that count as full load in the latency case, which runs at 50% and 10% of it (0: the measured exactly EOS 3-step rate)")
	loads := flag.String("latency-loads", defaultLatencyLoads, "loads of the latency case, in percent of -latency-full, comma-separated")
	flag.BoolVar(&cfg.latencyPeers, "latency-kstreams", true, "also measure Kafka Streams in the latency case")
	flag.StringVar(&cfg.profile, "profile", "", "also run the exactly EOS 3-step case once more with a CPU profile, and write the output of go tool pprof -top for it to this file")
	flag.StringVar(&cfg.sinkProfile, "sink-profile", "", "take a CPU profile of each sink case and write go tool pprof -top (25 nodes) of it to `PREFIX`_insert.top, PREFIX_upsert.top and PREFIX_upsert_update.top")
	flag.StringVar(&cfg.ksHeap, "ks-heap", "256m", "Kafka Streams JVM heap (-Xms and -Xmx)")
	flag.StringVar(&cfg.out, "out", "integration/bench/results", "directory for the JSON, PNG and logs (relative to the module root)")
	flag.BoolVar(&cfg.jdbc, "sink-jdbc", true, "also measure Debezium's JDBC sink connector in the sink case (deploy/local/connect.sh fetches it)")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the topics, groups and tables the run created")
	flag.StringVar(&cases, "cases", strings.Join(allCases, ","), "case groups to run: "+strings.Join(allCases, ","))
	flag.StringVar(&cfg.exactlyBin, "exactly", "", "exactly binary to measure (default: go build ./cmd/exactly)")
	flag.IntVar(&cfg.winKeys, "windowed-keys", 100, "keys of the windowed count case's input (-records events over them)")
	flag.IntVar(&cfg.winMinutes, "windowed-minutes", 60, "event-time minutes the windowed count case's input spans")
	flag.Parse()

	cfg.brokers = os.Getenv("EXACTLY_BROKERS")
	cfg.pgDSN = os.Getenv("PG_DSN")
	cfg.kafkaLibs = os.Getenv("KAFKA_LIBS")
	if cfg.brokers == "" || cfg.kafkaLibs == "" {
		fatalf("EXACTLY_BROKERS and KAFKA_LIBS must be set: start the services with deploy/local/up.sh and source /tmp/exactly-local/env")
	}
	for _, l := range strings.Split(*loads, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || n < 1 || n > 100 {
			fatalf("-latency-loads: %q is no percentage from 1 to 100", l)
		}
		cfg.latencyLoads = append(cfg.latencyLoads, n)
	}
	cfg.cases = map[string]bool{}
	for _, c := range strings.Split(cases, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !contains(allCases, c) {
			fatalf("-cases: unknown case %q (want some of %s)", c, strings.Join(allCases, ","))
		}
		cfg.cases[c] = true
	}
	if cfg.cases["sink"] && cfg.pgDSN == "" {
		fatalf("PG_DSN must be set for the sink case (or leave it out of -cases)")
	}
	if cfg.records < 1000 || cfg.partitions < 1 || cfg.repeat < 1 {
		fatalf("-records must be at least 1000, -partitions and -repeat at least 1")
	}
	if cfg.winKeys < 1 || cfg.winKeys > 1000 || cfg.winMinutes < 1 || cfg.winMinutes > 24*60 {
		fatalf("-windowed-keys must be 1 to 1000, -windowed-minutes 1 to 1440")
	}
	root, err := moduleRoot()
	if err != nil {
		fatalf("%v", err)
	}
	cfg.root = root
	if cfg.profile != "" {
		if cfg.profile, err = filepath.Abs(cfg.profile); err != nil {
			fatalf("-profile: %v", err)
		}
	}
	if cfg.sinkProfile != "" {
		if cfg.sinkProfile, err = filepath.Abs(cfg.sinkProfile); err != nil {
			fatalf("-sink-profile: %v", err)
		}
	}
	if !filepath.IsAbs(cfg.out) {
		cfg.out = filepath.Join(root, cfg.out)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, cfg)
	if rep != nil {
		rep.print(os.Stdout)
		if werr := rep.write(cfg.out); werr != nil {
			fmt.Fprintln(os.Stderr, "bench: write results:", werr)
		}
	}
	if err != nil {
		fatalf("%v", err)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// moduleRoot is the directory of the go.mod above the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory: run from the exactly module")
		}
		dir = parent
	}
}
