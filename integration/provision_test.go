//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `exactly topics create` gives the broker's own reason for refusing a
// topic, not only the error code's description: "INVALID_CONFIG:
// Configuration is invalid." alone does not say which setting.
func TestTopicsCreateGivesTheBrokersReason(t *testing.T) {
	t.Parallel()
	topic := uniqueName("badcfg")
	path := filepath.Join(t.TempDir(), "t.yaml")
	src := fmt.Sprintf("version: 1\nkafka: { brokers: [%q] }\ntopics:\n  - { name: %s, partitions: 1, config: { retention.mss: \"1000\" } }\nstages: []\n", brokers(t), topic)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code, _ := exactlyRun(t, nil, time.Minute, "topics", "create", path)
	if code != 1 || !strings.Contains(out, "INVALID_CONFIG") || !strings.Contains(out, "Unknown topic config name: retention.mss") {
		t.Fatalf("exit %d, want 1 naming the broker's reason:\n%s", code, out)
	}
}
