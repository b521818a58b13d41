package kafkaconn

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaLogger returns a franz-go logger that writes to l. franz-go's Info
// lines (joins, heartbeats, transaction steps) are routine and go to
// Debug. Its warnings and errors go to Warn: they are requests it retries
// or errors it also returns to us, which the stage or sink handles and
// reports at the level they deserve (a session rebuilt after a fence or a
// transaction timeout, say); franz-go logs the same error once per request
// while it retries, so each message is written at most once per
// kafkaLogEvery, with the count of those left out.
func KafkaLogger(l *slog.Logger) kgo.Logger {
	return &kgoLogger{l: l, last: map[string]*logged{}}
}

// kafkaLogEvery is how often one franz-go message is written at most.
const kafkaLogEvery = 10 * time.Second

type kgoLogger struct {
	l    *slog.Logger
	mu   sync.Mutex
	last map[string]*logged // by message
}

// logged is when a message was last written, and how often it came since.
type logged struct {
	at      time.Time
	dropped int
}

func (k *kgoLogger) Level() kgo.LogLevel {
	switch {
	case k.l.Enabled(context.Background(), slog.LevelDebug):
		return kgo.LogLevelInfo
	case k.l.Enabled(context.Background(), slog.LevelWarn):
		return kgo.LogLevelWarn
	default:
		return kgo.LogLevelError
	}
}

func (k *kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level != kgo.LogLevelError && level != kgo.LogLevelWarn {
		k.l.Log(context.Background(), slog.LevelDebug, "kafka: "+msg, keyvals...)
		return
	}
	dropped, ok := k.allow(msg, time.Now())
	if !ok {
		return
	}
	if dropped > 0 {
		keyvals = append(keyvals, "repeated", dropped)
	}
	k.l.Log(context.Background(), slog.LevelWarn, "kafka: "+msg, keyvals...)
}

// allow reports whether msg may be written at now, and how many times it
// was left out since it last was.
func (k *kgoLogger) allow(msg string, now time.Time) (int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.last[msg]
	if e == nil {
		if len(k.last) > 1000 { // messages are constant text; bound it anyway
			clear(k.last)
		}
		k.last[msg] = &logged{at: now}
		return 0, true
	}
	if now.Sub(e.at) < kafkaLogEvery {
		e.dropped++
		return 0, false
	}
	n := e.dropped
	e.at, e.dropped = now, 0
	return n, true
}
