//go:build integration

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Case names, as they appear in the table and the JSON.
const (
	caseFill       = "fill (franz-go, acks=all)"
	caseProduce    = "limit: ProducerPerformance acks=all"
	caseConsume    = "limit: ConsumerPerformance"
	caseALOSPass   = "exactly ALOS pass-through"
	caseALOSCEL    = "exactly ALOS 3-step CEL"
	caseEOSPass    = "exactly EOS pass-through"
	caseEOSCEL     = "exactly EOS 3-step CEL"
	caseKSPass     = "Kafka Streams EOSv2 pass-through, defaults"
	caseKSCEL      = "Kafka Streams EOSv2 3-step JSON, defaults"
	caseKSPassM    = "Kafka Streams EOSv2 pass-through, matched"
	caseKSCELM     = "Kafka Streams EOSv2 3-step JSON, matched"
	caseSink       = "exactly sink -> Postgres"
	caseSinkUpsert = "exactly sink -> Postgres, upsert mode"
	caseCopy       = "plain COPY -> Postgres"
	caseHandUpsert = "hand-written upsert -> Postgres"
	// The upsert cases again into their filled tables: every row an update.
	caseSinkUpdate = "exactly sink -> Postgres, upsert, every key stored"
	caseHandUpdate = "hand-written upsert -> Postgres, every key stored"
	commitInterval = 100 * time.Millisecond
	// commitMaxRecords is the stage's commit.max_records (its default).
	commitMaxRecords = 10000
	// sinkMaxRecords is the sink's commit.max_records (its default).
	sinkMaxRecords = 10000
)

// celSteps is the 3-step transform of the CEL cases; the Kafka Streams
// peer's "cel" mode does the same in Java.
const celSteps = `    transform:
      - filter: 'value.amount >= 0'
      - set: { tier: 'value.amount > 500 ? "gold" : "std"', total_cents: 'value.amount * 100' }
      - drop: [internal]
`

type runner struct {
	cfg     config
	k       *kafka
	rep     *report
	bin     string // exactly
	dir     string // this run's logs and topology files
	input   string
	total   int64 // input end offsets
	hasALOS bool
	win     *winInput  // the windowed case's input, made in its first round
	joinIn  *joinInput // the join case's input, made in its first round
}

func run(ctx context.Context, cfg config) (*report, error) {
	rep := newReport(cfg)
	k, err := newKafka(cfg)
	if err != nil {
		return nil, err
	}
	if !cfg.keep {
		defer k.cleanup()
	}
	r := &runner{cfg: cfg, k: k, rep: rep, dir: filepath.Join(cfg.out, "run-"+k.run)}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	logf("run %s: %d records x %d B, %d partitions; logs in %s", k.run, cfg.records, recordSize, cfg.partitions, r.dir)

	if cfg.cases["alos"] || cfg.cases["eos"] || cfg.cases["windowed"] || cfg.cases["join"] || cfg.cases["latency"] || cfg.cases["sink"] {
		if err := r.buildExactly(ctx); err != nil {
			return rep, err
		}
	}
	// Every case but the windowed and latency ones reads the common input.
	if cfg.cases["limit"] || cfg.cases["alos"] || cfg.cases["eos"] || cfg.cases["kstreams"] || cfg.cases["sink"] {
		if r.input, err = k.topic(ctx, "in", 0); err != nil {
			return rep, err
		}
		logf("filling %s", r.input)
		fill, err := k.fill(ctx, r.input, cfg.records)
		if err != nil {
			return rep, err
		}
		if r.total, err = k.endSum(ctx, r.input); err != nil {
			return rep, err
		}
		rep.add(caseResult{Name: caseFill, Group: "limit", Records: int64(cfg.records), RecordsPerS: fill,
			Note: "the harness's own producer writing the input (includes client start)"})
	}

	type step struct {
		group string
		fn    func(context.Context) error
	}
	steps := []step{{"limit", r.limits}}
	// The stage cases run in interleaved rounds, so that drift on a shared
	// machine spreads over all of them alike.
	for round := range cfg.repeat {
		steps = append(steps,
			step{"alos", func(ctx context.Context) error { return r.alos(ctx, round) }},
			step{"eos", func(ctx context.Context) error { return r.eos(ctx, round) }},
			step{"kstreams", func(ctx context.Context) error { return r.kstreams(ctx, round) }},
			step{"windowed", func(ctx context.Context) error { return r.windowed(ctx, round) }},
			step{"join", func(ctx context.Context) error { return r.join(ctx, round) }})
	}
	steps = append(steps, step{"latency", r.latency}, step{"sink", r.sink})
	for _, s := range steps {
		if !cfg.cases[s.group] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := s.fn(ctx); err != nil {
			// A case that cannot run at all is reported; the others go on.
			logf("%s: %v", s.group, err)
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", s.group, err))
		}
	}
	rep.finish()
	return rep, nil
}

