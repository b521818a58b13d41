package processor

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/internal/demo"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/kafkaconn"
	"github.com/exactly-io/exactly/processor/internal/pgsink"
	"github.com/exactly-io/exactly/processor/internal/redrive"
	"github.com/exactly-io/exactly/processor/internal/reset"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/internal/status"
	"github.com/exactly-io/exactly/processor/internal/verify"
	"github.com/exactly-io/exactly/topology"
)

// The stage engine of one stage of a topology. (The engine that runs a
// whole topology is to replace these.)
type (
	Stage   = stage.Stage
	Config  = stage.Config
	Option  = stage.Option
	Metrics = stage.Metrics
)

// Delivery guarantees of a stage, and the lineage headers of its outputs.
const (
	ExactlyOnce            = stage.ExactlyOnce
	AtLeastOnce            = stage.AtLeastOnce
	AbortRetry             = stage.AbortRetry
	AbortError             = stage.AbortError
	HeaderLineageStage     = stage.HeaderLineageStage
	HeaderLineageTopic     = stage.HeaderLineageTopic
	HeaderLineagePartition = stage.HeaderLineagePartition
	HeaderLineageOffset    = stage.HeaderLineageOffset
	HeaderLineageIndex     = stage.HeaderLineageIndex
)

// Building a stage.
var (
	New              = stage.New
	StageConfig      = stage.StageConfig
	NewMetrics       = stage.NewMetrics
	DefaultStateDir  = stage.DefaultStateDir
	WithLogger       = stage.WithLogger
	WithFailpoints   = stage.WithFailpoints
	WithTransform    = stage.WithTransform
	WithMetrics      = stage.WithMetrics
	WithKafkaOptions = stage.WithKafkaOptions
)

// The operations on a topology beside running it: what `exactly status`,
// `verify`, `reset`, `redrive` and `demo` do. Their reports are the JSON
// that those commands print with --json.
type (
	StatusReport  = status.Report
	StatusOption  = status.Option
	OpenTxn       = status.OpenTxn
	VerifyConfig  = verify.Config
	VerifyReport  = verify.Report
	SinkCheck     = verify.SinkCheck
	ResetTarget   = reset.Target
	ResetPlan     = reset.Plan
	RedriveConfig = redrive.Config
	RedriveReport = redrive.Report
	DemoOptions   = demo.Options
	DemoSummary   = demo.Summary
	// Sink is a Kafka → PostgreSQL sink of a topology.
	Sink = pgsink.Sink
	// SinkMetrics are the metrics of the sinks of one process.
	SinkMetrics = pgsink.Metrics
	// Failpoint is a crash armed by the EXACTLY_FAILPOINT environment
	// variable, for testing recovery.
	Failpoint = failpoint.Failpoint
)

// ErrUsage marks a reset or a redrive that its arguments do not describe.
var ErrUsage = fault.ErrUsage

// DefaultMaxRedrives is how many times Redrive redrives a record at most.
const DefaultMaxRedrives = redrive.DefaultMaxRedrives

// KafkaOptions returns the franz-go options that connect to f's Kafka
// cluster: seed brokers, client ID, TLS and SASL. It reads the files
// f.Kafka names (CA, certificate, password) now.
func KafkaOptions(f *topology.File) ([]kgo.Opt, error) { return kafkaconn.Options(f.Kafka) }

// WatchKafka returns a hook that calls fatal with a connection error that
// no retry mends (a refused SASL password, an untrusted certificate):
// franz-go retries such connections forever.
func WatchKafka(fatal func(error)) kgo.Hook { return kafkaconn.FatalHook(fatal) }

// FailpointsFromEnv returns the failpoints that the EXACTLY_FAILPOINT
// environment variable arms.
func FailpointsFromEnv() ([]Failpoint, error) {
	return failpoint.ParseFailpoints(os.Getenv(failpoint.FailpointEnv))
}

