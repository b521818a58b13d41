package processor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/demo"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/redrive"
	"github.com/exactly-io/exactly/processor/internal/reset"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/internal/status"
	"github.com/exactly-io/exactly/processor/internal/verify"
	"github.com/exactly-io/exactly/topology"
)

// KafkaOptions returns the franz-go options that connect to f's Kafka
// cluster: seed brokers, client ID, TLS and SASL. It reads the files
// f.Kafka names (CA, certificate, password) now. Status and PlanStageReset
// take a client built with them.
func KafkaOptions(f *topology.File) ([]kgo.Opt, error) { return kafkaconn.Options(f.Kafka) }

// StatusOptions narrow Status; the zero value reports everything.
type StatusOptions struct {
	// Only limits the report to the stage or sink of this name.
	Only string
	// HangingAfter reports the transactions open for longer than this;
	// 0: longer than their own transaction timeout.
	HangingAfter time.Duration
}

// StatusReport is what Status found: per stage and sink its consumer
// group, members, assignment and lag against the last stable offset, and
// the transactions that hang. Its JSON is `exactly status --json`.
type StatusReport = status.Report

// OpenTxn is a transaction open on one partition, holding that
// partition's last stable offset (KIP-664).
type OpenTxn = status.OpenTxn

// Status reads the live state of f's stages and sinks through adm. It is
// read-only.
func Status(ctx context.Context, adm *kadm.Client, f *topology.File, o StatusOptions) (*StatusReport, error) {
	opts := []status.Option{status.HangingAfter(o.HangingAfter)}
	if o.Only != "" {
		opts = append(opts, status.Only(o.Only))
	}
	return status.Collect(ctx, adm, f, opts...)
}

// VerifyOptions tune Verify; EventID is required.
type VerifyOptions struct {
	// EventID is the field of stage values that holds the event ID; a
	// dotted path reaches into nested objects.
	EventID string
	// KafkaOptions are added to the Kafka client, after KafkaOptions(f).
	KafkaOptions []kgo.Opt
	// TempDir holds the spill files; default os.TempDir().
	TempDir string
	// OpenTxnWait is how long a partition's last stable offset may stay
	// below its end before it is reported as blocked; default 10s.
	OpenTxnWait time.Duration
	// HangingAfter reports transactions open for longer than this; 0:
	// longer than their own timeout.
	HangingAfter time.Duration
	Logger       *slog.Logger
	// Progress, when set, hears how far the read is: one SetTotal with
	// the offsets to read, then Add as they are read.
	Progress interface {
		SetTotal(total int64)
		Add(n int64)
	}
}

// VerifyReport is what Verify found, per stage and sink. Its JSON is
// `exactly verify --json`.
type VerifyReport = verify.Report

// VerifyResetSkip is a range of input offsets that an `exactly reset`
// moved a stage or sink past, with how many records it skipped on purpose.
type VerifyResetSkip = verify.ResetSkip

// Verify reads every input, output and dead-letter topic of f
// read_committed, and every sink table, and accounts for each input
// record: processed, dead-lettered, filtered, deduplicated, pending, or
// lost; and for each output: once, or a duplicate. The error is for a
// failure to verify, not for what was found: see VerifyReport.OK.
func Verify(ctx context.Context, f *topology.File, o VerifyOptions) (*VerifyReport, error) {
	kopts, err := KafkaOptions(f)
	if err != nil {
		return nil, err
	}
	cfg := verify.Config{Topology: f, EventID: o.EventID, KafkaOptions: append(kopts, o.KafkaOptions...), TempDir: o.TempDir,
		OpenTxnWait: o.OpenTxnWait, HangingAfter: o.HangingAfter, Logger: o.Logger}
	if o.Progress != nil {
		cfg.Progress = o.Progress
	}
	return verify.Run(ctx, cfg)
}

// ResetTarget is where a reset moves positions to.
type ResetTarget = reset.Target

// ParseResetTarget returns the target that exactly one of these names:
// the first offset of each partition, the end of each, the first record
// at or after an RFC 3339 time, or offsets as PARTITION=OFFSET,....
func ParseResetTarget(earliest, latest bool, datetime, offsets string) (ResetTarget, error) {
	return reset.ParseTarget(earliest, latest, datetime, offsets)
}

// ResetPlan is what a reset of a stage's or a sink's positions changes,
// per partition. Its Print and Summary write it as `exactly reset` does.
type ResetPlan struct {
	reset.Plan
	adm     *kadm.Client
	execute func(ctx context.Context) error
}

// PlanStageReset plans moving where stage resumes reading its input (its
// consumer group's offsets) to t. It changes nothing.
func PlanStageReset(ctx context.Context, adm *kadm.Client, f *topology.File, name string, t ResetTarget) (*ResetPlan, error) {
	st, ok := f.Stage(name)
	if !ok {
		return nil, usageError{fmt.Errorf("%s has no stage %q", f.Path, name)}
	}
	cfg := stage.StageConfig(f, st, "reset")
	p, err := reset.PlanStage(ctx, adm, st.Name, cfg.Group(), cfg.Input, t)
	if err != nil {
		return nil, err
	}
	kopts, err := KafkaOptions(f)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", f.Path, err)}
	}
	rp := &ResetPlan{Plan: p, adm: adm}
	rp.execute = func(ctx context.Context) error {
		return reset.WithLog(ctx, kopts, rp.Plan, func(ctx context.Context) error { return reset.ExecuteStage(ctx, adm, rp.Plan) })
	}
	return rp, nil
}