func (r *runner) buildExactly(ctx context.Context) error {
	if r.cfg.exactlyBin != "" {
		r.bin = r.cfg.exactlyBin
	} else {
		r.bin = filepath.Join(r.dir, "exactly")
		logf("go build -o %s ./cmd/exactly", r.bin)
		b := exec.CommandContext(ctx, "go", "build", "-o", r.bin, "./cmd/exactly")
		b.Dir, b.Stdout, b.Stderr = r.cfg.root, os.Stderr, os.Stderr
		if err := b.Run(); err != nil {
			return fmt.Errorf("build exactly: %w", err)
		}
	}
	// The at-least-once mode is measured where the binary has it.
	help, _ := exec.CommandContext(ctx, r.bin, "run", "--help").CombinedOutput()
	r.hasALOS = strings.Contains(string(help), "-guarantee")
	return nil
}

func (r *runner) brokersYAML() string {
	var qs []string
	for _, b := range strings.Split(r.cfg.brokers, ",") {
		qs = append(qs, fmt.Sprintf("%q", strings.TrimSpace(b)))
	}
	return "[" + strings.Join(qs, ", ") + "]"
}

// stageTopology writes the topology of one stage, in -> out, and returns
// its path and the stage name.
func (r *runner) stageTopology(name, in, out, dlq string, cel bool) (string, string, error) {
	stage := r.k.name(name)
	steps := ""
	if cel {
		steps = celSteps
	}
	path, err := r.writeStageTopology(name, stage, in, out, dlq, "event_id", steps)
	return path, stage, err
}

