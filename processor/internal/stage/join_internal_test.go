package stage

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/exactly-io/exactly/processor/transform"
)

// TestJoinCompactionLagWarning: a table topic whose min.compaction.lag.ms
// is below the history retention (or unset) gets a warning at start; one
// at or above it gets none.
func TestJoinCompactionLagWarning(t *testing.T) {
	j := &joinStep{j: &transform.Join{HistoryRetention: time.Hour}, stepInfo: stepInfo{changelog: "customers"}}
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		lag  *string
		warn bool
	}{
		{"unset", nil, true},
		{"below", str("60000"), true},
		{"equal", str("3600000"), false},
		{"above", str("7200000"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			var configs []kadm.Config
			if tc.lag != nil {
				configs = append(configs, kadm.Config{Key: "min.compaction.lag.ms", Value: tc.lag})
			}
			j.checkCompactionLag(slog.New(slog.NewTextHandler(&buf, nil)), configs)
			if got := strings.Contains(buf.String(), "may compact away versions within history_retention"); got != tc.warn {
				t.Fatalf("warned %v, want %v: %s", got, tc.warn, buf.String())
			}
		})
	}
}