// Status collects the status of f's stages and sinks.
func Status(ctx context.Context, adm *kadm.Client, f *topology.File, opts ...StatusOption) (*StatusReport, error) {
	return status.Collect(ctx, adm, f, opts...)
}

// StatusOnly limits Status to the stage or sink name.
func StatusOnly(name string) StatusOption { return status.Only(name) }

// StatusHangingAfter is the age at which Status calls an open transaction
// hanging.
func StatusHangingAfter(d time.Duration) StatusOption { return status.HangingAfter(d) }

// WriteHangingTable writes the open transactions txns, older than after,
// as a table.
func WriteHangingTable(w io.Writer, txns []status.OpenTxn, after time.Duration) error {
	return status.WriteHangingTable(w, txns, after)
}

// Verify checks that a topology's outputs are exactly once.
func Verify(ctx context.Context, cfg VerifyConfig) (*VerifyReport, error) {
	return verify.Run(ctx, cfg)
}

// ParseResetTarget returns the reset target of the reset flags.
func ParseResetTarget(earliest, latest bool, datetime, offsets string) (ResetTarget, error) {
	return reset.ParseTarget(earliest, latest, datetime, offsets)
}

// CheckGroupIdle returns an error while consumer group has live members.
func CheckGroupIdle(ctx context.Context, adm *kadm.Client, group string) error {
	return reset.CheckIdle(ctx, adm, group)
}

// PlanStageReset plans moving the committed offsets of stage (group,
// reading topic) to t.
func PlanStageReset(ctx context.Context, adm *kadm.Client, stage, group, topic string, t ResetTarget) (ResetPlan, error) {
	return reset.PlanStage(ctx, adm, stage, group, topic, t)
}

// ExecuteStageReset commits the offsets of p.
func ExecuteStageReset(ctx context.Context, adm *kadm.Client, p ResetPlan) error {
	return reset.ExecuteStage(ctx, adm, p)
}

// SinkGroup returns the consumer group of sink s of f.
func SinkGroup(f *topology.File, s *topology.Sink) string {
	return pgsink.SinkConfig(f, s, "reset").Group()
}

// PlanSinkReset plans moving the positions that sink s stores in
// PostgreSQL to t.
func PlanSinkReset(ctx context.Context, adm *kadm.Client, f *topology.File, s *topology.Sink, t ResetTarget) (ResetPlan, error) {
	return reset.PlanSink(ctx, adm, pgsink.SinkConfig(f, s, "reset"), t)
}

// ExecuteSinkReset stores the positions of p.
func ExecuteSinkReset(ctx context.Context, f *topology.File, s *topology.Sink, p ResetPlan) error {
	return reset.ExecuteSink(ctx, pgsink.SinkConfig(f, s, "reset"), p)
}

// Redrive writes dead letters back to their stage's input.
func Redrive(ctx context.Context, cfg RedriveConfig) (RedriveReport, error) {
	fps, err := FailpointsFromEnv()
	if err != nil {
		return RedriveReport{}, err
	}
	cfg.Failpoints.List = fps
	return redrive.Run(ctx, cfg)
}

// RunDemo runs the embedded demo, writing its story to w.
func RunDemo(ctx context.Context, w io.Writer, o DemoOptions) (DemoSummary, error) {
	return demo.Run(ctx, w, o)
}

// NewSinkMetrics registers the sinks' metrics on reg.
func NewSinkMetrics(reg prometheus.Registerer) (*SinkMetrics, error) { return pgsink.NewMetrics(reg) }

// NewSink builds sink s of f for instance.
func NewSink(f *topology.File, s *topology.Sink, instance string, log *slog.Logger, fps []Failpoint, m *SinkMetrics, kopts []kgo.Opt) (*Sink, error) {
	opts := []pgsink.Option{pgsink.WithLogger(log), pgsink.WithFailpoints(fps...), pgsink.WithKafkaOptions(kopts...)}
	if m != nil {
		opts = append(opts, pgsink.WithMetrics(m))
	}
	return pgsink.New(pgsink.SinkConfig(f, s, instance), opts...)
}
