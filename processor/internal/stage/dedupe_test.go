package stage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/exactly-io/exactly/processor/deadletter"
	"github.com/exactly-io/exactly/processor/internal/failpoint"
	"github.com/exactly-io/exactly/processor/internal/fault"
	"github.com/exactly-io/exactly/processor/internal/stage"
	"github.com/exactly-io/exactly/processor/transform"
	"github.com/exactly-io/exactly/topology"
)

const changelogTopic = "exactly-clean-dedupe-changelog"

// dedupeCluster is a kfake cluster with the stage's topics and, unless
// changelog is nil, a changelog topic with these settings.
func dedupeCluster(t *testing.T, changelog *topology.Topic) []string {
	t.Helper()
	seeds := newCluster(t)
	if changelog != nil {
		cfg := map[string]*string{}
		for k, v := range changelog.Config {
			cfg[k] = &v
		}
		if _, err := adminFor(t, seeds).CreateTopic(context.Background(), changelog.Partitions, 1, cfg, changelog.Name); err != nil {
			t.Fatal(err)
		}
	}
	return seeds
}

func compactChangelog(partitions int32) *topology.Topic {
	return &topology.Topic{Name: changelogTopic, Partitions: partitions, Config: map[string]string{"cleanup.policy": "compact"}}
}

// dedupePipeline compiles stage "clean" with a dedupe step on event_id,
// then a func step fn if not nil.
func dedupePipeline(t *testing.T, fn ...transform.Func) *transform.Pipeline {
	t.Helper()
	reg, step := transform.NewRegistry(), ""
	if len(fn) > 0 {
		if err := reg.Register("fn", fn[0]); err != nil {
			t.Fatal(err)
		}
		step = "      - func: fn\n"
	}
	return cleanPipeline(t, reg, "      - dedupe: { id: value.event_id, retention: 1h }\n"+step)
}

