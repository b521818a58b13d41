//go:build integration

package integration

// Helpers of the outside attack on issue 13 (c13b_*_test.go).

import (
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// readFile returns the content of path or fails the test.
func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dbName returns the database of PG_DSN.
func dbName(t testing.TB) string {
	t.Helper()
	u, err := url.Parse(pgDSN(t))
	if err != nil {
		t.Fatalf("PG_DSN is not a URL: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// withUser returns dsn (a URL) with its user replaced by user and no
// password.
func withUser(t testing.TB, dsn, user string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("PG_DSN is not a URL: %v", err)
	}
	u.User = url.User(user)
	return u.String()
}

// deleteTopic deletes topic with Kafka's TopicCommand and waits until the
// broker no longer knows it.
func deleteTopic(t testing.TB, topic string) {
	t.Helper()
	if out, err := topicTool(t, "--delete", "--topic", topic); err != nil {
		t.Fatalf("TopicCommand --delete %s: %v\n%s", topic, err, out)
	}
	eventually(t, time.Minute, func() bool { id, _ := topicInfo(t, topic); return id == "" },
		func() string { return "topic " + topic + " still exists after --delete" })
}
