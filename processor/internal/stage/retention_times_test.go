package stage

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

func TestParseTopicTimes(t *testing.T) {
	cfg := func(kv ...string) []kadm.Config {
		var cs []kadm.Config
		for i := 0; i < len(kv); i += 2 {
			v := kv[i+1]
			cs = append(cs, kadm.Config{Key: kv[i], Value: &v})
		}
		return cs
	}
	day := 24 * time.Hour
	for _, c := range []struct {
		name      string
		configs   []kadm.Config
		retention time.Duration
		logAppend bool
	}{
		{"default policy", cfg("retention.ms", "86400000"), day, false},
		{"delete", cfg("cleanup.policy", "delete", "retention.ms", "86400000"), day, false},
		{"compact and delete", cfg("cleanup.policy", "compact, delete", "retention.ms", "86400000"), day, false},
		{"compacted only", cfg("cleanup.policy", "compact", "retention.ms", "86400000"), 0, false},
		{"kept for ever", cfg("retention.ms", "-1"), 0, false},
		{"log append time", cfg("retention.ms", "86400000", "message.timestamp.type", "LogAppendTime"), day, true},
	} {
		tt := parseTopicTimes(c.configs)
		if tt.retention != c.retention || tt.logAppend != c.logAppend {
			t.Errorf("%s: retention %v, log append %v; want %v, %v", c.name, tt.retention, tt.logAppend, c.retention, c.logAppend)
		}
		old := time.Now().Add(-8 * day)
		if got, want := tt.readableFor(old, time.Now()), c.retention == 0 || c.logAppend; got != want {
			t.Errorf("%s: a record 8 days old readable %v, want %v", c.name, got, want)
		}
	}
}