func dedupeStage(t *testing.T, seeds []string, opts ...stage.Option) *stage.Stage {
	t.Helper()
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
		CommitInterval: 20 * time.Millisecond, MaxRecords: 50, StateDir: t.TempDir(),
	}, append([]stage.Option{stage.WithTransform(dedupePipeline(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStageDedupeAbortRollsBack: a transaction aborted for a transient
// fault (retried in the same process) leaves no ID in the store: its
// records, polled again, are processed, not dropped as their own
// duplicates.
func TestStageDedupeAbortRollsBack(t *testing.T) {
	seeds := dedupeCluster(t, compactChangelog(3))
	const n = 300
	dups := produceWithDuplicates(t, seeds, n)
	fail := failTransiently(2, func(r transform.Record) bool { return bytes.Contains(r.Raw, []byte(`"e-120"`)) })
	flaky := func(_ context.Context, r transform.Record) ([]transform.Record, error) {
		if err := fail(r); err != nil {
			return nil, err
		}
		return []transform.Record{r}, nil
	}
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
		CommitInterval: 20 * time.Millisecond, MaxRecords: 50, StateDir: t.TempDir(),
	}, stage.WithTransform(dedupePipeline(t, flaky)))
	if err != nil {
		t.Fatal(err)
	}
	err = runUntilStats(t, s, func(st stage.Stats) bool {
		return st.Produced+st.DeadLettered+st.Deduplicated >= int64(n+dups+2)
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Aborted < 2 || st.Deduplicated != int64(dups) {
		t.Fatalf("stats %+v: want 2 aborts and %d deduplicated", st, dups)
	}
	checkDeduped(t, seeds, n)
}

// produceWithDuplicates writes events e-0..e-(n-1), then every fifth of
// them again with the same key, each group with timestamps a minute apart
// (within the retention), and two records without an ID. It returns the
// number of resent duplicates.
func produceWithDuplicates(t *testing.T, seeds []string, n int) int {
	t.Helper()
	cl := newClient(t, seeds)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []*kgo.Record
	rec := func(i int, at time.Time) *kgo.Record {
		id := "e-" + strconv.Itoa(i)
		return &kgo.Record{Topic: inTopic, Key: []byte(id), Value: fmt.Appendf(nil, `{"event_id":%q,"n":%d}`, id, i), Timestamp: at}
	}
	for i := range n {
		recs = append(recs, rec(i, base))
	}
	dups := 0
	for i := 0; i < n; i += 5 {
		recs = append(recs, rec(i, base.Add(time.Minute)))
		dups++
	}
	recs = append(recs,
		&kgo.Record{Topic: inTopic, Key: []byte("x"), Value: []byte(`{"n":1}`), Timestamp: base},
		&kgo.Record{Topic: inTopic, Key: []byte("y"), Value: []byte(`{"event_id":null}`), Timestamp: base})
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return dups
}

// checkDeduped drains the output and dead letters: every event once, the
// two records without an ID dead-lettered by the dedupe step.
func checkDeduped(t *testing.T, seeds []string, n int) {
	t.Helper()
	checkOutputsOnce(t, seeds, n)
	dlq := drain(t, seeds, dlqTopic)
	if len(dlq) != 2 {
		t.Fatalf("dead letters: %d, want 2", len(dlq))
	}
	for _, r := range dlq {
		if step := header(r, deadletter.HeaderStep); step != "transform[0] dedupe" {
			t.Errorf("dead letter %q: step %q, want transform[0] dedupe", r.Key, step)
		}
	}
}

func TestStageDedupe(t *testing.T) {
	seeds := dedupeCluster(t, compactChangelog(3))
	const n = 300
	dups := produceWithDuplicates(t, seeds, n)
	s := dedupeStage(t, seeds)
	err := runUntilStats(t, s, func(st stage.Stats) bool {
		return st.Produced+st.DeadLettered+st.Deduplicated >= int64(n+dups+2)
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Deduplicated != int64(dups) || st.Produced != n {
		t.Fatalf("stats %+v, want %d deduplicated and %d produced", st, dups, n)
	}
	checkDeduped(t, seeds, n)
	// The changelog holds every ID once, in its record key's partition.
	ids := map[string]int{}
	for _, r := range drain(t, seeds, changelogTopic) {
		if len(r.Key) > 0 {
			ids[string(r.Key)]++
		}
	}
	if len(ids) != n {
		t.Fatalf("changelog holds %d IDs, want %d", len(ids), n)
	}
}

// TestStageDedupeCrashRecovery: a crash before or after a commit, then a
// restart that restores the stores from the changelog; duplicates resent
// after the crash are still dropped, and no event is lost or doubled.
func TestStageDedupeCrashRecovery(t *testing.T) {
	for _, fp := range []string{failpoint.CrashBeforeCommit, failpoint.CrashAfterCommit} {
		t.Run(fp, func(t *testing.T) {
			seeds := dedupeCluster(t, compactChangelog(3))
			const n = 600
			dups := produceWithDuplicates(t, seeds, n)
			before := crashStage(t, dedupeStage, seeds, fp, 4)
			if before.Committed < 3 {
				t.Fatalf("committed %d transactions before the crash", before.Committed)
			}
			restarted := dedupeStage(t, seeds)
			err := runUntilStats(t, restarted, func(st stage.Stats) bool {
				return before.Produced+before.DeadLettered+before.Deduplicated+st.Produced+st.DeadLettered+st.Deduplicated >= int64(n+dups+2)
			})
			if err != nil {
				t.Fatal(err)
			}
			if got := before.Deduplicated + restarted.Stats().Deduplicated; got != int64(dups) {
				t.Errorf("deduplicated %d, want %d", got, dups)
			}
			checkDeduped(t, seeds, n)
		})
	}
}

func TestStageDedupeStartCheck(t *testing.T) {
	for _, tc := range []struct {
		name      string
		changelog *topology.Topic
		want      string
	}{
		{name: "missing", want: `the dedupe changelog topic "exactly-clean-dedupe-changelog" does not exist`},
		{name: "partitions", changelog: compactChangelog(2), want: `has 2 partitions, the input topic "in" has 3`},
		{name: "not compacted", changelog: &topology.Topic{Name: changelogTopic, Partitions: 3, Config: map[string]string{"cleanup.policy": "delete"}},
			want: "has cleanup.policy=delete, want compact"},
		// compact,delete also deletes segments past retention.ms.
		{name: "compacted and deleted", changelog: &topology.Topic{Name: changelogTopic, Partitions: 3, Config: map[string]string{"cleanup.policy": "compact,delete"}},
			want: "has cleanup.policy=compact,delete, want compact alone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds := dedupeCluster(t, tc.changelog)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := dedupeStage(t, seeds).Run(ctx)
			var ce *fault.ConfigError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want a config error with %q", err, tc.want)
			}
		})
	}
}

// TestStageDedupeStateDirUnwritable: a state dir that cannot be made (the
// default one in the container image, which has no /tmp) stops the stage
// at start with a config error that says what to do.
func TestStageDedupeStateDirUnwritable(t *testing.T) {
	seeds := dedupeCluster(t, compactChangelog(3))
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: seeds,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic, StateDir: filepath.Join(file, "state"),
	}, stage.WithTransform(dedupePipeline(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = s.Run(ctx)
	var ce *fault.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "state dir: ") || !strings.Contains(err.Error(), "needs a writable --state-dir") {
		t.Fatalf("Run = %v, want a config error naming the state dir and --state-dir", err)
	}
}

func TestNewRejectsDedupeAtLeastOnce(t *testing.T) {
	_, err := stage.New(stage.Config{
		Stage: "clean", InstanceID: "i1", Brokers: []string{"127.0.0.1:1"}, Guarantee: stage.AtLeastOnce,
		Input: inTopic, Output: outTopic, DeadLetter: dlqTopic,
	}, stage.WithTransform(dedupePipeline(t)))
	if err == nil || !strings.Contains(err.Error(), "the dedupe step needs guarantee exactly-once") {
		t.Fatalf("New = %v, want a refusal of at-least-once", err)
	}
}
