package kafkaconn

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaLogger returns a franz-go logger that writes to l. franz-go's Info
// lines (joins, heartbeats, transaction steps) are routine and go to
// Debug; its warnings (a broker that cannot be reached, say) and errors
// keep their level.
func KafkaLogger(l *slog.Logger) kgo.Logger { return kgoLogger{l} }

type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	switch {
	case k.l.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelInfo
	case k.l.Enabled(context.Background(), slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelError
	case kgo.LogLevelWarn:
		lvl = slog.LevelWarn
	}
	k.l.Log(context.Background(), lvl, "kafka: "+msg, keyvals...)
}
