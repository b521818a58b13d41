package processor

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoLogger sends franz-go's logs to slog, one level down: the client's
// Info lines (joins, heartbeats, transaction steps) are routine for us.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel {
	switch {
	case k.l.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelInfo
	case k.l.Enabled(context.Background(), slog.LevelInfo):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lvl := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		lvl = slog.LevelWarn
	case kgo.LogLevelWarn:
		lvl = slog.LevelInfo
	}
	k.l.Log(context.Background(), lvl, "kafka: "+msg, keyvals...)
}
