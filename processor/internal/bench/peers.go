//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// kafkaTool runs one of Kafka's own tools from the kafka-tools jars.
func (r *runner) kafkaTool(ctx context.Context, name, class string, args ...string) (string, error) {
	cmdArgs := append([]string{"-Xms256m", "-Xmx512m", "-cp", filepath.Join(r.cfg.kafkaLibs, "*"), class}, args...)
	cmd := exec.CommandContext(ctx, "java", cmdArgs...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	_ = os.WriteFile(filepath.Join(r.dir, name+".log"), out.Bytes(), 0o644)
	if err != nil {
		return out.String(), fmt.Errorf("%s: %w (see %s.log)", class, err, filepath.Join(r.dir, name))
	}
	return out.String(), nil
}

var producerPerfLine = regexp.MustCompile(`(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency`)

// limits measures the broker with Kafka's own producer and consumer
// performance tools: the produce side writes the same 1 KiB JSON payloads
// to a topic of the same shape, acks=all; the consume side reads the input
// topic every stage reads.
func (r *runner) limits(ctx context.Context) error {
	payloads := filepath.Join(r.dir, "payloads.txt")
	var b bytes.Buffer
	for i := range 1000 {
		b.Write(value(i))
		b.WriteByte('\n')
	}
	if err := os.WriteFile(payloads, b.Bytes(), 0o644); err != nil {
		return err
	}
	topic, err := r.k.topic(ctx, "limit", 0)
	if err != nil {
		return err
	}
	logf("%s", caseProduce)
	res := caseResult{Name: caseProduce, Group: "limit", Records: int64(r.cfg.records),
		Note: "linger.ms=5 batch.size=256KiB, default compression none"}
	out, err := r.kafkaTool(ctx, "producer-perf", "org.apache.kafka.tools.ProducerPerformance",
		"--bootstrap-server", r.cfg.brokers, "--topic", topic, "--num-records", strconv.Itoa(r.cfg.records),
		"--throughput", "-1", "--payload-file", payloads,
		"--command-property", "acks=all", "linger.ms=5", "batch.size=262144")
	if err != nil {
		res.Error = err.Error()
	} else if m := producerPerfLine.FindAllStringSubmatch(out, -1); len(m) == 0 {
		res.Error = "no summary line in ProducerPerformance's output"
	} else {
		last := m[len(m)-1]
		res.RecordsPerS, _ = strconv.ParseFloat(last[2], 64)
		res.Note += fmt.Sprintf("; avg latency %s ms, max %s ms", last[4], last[5])
	}
	r.rep.add(res)

	logf("%s", caseConsume)
	res = caseResult{Name: caseConsume, Group: "limit", Records: r.total, Note: "read_committed; fetch rate, group join excluded"}
	group := r.k.group(r.k.name("consumer_perf"))
	out, err = r.kafkaTool(ctx, "consumer-perf", "org.apache.kafka.tools.ConsumerPerformance",
		"--bootstrap-server", r.cfg.brokers, "--topic", r.input, "--num-records", strconv.FormatInt(r.total, 10),
		"--group", group, "--timeout", "60000", "--command-property", "isolation.level=read_committed")
	if err != nil {
		res.Error = err.Error()
	} else if v, perr := consumerPerfField(out, "fetch.nMsg.sec"); perr != nil {
		res.Error = perr.Error()
	} else {
		res.RecordsPerS = v
	}
	r.rep.add(res)
	return nil
}

// consumerPerfField reads one column of ConsumerPerformance's CSV summary.
func consumerPerfField(out, field string) (float64, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, field) || i+1 >= len(lines) {
			continue
		}
		head := strings.Split(l, ",")
		vals := strings.Split(lines[i+1], ",")
		for j, h := range head {
			if strings.TrimSpace(h) == field && j < len(vals) {
				return strconv.ParseFloat(strings.TrimSpace(vals[j]), 64)
			}
		}
	}
	return 0, fmt.Errorf("no %s in ConsumerPerformance's output", field)
}