// writeStageTopology writes <name>.yaml in the run's directory and returns
// its path: one stage reading JSON from in into out, its dead letters to
// dlq, with the benchmark's commit settings, its output keyed by the field
// key (unless ""), and then steps (YAML lines of the stage, such as its
// transform).
func (r *runner) writeStageTopology(name, stage, in, out, dlq, key, steps string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\nkafka:\n  brokers: %s\ntopics:\n", r.brokersYAML())
	fmt.Fprintf(&b, "  - { name: %s, partitions: %d }\n  - { name: %s, partitions: %d }\n  - { name: %s, partitions: 1 }\n",
		in, r.cfg.partitions, out, r.cfg.partitions, dlq)
	fmt.Fprintf(&b, "stages:\n  - name: %s\n    input: { topic: %s, format: json }\n    output: { topic: %s, format: json }\n", stage, in, out)
	fmt.Fprintf(&b, "    dead_letter: { topic: %s }\n", dlq)
	if key != "" {
		fmt.Fprintf(&b, "    key: %s\n", key)
	}
	fmt.Fprintf(&b, "    commit: { interval: %s, max_records: %d }\n", commitInterval, commitMaxRecords)
	b.WriteString(steps)
	path := filepath.Join(r.dir, name+".yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// startStage starts `exactly run` on a new output topic of in; with a
// CPU profile into profile unless it is "".
func (r *runner) startStage(ctx context.Context, name, in string, cel bool, guarantee, profile string, extra ...string) (*proc, string, error) {
	out, err := r.k.topic(ctx, name+"_out", 0)
	if err != nil {
		return nil, "", err
	}
	dlq, err := r.k.topic(ctx, name+"_dlq", 1)
	if err != nil {
		return nil, "", err
	}
	// A stage started on a topic that is not in the metadata yet stops.
	if err := r.k.awaitTopics(ctx, in, out, dlq); err != nil {
		return nil, "", err
	}
	path, stage, err := r.stageTopology(name, in, out, dlq, cel)
	if err != nil {
		return nil, "", err
	}
	group := r.k.group("exactly-" + stage)
	args := []string{"run", "--topology", path, "--instance-id", "b1", "--metrics-addr", "", "--log-level", "warn"}
	if guarantee != "" {
		args = append(args, "--guarantee", guarantee)
	}
	if profile != "" {
		args = append(args, "--cpu-profile", profile)
	}
	args = append(args, extra...)
	p, err := startProc(r.dir, name, nil, r.bin, args...)
	return p, group, err
}

// stageCase runs one exactly stage over the whole input.
func (r *runner) stageCase(ctx context.Context, label, name string, round int, cel bool, guarantee string) {
	res := caseResult{Name: label, Group: strings.SplitN(name, "_", 2)[0], Records: r.total}
	defer func() { r.rep.add(res) }()
	logf("%s (round %d)", label, round+1)
	name = fmt.Sprintf("%s_r%d", name, round)
	p, group, err := r.startStage(ctx, name, r.input, cel, guarantee, "")
	if err != nil {
		res.Error = err.Error()
		return
	}
	m, perr, ok := r.watchStop(ctx, &res, r.k.groupProgress(group, r.input), p)
	if !ok {
		return
	}
	if perr != nil {
		res.Note = fmt.Sprintf("exit: %v", perr)
	}
	res.measure(m, p)
}

func (r *runner) alos(ctx context.Context, round int) error {
	if !r.hasALOS {
		for _, l := range []string{caseALOSPass, caseALOSCEL} {
			r.rep.add(caseResult{Name: l, Group: "alos", Error: "skipped: this exactly has no --guarantee flag yet"})
		}
		return nil
	}
	r.stageCase(ctx, caseALOSPass, "alos_pass", round, false, "at-least-once")
	r.stageCase(ctx, caseALOSCEL, "alos_cel", round, true, "at-least-once")
	return nil
}

func (r *runner) eos(ctx context.Context, round int) error {
	g := ""
	if r.hasALOS {
		g = "exactly-once"
	}
	r.stageCase(ctx, caseEOSPass, "eos_pass", round, false, g)
	r.stageCase(ctx, caseEOSCEL, "eos_cel", round, true, g)
	if round == r.cfg.repeat-1 && r.cfg.profile != "" {
		return r.profileCEL(ctx, g)
	}
	return nil
}

// profileCEL runs the EOS 3-step CEL case once more, outside the
// measured rounds, with a CPU profile of the exactly process, and writes
// `go tool pprof -top` of it to -profile.
func (r *runner) profileCEL(ctx context.Context, guarantee string) error {
	logf("%s with a CPU profile", caseEOSCEL)
	prof := filepath.Join(r.dir, "eos_cel.prof")
	p, group, err := r.startStage(ctx, "eos_cel_prof", r.input, true, guarantee, prof)
	if err != nil {
		return err
	}
	m, werr := watch(ctx, r.k.groupProgress(group, r.input), r.total, p, r.k.timeoutFor())
	u, perr := p.stop() // SIGTERM: exactly stops the profile and exits
	if errors.Is(werr, errExited) {
		werr = p.failure()
	}
	if werr != nil {
		return werr
	}
	if perr != nil {
		return fmt.Errorf("profiled stage: %w", perr)
	}
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", r.bin, prof).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w: %s", err, top)
	}
	head := fmt.Sprintf("# %s, %d records, profiled run: %.0f records/s, %.1f CPU s (go tool pprof -top %s %s)\n",
		caseEOSCEL, r.total, m.rate(), u.CPUSeconds, r.bin, prof)
	if err := os.MkdirAll(filepath.Dir(r.cfg.profile), 0o755); err != nil {
		return err
	}
	return os.WriteFile(r.cfg.profile, append([]byte(head), top...), 0o644)
}
