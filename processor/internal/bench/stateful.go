//go:build integration

package main

import (
	"context"
	"fmt"
	"os"
)

// statefulRun is what a case of a stateful stage (windowed, join) reads
// and how its output is checked, for either system.
type statefulRun struct {
	input string // the topic whose consumption ends the case
	total int64  // its records
	// check checks the output topic, setting res.Error if it is wrong.
	check func(ctx context.Context, res *caseResult, out string)
}

// statefulRound runs one round of a stateful case: exactly's stage, then
// the Kafka Streams peer with its defaults (case def) and with the
// settings matched to the stage's (case matched).
func (r *runner) statefulRound(ctx context.Context, round int, exactly func(context.Context, int),
	ks func(context.Context, string, int, []ksSetting), def, matched string) error {
	exactly(ctx, round)
	if r.rep.KStreamsBuild == "" {
		if err := r.buildKStreams(ctx); err != nil {
			for _, l := range []string{def, matched} {
				r.rep.add(caseResult{Name: l, Group: "kstreams", Error: err.Error()})
			}
			return nil
		}
	}
	settings, err := matchedSettings()
	if err != nil {
		return err
	}
	ks(ctx, def, round, nil)
	ks(ctx, matched, round, settings)
	return nil
}

// exactlyStateful runs exactly's stage of topology path (its consumer
// group is of stage) with a state dir of its own, until it has read all
// of sr.input, and checks and measures it into res.
func (r *runner) exactlyStateful(ctx context.Context, res *caseResult, name, stage, path, out string, sr statefulRun) {
	state, err := os.MkdirTemp("", "bench-exactly-state-")
	if err != nil {
		res.Error = err.Error()
		return
	}
	defer os.RemoveAll(state)
	p, err := startProc(r.dir, name, nil, r.bin, "run", "--topology", path, "--instance-id", "b1",
		"--metrics-addr", "", "--log-level", "warn", "--state-dir", state)
	if err != nil {
		res.Error = err.Error()
		return
	}
	r.finishStateful(ctx, res, p, r.k.group("exactly-"+stage), out, true, sr)
}

// ksStateful runs the Kafka Streams peer (Peer.java) in mode over
// sr.input into a new output topic, with its defaults or with settings.
func (r *runner) ksStateful(ctx context.Context, res *caseResult, name, mode string, settings []ksSetting, sr statefulRun) {
	out, err := r.k.topic(ctx, name+"_out", 0)
	if err == nil {
		err = r.k.awaitTopics(ctx, out)
	}
	if err != nil {
		res.Error = err.Error()
		return
	}
	app := r.k.group(r.k.name(name))
	// Kafka Streams creates its changelog topics under the application ID.
	defer r.k.adoptTopics(app + "-")
	state, err := os.MkdirTemp("", "bench-kstreams-")
	if err != nil {
		res.Error = err.Error()
		return
	}
	defer os.RemoveAll(state)
	p, err := r.startKStreams(name, app, sr.input, out, mode, state, settings)
	if err != nil {
		res.Error = err.Error()
		return
	}
	r.finishStateful(ctx, res, p, app, out, false, sr)
}

// finishStateful watches p, the process of a case whose consumer group is
// group, until the group has read all of sr.input, stops it, checks what
// it wrote to out and, if that is right, measures the run into res. With
// noteExit, an error p exited with is added to the note.
func (r *runner) finishStateful(ctx context.Context, res *caseResult, p *proc, group, out string, noteExit bool, sr statefulRun) {
	m, perr, ok := r.watchStopN(ctx, res, r.k.groupProgress(group, sr.input), p, sr.total)
	if !ok {
		return
	}
	if noteExit && perr != nil {
		res.Note += fmt.Sprintf("; exit: %v", perr)
	}
	sr.check(ctx, res, out)
	if res.Error == "" {
		res.measure(m, p)
	}
}