// ksDir is the Kafka Streams peer's Maven project.
func (r *runner) ksDir() string { return filepath.Join(r.cfg.root, "integration", "peers", "kstreams") }

// buildKStreams runs `mvn -q -B package` unless the jar is newer than the
// pom and every source file.
func (r *runner) buildKStreams(ctx context.Context) error {
	dir := r.ksDir()
	jar := filepath.Join(dir, "target", "kstreams-peer.jar")
	fresh := false
	if st, err := os.Stat(jar); err == nil {
		fresh = true
		_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() && fi.Name() == "target" {
				return filepath.SkipDir
			}
			if !fi.IsDir() && fi.ModTime().After(st.ModTime()) {
				fresh = false
			}
			return nil
		})
	}
	if fresh {
		r.rep.KStreamsBuild = "cached"
		return nil
	}
	logf("mvn -q -B package in %s", dir)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "package")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build the Kafka Streams peer: %w", err)
	}
	r.rep.KStreamsBuild = fmt.Sprintf("built in %.1f s", time.Since(start).Seconds())
	return nil
}

func (r *runner) kstreams(ctx context.Context, round int) error {
	if round == 0 {
		if err := r.buildKStreams(ctx); err != nil {
			return err
		}
	} else if r.rep.KStreamsBuild == "" {
		return nil // the build failed in the first round
	}
	matched, err := matchedSettings()
	if err != nil {
		return err
	}
	r.ksCase(ctx, caseKSPass, "pass", round, nil)
	r.ksCase(ctx, caseKSCEL, "cel", round, nil)
	r.ksCase(ctx, caseKSPassM, "pass", round, matched)
	r.ksCase(ctx, caseKSCELM, "cel", round, matched)
	return nil
}

// ksCase runs the Kafka Streams peer over the whole input: one instance,
// one stream thread, exactly_once_v2, commit.interval.ms=100; with its
// default client settings, or with settings (the matched rows).
func (r *runner) ksCase(ctx context.Context, label, mode string, round int, settings []ksSetting) {
	res := caseResult{Name: label, Group: "kstreams", Records: r.total,
		Note: "heap -Xms/-Xmx" + r.cfg.ksHeap + ", 1 stream thread; " +
			ksNote(settings, "Kafka Streams' defaults: batch.size=16384 linger.ms=100 compression.type=none fetch.max.wait.ms=500 max.poll.records=1000")}
	defer func() { r.rep.add(res) }()
	logf("%s (round %d)", label, round+1)
	name := ksRunName(mode, round, settings)
	out, err := r.k.topic(ctx, name+"_out", 0)
	if err != nil {
		res.Error = err.Error()
		return
	}
	app := r.k.group(r.k.name(name))
	state, err := os.MkdirTemp("", "bench-kstreams-")
	if err != nil {
		res.Error = err.Error()
		return
	}
	defer os.RemoveAll(state)
	p, err := r.startKStreams(name, app, r.input, out, mode, state, settings)
	if err != nil {
		res.Error = err.Error()
		return
	}
	// The exit error is dropped: the JVM exits 143 on SIGTERM.
	if m, _, ok := r.watchStop(ctx, &res, r.k.groupProgress(app, r.input), p); ok {
		res.measure(m, p)
	}
}

// startKStreams starts the Kafka Streams peer: application app, in -> out.
func (r *runner) startKStreams(name, app, in, out, mode, state string, settings []ksSetting) (*proc, error) {
	dir := r.ksDir()
	cp := filepath.Join(dir, "target", "kstreams-peer.jar") + ":" + filepath.Join(dir, "target", "lib", "*")
	args := []string{"-Xms" + r.cfg.ksHeap, "-Xmx" + r.cfg.ksHeap, "-cp", cp,
		"io.exactly.peer.Peer", r.cfg.brokers, app, in, out, mode, state}
	return startProc(r.dir, name, nil, "java", append(args, ksArgs(settings)...)...)
}
