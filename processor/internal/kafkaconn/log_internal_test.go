package kafkaconn

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaLoggerLevels: franz-go's errors and warnings are written at
// Warn, each message once per kafkaLogEvery with the count left out, and
// its info at Debug.
func TestKafkaLoggerLevels(t *testing.T) {
	var buf bytes.Buffer
	l := KafkaLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for range 5 {
		l.Log(kgo.LogLevelError, "producer fenced", "err", "PRODUCER_FENCED")
	}
	l.Log(kgo.LogLevelInfo, "beginning transaction")
	out := buf.String()
	if n := strings.Count(out, "producer fenced"); n != 1 || strings.Contains(out, "level=ERROR") || !strings.Contains(out, `level=WARN msg="kafka: producer fenced"`) {
		t.Fatalf("five franz-go errors logged as:\n%s\nwant one WARN line", out)
	}
	if !strings.Contains(out, `level=DEBUG msg="kafka: beginning transaction"`) {
		t.Fatalf("franz-go info not at Debug:\n%s", out)
	}
	k := l.(*kgoLogger)
	if n, ok := k.allow("producer fenced", time.Now().Add(kafkaLogEvery)); !ok || n != 4 {
		t.Fatalf("after %s: allow = %d, %v; want the 4 left out counted", kafkaLogEvery, n, ok)
	}
}