// PlanSinkReset plans moving the positions that sink stores in
// PostgreSQL to t. It changes nothing.
func PlanSinkReset(ctx context.Context, adm *kadm.Client, f *topology.File, name string, t ResetTarget) (*ResetPlan, error) {
	var sk *topology.Sink
	for i := range f.Sinks {
		if f.Sinks[i].Name == name {
			sk = &f.Sinks[i]
		}
	}
	if sk == nil {
		return nil, usageError{fmt.Errorf("%s has no sink %q", f.Path, name)}
	}
	cfg := pgsink.SinkConfig(f, sk, "reset")
	p, err := reset.PlanSink(ctx, adm, cfg, t)
	if err != nil {
		return nil, err
	}
	kopts, err := KafkaOptions(f)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %w", f.Path, err)}
	}
	rp := &ResetPlan{Plan: p, adm: adm}
	rp.execute = func(ctx context.Context) error {
		return reset.WithLog(ctx, kopts, rp.Plan, func(ctx context.Context) error { return reset.ExecuteSink(ctx, cfg, rp.Plan) })
	}
	return rp, nil
}

// Idle returns an error while the plan's consumer group has members: a
// running instance would overwrite the reset, so stop every instance
// first. A killed instance stays a member until its session timeout.
func (p *ResetPlan) Idle(ctx context.Context) error { return reset.CheckIdle(ctx, p.adm, p.Group) }

// Execute applies the plan: it commits the stage's offsets, or stores the
// sink's positions in one PostgreSQL transaction. Kafka refuses the
// stage's commit while its group has members. The change is made inside a
// Kafka transaction that writes what it moved to the topic exactly-resets
// (created when missing), committed only when the change succeeds: Verify
// reads it to tell records skipped on purpose from records lost.
func (p *ResetPlan) Execute(ctx context.Context) error { return p.execute(ctx) }

// DefaultMaxRedrives is how many times Redrive redrives a record at most.
const DefaultMaxRedrives = redrive.DefaultMaxRedrives

// RedriveOptions select the dead letters Redrive sends back.
type RedriveOptions struct {
	// Where is a CEL bool expression selecting dead letters (over
	// reason, error, step, source_partition, source_offset, count, key,
	// value, headers); empty: all.
	Where string
	// MaxRedrives: a record redriven this many times is not redriven
	// again but reported; default DefaultMaxRedrives.
	MaxRedrives int
	// KafkaOptions are added to every client, after KafkaOptions(f).
	KafkaOptions []kgo.Opt
	Logger       *slog.Logger
	// Progress, when set, hears how far the redrive is: one SetTotal
	// with the dead-letter offsets to handle, then Add as they are.
	Progress interface {
		SetTotal(total int64)
		Add(n int64)
	}
}

// RedriveReport is what Redrive did. Its Print writes it as `exactly
// redrive` does.
type RedriveReport = redrive.Report

// Redrive sends the dead letters of stage back to its input topic, exactly
// once: it re-produces each selected dead letter's original record in one
// Kafka transaction with the offsets of consumer group
// exactly-redrive-<stage>, so a crash and a restart add each record once.
// It stops at the end of the dead-letter topic as it was when it started.
// An error wrapping ErrUsage comes with no report.
func Redrive(ctx context.Context, f *topology.File, stage string, o RedriveOptions) (RedriveReport, error) {
	fps, err := failpoint.ParseFailpoints(os.Getenv(failpoint.FailpointEnv))
	if err != nil {
		return RedriveReport{}, usageError{fmt.Errorf("%s: %w", failpoint.FailpointEnv, err)}
	}
	st, ok := f.Stage(stage)
	if !ok {
		return RedriveReport{}, usageError{fmt.Errorf("%s has no stage %q", f.Path, stage)}
	}
	if err := redrive.SharedInput(f, st.Name); err != nil {
		return RedriveReport{}, err
	}
	kopts, err := KafkaOptions(f)
	if err != nil {
		return RedriveReport{}, usageError{fmt.Errorf("%s: %w", f.Path, err)}
	}
	if o.MaxRedrives == 0 {
		o.MaxRedrives = DefaultMaxRedrives
	}
	cfg := redrive.Config{
		Stage: st.Name, DeadLetter: st.DeadLetter.Topic, Input: st.Input.Topic,
		Brokers: f.Kafka.Brokers, ClientID: f.Kafka.ClientID,
		Where: o.Where, MaxRedrives: o.MaxRedrives, TransactionTimeout: f.Kafka.TransactionTimeout.Duration,
		Logger: o.Logger, KafkaOptions: append(kopts, o.KafkaOptions...),
		Failpoints: failpoint.Failpoints{List: fps},
	}
	if o.Progress != nil {
		cfg.Progress = o.Progress
	}
	return redrive.Run(ctx, cfg)
}

// DemoOptions tune RunDemo; the zero value is the default run.
type DemoOptions struct {
	Events int // valid events to produce; default 5000, at least 100
	Logger *slog.Logger
}

// RunDemo runs the real stage engine on an embedded Kafka cluster (kfake),
// with no set-up: it produces events with a few malformed among them,
// crashes the stage in the middle of a transaction, restarts it, and
// reads everything back read_committed, writing the story to w. It
// returns an error if any event was lost or duplicated.
func RunDemo(ctx context.Context, w io.Writer, o DemoOptions) error {
	_, err := demo.Run(ctx, w, demo.Options{Events: o.Events, Logger: o.Logger})
	return err
}
